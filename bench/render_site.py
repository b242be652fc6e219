"""The loopback site `python -m bench render` crawls: pages whose content arrives by fetch() after load, so that
only a browser sees it, and, for the render="auto" case, hosts whose pages carry the same content in their HTML.

A page (`/page/<n>`) is a shell of about 1 KB whose script fetches `/data/<n>.json` (a title and 8 to 14
paragraphs, about 3 KB, drawn with random.Random(n): every page differs, the same page is the same in every
run) and writes it into `#content`, marking it `.ready` (READY, what every contender waits for). A static host
serves the same markup already in the page, with no script: a plain fetch sees what a browser would.

Each host is a ThreadingHTTPServer on its own loopback address (127.0.0.1, 127.0.0.2, ...) and one port, so
that they are different hosts to anything that keys on the host name. The site records, with time.monotonic(),
its first page hit and every hit of a page's last request (the data of a dynamic page, the page itself of a
static one): the moment a contender had that page whole, which is what the bench times and buckets memory by.
"""
import html
import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

READY = "#content.ready"        # the selector every contender waits for: the content is in
WORDS = ("batch", "crawl", "queue", "lease", "worker", "browser", "render", "page", "host", "item", "flush",
         "ledger", "task", "retry", "proxy", "cookie", "script", "fetch", "layout", "paint", "frame", "socket",
         "signal", "memory", "thread", "timeout", "window", "cursor", "schema", "record", "number", "letter")
PARAGRAPHS = (8, 14)
SENTENCES = (3, 6)

SCRIPT = """<script>
fetch("/data/%d.json").then(function (r) { return r.json(); }).then(function (data) {
  var box = document.getElementById("content");
  box.innerHTML = data.html;
  box.className = "ready";
});
</script>"""


def content(n: int) -> dict:
    """Page n's title and paragraphs, the same in every run."""
    rng = random.Random(n)

    def sentence() -> str:
        words = [rng.choice(WORDS) for _ in range(rng.randint(6, 14))]
        return " ".join(words).capitalize() + "."

    paragraphs = [" ".join(sentence() for _ in range(rng.randint(*SENTENCES))) for _ in range(rng.randint(*PARAGRAPHS))]
    return {"title": f"Page {n}: {sentence()}", "paragraphs": paragraphs}


def content_html(n: int) -> str:
    """The markup of page n's content, as the script writes it and as a static page carries it."""
    page = content(n)
    return f"<h1>{html.escape(page['title'])}</h1>" + "".join(f"<p>{html.escape(p)}</p>" for p in page["paragraphs"])


def page_html(n: int, static: bool) -> str:
    head = f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Page {n}</title></head><body>'
    nav = "<nav>" + "".join(f'<a href="/page/{n + k}">next {k}</a> ' for k in range(1, 6)) + "</nav>"
    if static:
        return f'{head}{nav}<main><div id="content" class="ready">{content_html(n)}</div></main></body></html>'
    return f'{head}{nav}<main><div id="content">loading...</div></main>{SCRIPT % n}</body></html>'


class Hits:
    """The site's clock: its first page hit, and the moment each page was had whole (its last request)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.first_page: Optional[float] = None
        self.whole: list = []           # time.monotonic() of each page's last request, in order

    def page(self, static: bool) -> None:
        now = time.monotonic()
        with self._lock:
            if self.first_page is None:
                self.first_page = now
            if static:
                self.whole.append(now)

    def data(self) -> None:
        now = time.monotonic()
        with self._lock:
            self.whole.append(now)

    def reset(self) -> None:
        with self._lock:
            self.first_page, self.whole = None, []


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"     # keep-alive, as a browser expects
    disable_nagle_algorithm = True    # the head and the body are two writes: no 40 ms wait between them
    server_version = "bench-render"
    static = False                    # set per host (a subclass each)
    hits: Hits

    def do_GET(self) -> None:
        parts = self.path.split("?")[0].strip("/").split("/")
        if len(parts) == 2 and parts[0] == "page" and parts[1].isdigit():
            self.hits.page(self.static)
            self._send(page_html(int(parts[1]), self.static), "text/html; charset=utf-8")
        elif len(parts) == 2 and parts[0] == "data" and parts[1].endswith(".json") and parts[1][:-5].isdigit():
            self.hits.data()
            self._send(json.dumps({"html": content_html(int(parts[1][:-5]))}), "application/json")
        else:
            self._send("not here", "text/plain", 404)

    def _send(self, text: str, kind: str, status: int = 200) -> None:
        body = text.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args) -> None:      # noqa: A002 (http.server's name)
        """Quiet: a line per request would cost more than the page."""


class RenderSite:
    """`hosts` loopback hosts on one port; the first `dynamic` of them serve shells (content by fetch()), the
    others static pages. `url(n)`: page n on host n % hosts."""

    def __init__(self, hosts: int = 1, dynamic: Optional[int] = None):
        self.hits = Hits()
        self.dynamic = hosts if dynamic is None else dynamic
        self.servers: list = []
        self.port = 0
        for index in range(hosts):
            handler = type("Handler", (_Handler,), {"static": index >= self.dynamic, "hits": self.hits})
            server = ThreadingHTTPServer((f"127.0.0.{index + 1}", self.port), handler)
            server.daemon_threads = True
            self.port = server.server_address[1]
            self.servers.append(server)

    def url(self, n: int) -> str:
        return f"http://127.0.0.{n % len(self.servers) + 1}:{self.port}/page/{n}"

    def describe(self) -> str:
        static = len(self.servers) - self.dynamic
        return (f"{len(self.servers)} host(s) on 127.0.0.x:{self.port} (http.server, threaded), {self.dynamic} "
                f"rendering by fetch() after load" + (f", {static} static" if static else ""))

    def __enter__(self) -> "RenderSite":
        for server in self.servers:
            threading.Thread(target=server.serve_forever, name="render-site", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()
