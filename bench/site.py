"""The site `python -m bench compare` crawls: documentation-like pages of about 95 KB each, made
deterministically from the page's number, served on loopback by nginx when it is installed, by a
small asyncio server of the bench's own otherwise.

A page (`/page/<n>`) has what a documentation page carries: a head with meta, link and script tags
(an inline analytics snippet and JSON-LD among them), a header with a search form, a nav of about 100
links in captioned sections, then an article: breadcrumbs, h1, a time, a lead paragraph, 7 to 10
sections (h2, some h3) of 30 to 60 paragraphs in all with inline markup (links, code, em, strong),
syntax-highlighted code blocks, a list, a note, one table; and a footer. Its text is drawn, with
random.Random(n), from a pool of sentences made once from a fixed seed: every page differs from every
other, the same page is the same in every run and every process, and making one takes about a
millisecond, so the pages are made before the clock starts.

Both servers record hits of /page/ paths, so that the bench can tell when a contender fetched its
first page and its last (`first_hit_since_reset`, `last_hit_since_reset`) and how many it fetched
(`hits_since_reset`).
"""
import asyncio
import html
import multiprocessing
import os
import random
import re
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Iterator, Optional

POOL_SEED = 20240611
SENTENCES = 6000          # the pool each page draws its prose from
CODE_LINES = 1500         # the pool of highlighted code lines
NAV_SECTIONS = 8
NAV_LINKS = 100
PARAGRAPHS = (30, 60)     # per page, spread over the sections
SENTENCES_PER_PARAGRAPH = (4, 8)
TABLE_ROWS = (10, 20)

MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_SYLLABLES = ("ba", "con", "de", "fig", "ge", "hash", "in", "ja", "ker", "lo", "mu", "net", "op", "pro",
              "qu", "ra", "sto", "ta", "un", "ver", "wal", "xe", "yo", "zer", "cache", "que", "tion",
              "ment", "ser", "vice", "load", "sync", "log", "shard", "tree", "node", "page", "row")


