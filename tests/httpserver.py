"""A real HTTP server on 127.0.0.1 for the test suite.

    with TestSite() as site:
        requests.get(site.url("/page/3"))
        assert site.hits("/page/3") == 1

As a pytest fixture: `site` in tests/conftest.py (a server per test).

Routes (any method reaches any route; hits are counted per path, query string
ignored, before the route answers):

  /page/<n>          UTF-8 HTML, Content-Type "text/html; charset=utf-8":
                     <title>Page n</title>, <h1>Title n</h1>, <a href="/page/<n+1>">next</a>,
                     <p class="n">n</p>.
  /flaky/<key>?fail=N&status=503[&retry_after=S]
                     the first N hits of this path answer `status` (default 503), with
                     `Retry-After: S` if given; later hits answer 200 with a small HTML page.
  /status/<code>     answers <code> with a short text body (none for 204 and 304).
  /redirect?to=<path>
                     302 to <path>.
  /slow?seconds=S    sleeps S seconds (default 1), then 200.
  /json              {"ok": true, "items": [1, 2, 3]} as application/json.
  /set-cookie?name=value[&...]
                     200 with one Set-Cookie header per query parameter.
  /echo              200 JSON describing the request: "method", "path" (with the query),
                     "headers" (names lower-cased), "body" (decoded as UTF-8) and
                     "client_port" (which connection carried it: pooled clients reuse one).
  /enc/<case>        an HTML page whose bytes and declarations follow ENCODING_CASES
                     below; its <p> holds ENCODING_CASES[case].text.
  /drop              closes the connection without answering (a connection error).

Anything else answers 404. The server speaks HTTP/1.1 with keep-alive and logs nothing.
"""
import json
import re
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import NamedTuple
from urllib.parse import parse_qs, urlsplit


class EncodingCase(NamedTuple):
    content_type: str
    codec: str  # how the page's bytes are encoded
    meta: str   # a <meta> tag for the <head>, or ""
    text: str   # the text of the page's <p>


_CHINESE = "中文网页：这一段用来检查解码是否正确。"
_LONG_CHINESE = "中文网页没有声明编码，只能靠统计检测。" * 8 + "这一段足够长，检测器可以可靠地识别简体中文的字节。"

ENCODING_CASES = {
    "gbk-header": EncodingCase("text/html; charset=gbk", "gbk", "", _CHINESE),
    "gbk-meta": EncodingCase("text/html", "gbk", '<meta charset="gbk">', _CHINESE),
    "gbk-http-equiv": EncodingCase(
        "text/html", "gbk", '<meta http-equiv="Content-Type" content="text/html; charset=gbk">', _CHINESE),
    # "镕" is in GBK but not in GB2312: pages labelled gb2312 often contain such characters.
    "gb2312-header": EncodingCase("text/html; charset=gb2312", "gbk", "", "朱镕基，中文"),
    "gbk-undeclared": EncodingCase("text/html", "gbk", "", _LONG_CHINESE),
    # The header is the stronger declaration when it and the page disagree.
    "header-over-meta": EncodingCase("text/html; charset=gbk", "gbk", '<meta charset="utf-8">', _CHINESE),
    "utf8-undeclared": EncodingCase("text/html", "utf-8", "", _CHINESE),
    # Too little text for a detector (chardet 5.1 calls it ISO-8859-9).
    "utf8-short-undeclared": EncodingCase("text/html", "utf-8", "", "Café au lait"),
    "utf8-bom": EncodingCase("text/html", "utf-8-sig", "", _CHINESE),
    # Pages labelled ISO-8859-1 are usually windows-1252 (curly quotes at 0x93/0x94).
    "latin1-header": EncodingCase("text/html; charset=iso-8859-1", "cp1252", "", "Café “déjà vu”"),
    "bogus-header": EncodingCase("text/html; charset=nonexistent-x", "utf-8", "", _CHINESE),
}