# -- the pages
class PageMaker:
    """Makes page n's HTML; the pools it draws from are made once, from POOL_SEED."""

    def __init__(self):
        pool = random.Random(POOL_SEED)
        self.words = sorted({self._word(pool) for _ in range(4000)})
        self.sentences = [self._sentence(pool) for _ in range(SENTENCES)]
        self.code_lines = [self._code_line(pool) for _ in range(CODE_LINES)]
        self.nav = self._nav(pool)
        self.footer = self._footer(pool)

    # the pools
    @staticmethod
    def _word(rng: random.Random) -> str:
        return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4)))

    def _phrase(self, rng: random.Random, low: int, high: int) -> str:
        return " ".join(rng.choice(self.words) for _ in range(rng.randint(low, high)))

    def _sentence(self, rng: random.Random) -> str:
        """Escaped text with inline markup, as prose in documentation has it."""
        words = [rng.choice(self.words) for _ in range(rng.randint(8, 26))]
        for i in rng.sample(range(len(words)), k=min(len(words), rng.randint(0, 4))):
            kind = rng.random()
            if kind < 0.35:
                words[i] = f"<code>{words[i]}_{rng.choice(self.words)}()</code>"
            elif kind < 0.6:
                words[i] = f'<a href="/page/{rng.randrange(100000)}#{words[i]}">{words[i]}</a>'
            elif kind < 0.8:
                words[i] = f"<em>{words[i]}</em>"
            else:
                words[i] = f"<strong>{words[i]}</strong>"
        text = " ".join(words)
        return text[0].upper() + text[1:] + rng.choice((".", ".", ".", ";", ":", "?"))

    def _code_line(self, rng: random.Random) -> str:
        name, other = rng.choice(self.words), rng.choice(self.words)
        shapes = (
            f'<span class="k">def</span> <span class="nf">{name}</span><span class="p">(</span>'
            f'<span class="n">{other}</span><span class="p">):</span>',
            f'    <span class="n">{name}</span> <span class="o">=</span> <span class="n">{other}</span>'
            f'<span class="o">.</span><span class="n">get</span><span class="p">(</span>'
            f'<span class="s2">&quot;{rng.choice(self.words)}&quot;</span><span class="p">)</span>',
            f'    <span class="k">for</span> <span class="n">{name}</span> <span class="ow">in</span> '
            f'<span class="n">{other}</span><span class="p">:</span>',
            f'        <span class="k">yield</span> <span class="n">{name}</span> <span class="o">+</span> '
            f'<span class="mi">{rng.randrange(1000)}</span>',
            f'    <span class="c1"># {html.escape(self._phrase(rng, 3, 9))}</span>',
        )
        return rng.choice(shapes)

    def _nav(self, rng: random.Random) -> str:
        """The same on every page, as a documentation site's sidebar is."""
        parts = ['<nav class="sidebar" aria-label="Main">']
        per_section = NAV_LINKS // NAV_SECTIONS
        for section in range(NAV_SECTIONS):
            parts.append(f'<p class="caption"><span class="caption-text">{self._phrase(rng, 1, 3).title()}'
                         '</span></p><ul>')
            for _ in range(per_section + (NAV_LINKS % NAV_SECTIONS if section == NAV_SECTIONS - 1 else 0)):
                target = rng.randrange(100000)
                parts.append(f'<li class="toctree-l1"><a class="reference internal" href="/page/{target}">'
                             f'{self._phrase(rng, 1, 4).capitalize()}</a></li>')
            parts.append("</ul>")
        parts.append("</nav>")
        return "".join(parts)

    def _footer(self, rng: random.Random) -> str:
        links = "".join(f'<li><a href="/page/{rng.randrange(100000)}">{self._phrase(rng, 1, 2).title()}</a></li>'
                        for _ in range(24))
        return (f'<footer class="site-footer"><div class="footer-links"><ul>{links}</ul></div>'
                f'<p class="copyright">&copy; 2010-2024 {self._phrase(rng, 2, 3).title()} contributors. '
                f'{self.sentences[0]}</p><p class="built-with">Built with a static site generator.</p></footer>')

    # a page
    def page(self, n: int) -> bytes:
        rng = random.Random(n)
        title = self._phrase(rng, 2, 5).capitalize()
        description = html.escape(self._phrase(rng, 12, 24))
        return "".join(("<!DOCTYPE html>\n", f'<html lang="en" data-page="{n}">',
                        self._head(rng, n, title, description), "<body>", self._header(n), self.nav,
                        self._article(rng, n, title), self.footer, "</body></html>\n")).encode("utf-8")

    def _head(self, rng: random.Random, n: int, title: str, description: str) -> str:
        sheets = "".join(f'<link rel="stylesheet" href="/_static/{name}.css?v={n % 97}" type="text/css">'
                         for name in ("pygments", "theme", "basic", "copybutton", "design", "custom", "print", "fonts"))
        scripts = "".join(f'<script defer src="/_static/{name}.js?v={n % 89}"></script>'
                          for name in ("documentation_options", "jquery", "underscore", "doctools", "clipboard",
                                       "copybutton", "search"))
        analytics = ("<script>window.dataLayer=window.dataLayer||[];function gtag(){dataLayer.push(arguments);}"
                     f"gtag('js',new Date());gtag('config','G-{rng.randrange(10**9):09d}',{{'page_path':'/page/{n}',"
                     "'anonymize_ip':true,'cookie_flags':'SameSite=None;Secure'}});</script>")
        json_ld = (f'<script type="application/ld+json">{{"@context":"https://schema.org","@type":"TechArticle",'
                   f'"headline":"{title}","description":"{description}","url":"/page/{n}",'
                   f'"dateModified":"2024-{1 + n % 12:02d}-{1 + n % 28:02d}"}}</script>')
        return (f'<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
                f'<meta name="description" content="{description}">'
                f'<meta name="keywords" content="{html.escape(self._phrase(rng, 5, 9)).replace(" ", ", ")}">'
                f'<meta property="og:title" content="{title}"><meta property="og:type" content="article">'
                f'<meta property="og:url" content="/page/{n}"><meta property="og:description" content="{description}">'
                f'<meta name="twitter:card" content="summary"><title>{title} &#8212; Documentation</title>'
                f'<link rel="canonical" href="/page/{n}"><link rel="icon" href="/_static/favicon.png">'
                f'<link rel="search" title="Search" href="/search.html"><link rel="index" href="/genindex.html">'
                f'<link rel="next" href="/page/{n + 1}"><link rel="prev" href="/page/{max(0, n - 1)}">'
                f'<link rel="preload" href="/_static/fonts/inter.woff2" as="font" crossorigin>'
                f'{sheets}{scripts}{analytics}{json_ld}</head>')

    @staticmethod
    def _header(n: int) -> str:
        versions = "".join(f'<option value="{v}"{" selected" if v == "3.2" else ""}>{v}</option>'
                           for v in ("dev", "3.2", "3.1", "3.0", "2.9", "2.8", "2.7", "2.6", "2.5", "2.4"))
        return ('<header class="site-header"><a class="logo" href="/page/0"><img src="/_static/logo.svg" alt="Logo" '
                'width="120" height="32"></a><form class="search" action="/search.html" method="get">'
                '<input type="search" name="q" placeholder="Search the docs" aria-label="Search">'
                f'<input type="hidden" name="from" value="{n}"></form><select class="version-switcher" '
                f'aria-label="Version">{versions}</select></header>')

    def _paragraph(self, rng: random.Random, css_class: str = "") -> str:
        count = rng.randint(*SENTENCES_PER_PARAGRAPH)
        opening = f'<p class="{css_class}">' if css_class else "<p>"
        return opening + " ".join(rng.choice(self.sentences) for _ in range(count)) + "</p>"

    def _code_block(self, rng: random.Random) -> str:
        lines = "\n".join(rng.choice(self.code_lines) for _ in range(rng.randint(8, 22)))
        return (f'<div class="highlight-python notranslate"><div class="highlight"><pre><code class="language-python">'
                f'{lines}</code></pre></div></div>')

    def _table(self, rng: random.Random) -> str:
        rows = "".join(f"<tr><td>{rng.choice(self.words)}</td><td>{rng.randrange(10000)}</td>"
                       f"<td>{html.escape(self._phrase(rng, 3, 8))}</td>"
                       f"<td>{rng.choice(('yes', 'no', 'n/a'))}</td></tr>"
                       for _ in range(rng.randint(*TABLE_ROWS)))
        return ('<table class="docutils align-default"><thead><tr><th>Name</th><th>Default</th>'
                f'<th>Meaning</th><th>Reloadable</th></tr></thead><tbody>{rows}</tbody></table>')

    def _article(self, rng: random.Random, n: int, title: str) -> str:
        paragraphs = rng.randint(*PARAGRAPHS)
        sections = rng.randint(7, 10)
        table_in = rng.randrange(sections)
        parts = [f'<main><article class="document" id="page-{n}"><ol class="breadcrumbs">'
                 f'<li><a href="/page/0">Docs</a></li><li><a href="/page/{n // 100}">{self._phrase(rng, 1, 3).title()}'
                 f'</a></li><li><a href="/page/{n // 10}">{self._phrase(rng, 1, 3).title()}</a></li></ol>'
                 f'<h1>{title}</h1><p class="meta">Updated <time datetime="2024-{1 + n % 12:02d}-{1 + n % 28:02d}">'
                 f'{1 + n % 28} {MONTHS[n % 12]}'
                 f' 2024</time></p>', self._paragraph(rng, "lead")]
        for section in range(sections):
            heading = self._phrase(rng, 2, 6).capitalize()
            anchor = re.sub(r"\W+", "-", heading.lower())
            parts.append(f'<section id="{anchor}-{section}"><h2>{heading}<a class="headerlink" '
                         f'href="#{anchor}-{section}" title="Link to this heading">&#182;</a></h2>')
            share = paragraphs // sections + (1 if section < paragraphs % sections else 0)
            for i in range(share):
                if i == share // 2 and rng.random() < 0.5:
                    parts.append(f"<h3>{self._phrase(rng, 2, 5).capitalize()}</h3>")
                parts.append(self._paragraph(rng))
            if rng.random() < 0.55:
                parts.append(self._code_block(rng))
            if section == table_in:
                parts.append(self._table(rng))
            if rng.random() < 0.3:
                items = "".join(f"<li>{rng.choice(self.sentences)}</li>" for _ in range(rng.randint(3, 7)))
                parts.append(f'<ul class="simple">{items}</ul>')
            if rng.random() < 0.2:
                parts.append(f'<div class="admonition note"><p class="admonition-title">Note</p>'
                             f"{self._paragraph(rng)}</div>")
            parts.append("</section>")
        parts.append("</article></main>")
        return "".join(parts)


def page_path(n: int) -> str:
    return f"/page/{n}"


def make_pages(count: int) -> Iterator[tuple]:
    """(path, HTML bytes) of pages 0 .. count-1."""
    maker = PageMaker()
    for n in range(count):
        yield page_path(n), maker.page(n)


# -- the servers
class _Hits:
    """Hits of /page/ paths in shared memory, so the site's process and the bench's agree: the first
    and the last hit's wall-clock time since the last `reset`, and the number of hits since."""

    def __init__(self):
        self.shared = multiprocessing.get_context("fork").RawArray("d", 3)    # first, last, count

    def reset(self) -> None:
        self.shared[0], self.shared[1], self.shared[2] = 0.0, 0.0, 0.0

    def record(self) -> None:
        # One writer (the site's event loop), so no lock.
        now = time.time()
        if self.shared[2] == 0:
            self.shared[0] = now
        self.shared[1] = now
        self.shared[2] += 1


class HeadsProtocol(asyncio.Protocol):
    """HTTP/1.1 with keep-alive (and pipelining), requests without a body: each request's head (its
    request line and headers) handed to `_answer`. Enough for requests' Session, and little Python per
    request, so that a site takes as little of the machine as it can (bench/hosts_site.py's too)."""

    buffer = b""
    transport = None

    def _answer(self, head: bytes) -> None:
        raise NotImplementedError

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.transport is not None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head, self.buffer = self.buffer[:end], self.buffer[end + 4:]
            self._answer(head)

    def connection_lost(self, exc) -> None:
        self.transport = None