def encoded_page(case):
    html = (f"<html><head>{case.meta}<title>encoding</title></head>"
            f"<body><p>{case.text}</p></body></html>")
    return html.encode(case.codec)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so connection pooling is observable
    # Headers and body leave in separate writes; with Nagle on, the client's delayed ACK adds
    # ~40 ms to every keep-alive response, and benchmarks would measure that instead of batchd.
    disable_nagle_algorithm = True

    def do_GET(self):
        parts = urlsplit(self.path)
        self.query = {name: values[-1] for name, values in parse_qs(parts.query).items()}
        self.body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.site.record_hit(parts.path)
        for pattern, route in _ROUTES:
            found = pattern.fullmatch(parts.path)
            if found:
                return route(self, *found.groups())
        return self.reply(404, b"no such route", "text/plain")

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def reply(self, status, body, content_type, headers=()):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def reply_html(self, html, status=200, headers=()):
        self.reply(status, html.encode("utf-8"), "text/html; charset=utf-8", headers)

    def page(self, number):
        n = int(number)
        self.reply_html(f'<html><head><title>Page {n}</title></head><body><h1>Title {n}</h1>'
                        f'<a href="/page/{n + 1}">next</a><p class="n">{n}</p></body></html>')

    def flaky(self, key):
        if self.server.site.hits(urlsplit(self.path).path) <= int(self.query.get("fail", 1)):
            retry_after = self.query.get("retry_after")
            headers = [("Retry-After", retry_after)] if retry_after else []
            return self.reply_html("<html><body>not yet</body></html>",
                                   int(self.query.get("status", 503)), headers)
        return self.reply_html(f"<html><head><title>flaky {key}</title></head><body><p>ok</p></body></html>")

    def status(self, code):
        code = int(code)
        body = b"" if code in (204, 304) else f"status {code}".encode()
        self.reply(code, body, "text/plain")

    def redirect(self):
        self.reply(302, b"", "text/plain", [("Location", self.query["to"])])

    def slow(self):
        time.sleep(float(self.query.get("seconds", 1)))
        self.reply_html("<html><body><p>slow</p></body></html>")

    def json_document(self):
        self.reply(200, json.dumps({"ok": True, "items": [1, 2, 3]}).encode(), "application/json")

    def set_cookie(self):
        self.reply(200, b"cookies set", "text/plain", [("Set-Cookie", f"{name}={value}; Path=/")
                                                       for name, value in self.query.items()])

    def echo(self):
        description = {
            "method": self.command,
            "path": self.path,
            "headers": {name.lower(): value for name, value in self.headers.items()},
            "body": self.body.decode("utf-8", errors="replace"),
            "client_port": self.client_address[1],
        }
        self.reply(200, json.dumps(description).encode(), "application/json")

    def encoding(self, name):
        case = ENCODING_CASES.get(name)
        if case is None:
            return self.reply(404, b"no such encoding case", "text/plain")
        return self.reply(200, encoded_page(case), case.content_type)

    def drop(self):
        self.close_connection = True  # the socket closes with nothing written

    def log_message(self, format, *args):
        pass  # the suite's output is for test results


_ROUTES = [
    (re.compile(r"/page/(\d+)"), _Handler.page),
    (re.compile(r"/flaky/([^/]+)"), _Handler.flaky),
    (re.compile(r"/status/(\d{3})"), _Handler.status),
    (re.compile(r"/redirect"), _Handler.redirect),
    (re.compile(r"/slow"), _Handler.slow),
    (re.compile(r"/json"), _Handler.json_document),
    (re.compile(r"/set-cookie"), _Handler.set_cookie),
    (re.compile(r"/echo"), _Handler.echo),
    (re.compile(r"/enc/([^/]+)"), _Handler.encoding),
    (re.compile(r"/drop"), _Handler.drop),
]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that gave up (a read-timeout test) is expected; anything else is a bug here.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class TestSite:
    """The server, run in a daemon thread for the life of a `with` block."""

    __test__ = False  # a helper, not a test class, whatever its name says to pytest

    def __init__(self):
        self._hits = Counter()
        self._hits_lock = threading.Lock()
        self._server = None

    def __enter__(self):
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.site = self
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         name="test-site", daemon=True).start()
        return self

    def __exit__(self, *exc_info):
        self._server.shutdown()
        self._server.server_close()

    def url(self, path="/"):
        return f"http://127.0.0.1:{self._server.server_port}{path}"

    def record_hit(self, path):
        with self._hits_lock:
            self._hits[path] += 1

    def hits(self, path):
        with self._hits_lock:
            return self._hits[path]

    def reset(self):
        with self._hits_lock:
            self._hits.clear()