class _PageProtocol(HeadsProtocol):
    """GET and HEAD of the pages."""

    def __init__(self, pages: dict, hits: _Hits):
        self.pages, self.hits = pages, hits

    def _answer(self, head: bytes) -> None:
        request_line, _, headers = head.partition(b"\r\n")
        method, target = (request_line.split(b" ") + [b"", b""])[:2]
        body = self.pages.get(target.split(b"?", 1)[0])
        if body is not None:
            self.hits.record()
            status = b"200 OK"
        else:
            body, status = b"not found", b"404 Not Found"
        closing = b"connection: close" in headers.lower()
        self.transport.write(b"HTTP/1.1 %s\r\nServer: bench-site\r\nContent-Type: text/html; charset=utf-8\r\n"
                             b"Content-Length: %d\r\n%s\r\n" % (status, len(body),
                                                                b"Connection: close\r\n" if closing else b""))
        if method != b"HEAD":
            self.transport.write(body)
        if closing:
            self.transport.close()
            self.transport = None


def _serve_pages(listener: socket.socket, pages: dict, hits: _Hits) -> None:
    """The site's process: one event loop on the listening socket made by the parent."""
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(loop.create_server(lambda: _PageProtocol(pages, hits), sock=listener))
    try:
        loop.run_until_complete(server.serve_forever())
    finally:
        loop.close()


class BuiltinSite:
    """The pages in memory, served by `_PageProtocol` in a process of its own (forked, so the pages
    are shared with this one), so that its work never waits for the bench's own threads."""

    kind = "builtin"

    def __init__(self, count: int):
        self.count = count
        self.hits = _Hits()
        self.pages: dict = {}
        self.process = None
        self.port = 0
        self.page_bytes = 0

    def __enter__(self):
        for path, body in make_pages(self.count):
            self.pages[path.encode()] = body
            self.page_bytes += len(body)
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1024)
        self.port = listener.getsockname()[1]
        self.process = multiprocessing.get_context("fork").Process(
            target=_serve_pages, args=(listener, self.pages, self.hits), name="bench-site", daemon=True)
        self.process.start()
        listener.close()
        self.pages.clear()           # the site's process has its own reference
        return self

    def __exit__(self, *exc_info):
        if self.process is not None and self.process.is_alive():
            self.process.terminate()
            self.process.join(10)

    def describe(self) -> str:
        return (f"built-in asyncio server (bench/site.py), pages in memory, {self.count} pages of "
                f"{self.page_bytes / self.count / 1024:.1f} KB on average")

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def reset(self) -> None:
        self.hits.reset()

    def first_hit_since_reset(self) -> Optional[float]:
        return self.hits.shared[0] or None

    def last_hit_since_reset(self) -> Optional[float]:
        return self.hits.shared[1] or None

    def hits_since_reset(self) -> int:
        return int(self.hits.shared[2])


NGINX_CONF = """\
worker_processes 1;
daemon off;
master_process on;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    log_format hits '$msec $status $request_uri $bytes_sent';
    access_log {dir}/access.log hits;
    sendfile on;
    tcp_nodelay on;{extra}
    keepalive_timeout 75s;
    keepalive_requests 1000000;
    types {{ }}
    default_type text/html;
    charset utf-8;
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {dir}/www;
        location / {{ }}
    }}
}}
"""


class NginxSite:
    """The pages as static files, served by an nginx of the bench's own (its config, its port, its
    logs; run as a child, not a daemon); hits read from its access log ($msec: sub-second times; each line
    also has the status and the bytes sent, headers and body, which bench/recrawl.py adds up)."""

    kind = "nginx"
    conf_extra = ""         # more directives of its http block (bench/archive.py's site gzips its pages)

    def __init__(self, count: int):
        self.count = count
        self.dir = tempfile.mkdtemp(prefix="bench-nginx-")
        self.process = None
        self.port = 0
        self.page_bytes = 0
        self.log_offset = 0

    def __enter__(self):
        try:
            self._write_pages()
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _write_pages(self) -> None:
        os.chmod(self.dir, 0o755)            # nginx's workers run as an unprivileged user
        os.makedirs(os.path.join(self.dir, "www", "page"))
        os.makedirs(os.path.join(self.dir, "tmp"))
        for path, body in make_pages(self.count):
            with open(os.path.join(self.dir, "www", path.lstrip("/")), "wb") as f:
                f.write(body)
            self.page_bytes += len(body)

    def _start(self) -> None:
        from servers import spare_port    # tests/servers.py (bench/batch.py puts tests/ on the path)
        self.port = spare_port()
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(dir=self.dir, port=self.port, extra=self.conf_extra))
        with open(os.path.join(self.dir, "stderr.log"), "ab") as log:
            self.process = subprocess.Popen(["nginx", "-e", os.path.join(self.dir, "error.log"), "-p", self.dir,
                                             "-c", conf], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not _accepts(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nginx did not start: {self._error_log()}")
            time.sleep(0.05)

    def _error_log(self) -> str:
        for name in ("error.log", "stderr.log"):
            try:
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    text = f.read()[-2000:]
                if text:
                    return text
            except FileNotFoundError:
                pass
        return "(no log)"

    def __exit__(self, *exc_info):
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(20)
        shutil.rmtree(self.dir, ignore_errors=True)

    def describe(self) -> str:
        version = subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip()
        version = version.split("/", 1)[-1] if "/" in version else version
        return (f"nginx {version} (static files, 1 worker process, sendfile), {self.count} pages of "
                f"{self.page_bytes / self.count / 1024:.1f} KB on average")

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def reset(self) -> None:
        self.log_offset = os.path.getsize(os.path.join(self.dir, "access.log"))

    def _hit_times(self) -> list:
        with open(os.path.join(self.dir, "access.log"), "rb") as f:
            f.seek(self.log_offset)
            lines = f.read().decode(errors="replace").splitlines()
        return [float(line.split(" ", 1)[0]) for line in lines
                if line.count(" ") >= 2 and line.split(" ")[2].startswith("/page/")]

    def first_hit_since_reset(self) -> Optional[float]:
        return min(self._hit_times(), default=None)

    def last_hit_since_reset(self) -> Optional[float]:
        return max(self._hit_times(), default=None)

    def hits_since_reset(self) -> int:
        return len(self._hit_times())


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def open_site(choice: str, count: int):
    """`auto`: nginx when it is installed, the built-in server otherwise."""
    if choice == "nginx" or (choice == "auto" and shutil.which("nginx")):
        if not shutil.which("nginx"):
            raise SystemExit("--site nginx: nginx is not installed (apt-get install nginx-light)")
        return NginxSite(count)
    return BuiltinSite(count)
