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
  /text?body=<text>  200 with <text> as text/plain (a list of proxies, one per line, say).
  /links[?base=<href>]
                     an HTML page of links (LINKS_PAGE): relative, absolute with spaces around, a
                     fragment, an <a> without href, a 404, a <link rel="next">, an <img src>; with
                     base=..., a <base href> of that value in its head.
  /flaky/<key>?fail=N&status=503[&retry_after=S]
                     the first N hits of this path answer `status` (default 503), with
                     `Retry-After: S` if given; later hits answer 200 with a small HTML page.
  /status/<code>     answers <code> with a short text body (none for 204 and 304).
  /redirect?to=<path>
                     302 to <path>.
  /slow?seconds=S    sleeps S seconds (default 1), then 200 with a page naming its URL (distinct pages,
                     as a real site's); the site keeps the most of these that were asleep at once
                     (most_in_flight).
  /json              {"ok": true, "items": [1, 2, 3]} as application/json.
  /set-cookie?name=value[&...]
                     200 with one Set-Cookie header per query parameter.
  /hook[/<name>]     a webhook receiver: the request's body and query are kept (site.received(path),
                     site.received_queries(path), in the order they came), then 204, or what
                     site.hook_answers[path] says: (status, body bytes, content type).
  /echo              200 JSON describing the request: "method", "path" (with the query),
                     "headers" (names lower-cased), "body" (decoded as UTF-8) and
                     "client_port" (which connection carried it: pooled clients reuse one).
  /enc/<case>        an HTML page whose bytes and declarations follow ENCODING_CASES
                     below; its <p> holds ENCODING_CASES[case].text.
  /drop              closes the connection without answering (a connection error).
  /bytes/<n>[?chunked=1]
                     n bytes of "x" as text/plain, with a Content-Length, or with chunked=1 in
                     chunked transfer encoding (no length announced).
  /compressed/<case> COMPRESSIBLE_PAGE content-coded as COMPRESSED_CASES[case] says (gzip, zlib
                     deflate, raw deflate, two gzip members, deflate then gzip).
  /gzip-bomb         gzip_bomb(): BOMB_DECODED (200 MB) of zeros gzipped into about 200 KB,
                     with Content-Encoding: gzip.
  /trickle?part=body|headers[&every=S]
                     part=body (the default): headers announcing TRICKLE_BYTES, then one body byte
                     every S seconds (default 0.05); part=headers: the status line, then one byte of
                     a header every S seconds. Either way until the client hangs up.
  /stall?length=N&sent=K
                     headers announcing a body of N bytes (default 100), K of them (default 10),
                     then silence until the client hangs up (at most HANG_UP_WAIT seconds).
  /reset[?fin=1]     headers announcing 1000 bytes, 100 of them, then a TCP reset (with fin=1,
                     an orderly close: a body cut short).
  /flap/<n>?seed=S&rate=P
                     a flapping site: each hit of this path is faulty with probability P (default 0.3),
                     as flap_fault(S, n, hit) decides (a random seeded with S, n and the hit's number,
                     so a test can tell afterwards what every hit got); the fault is one of FLAP_FAULTS:
                     "drop" as /drop, "503" (a 503 page), "stall" as /stall (part of the body, then
                     silence), "reset" as /reset (a TCP reset mid-body). Other hits answer /page/<n>.
  /robots.txt        site.robots_txt (a text a test sets) as text/plain with status site.robots_status
                     (200 unless set), after site.robots_delay seconds (0 unless set); 404 while
                     robots_txt is None (the default).
  /gated/<n>         held until the test opens the gate (site.gate.set()), at most HANG_UP_WAIT seconds, then
                     answers as /page/<n>: a batch that cannot finish before the test has done what it races
                     (site.held() counts the requests waiting at the gate).
  /moody/<n>         answers as site.mood, which a test changes as it goes: "ok" (the default: a small
                     page at once), "503" (a 503 page), or a number of seconds to sleep before the page.
  /versioned/<n>     a page that changes when a test says: version site.versions[n] (0 unless set),
                     <h1>Title n v<version></h1> (site.same_items[n]: the title leaves the version out,
                     only a comment in the page changes). It sends ETag "n-version" and a Last-Modified
                     (site.validators: "both", the default, "etag", "last-modified" or "none"), and
                     site.vary as its Vary (None: none); a request whose If-None-Match (else
                     If-Modified-Since) still holds gets a 304 without a body. n in site.gone: 410.
                     Hits are counted per status as well (site.statuses[n]). ?seconds=S: after S
                     seconds (a 304 too).
  /index/<a>-<b>     an index page: a link <a class="article" href="/versioned/<n>"> for each n from a to b
                     (follow-crawls: bench/follow.py).
  /shop/<n>          a shop's product page (data quality tests), as site.shop says: <h1>Product n</h1> and
                     <span class="price">n.99 EUR</span>; n in site.relaid: the title moved to an
                     <h2 class="name"> (a changed layout); n in site.sold_out: a page with no product;
                     site.price_text (if set) in place of every price; site.captcha: one challenge page
                     (CAPTCHA_PAGE) for every URL; n >= site.blocked_from (if set): site.block_page
                     (CAPTCHA_PAGE unless set) instead; site.shop_validators: an ETag per page and 304s.
  /js-shop/<n>       a page a browser is needed for (render="auto" tests): its product (as /shop/<n> lays it out)
                     is written by a script from /data/<n>.json after the page loaded; plain, it has none.
  /data/<n>.json     {"title": "Product n", "price": "n.99 EUR"}: what /js-shop/<n>'s script fetches.
  /static/<n>        /shop/<n>'s product in its HTML (n in site.relaid: its title in an <h2>), and in its head a
                     <script src="/beacon/<n>">: a hit of /beacon/<n> says a browser loaded the page, none that
                     it was fetched plain.
  /beacon/<n>        204.
  /js/<n>[?delay=S]  a page built by its script (rendering tests): an empty <div id="app"> the script fills, once
                     the page has loaded, with what it fetch()es from /js-data/<n> (<h1 class="title">Title n</h1>);
                     a plain fetch sees the empty shell. delay: the page is answered after S seconds.
  /js-data/<n>       {"title": "Title n"} as JSON.
  /js-never          a page that never finishes loading: its <script src> answers part of a body, then nothing.
  /js-cookies        a page whose script shows document.cookie in <p id="cookies"> and sets from_page=1.
  /js-late           a page that, 0.6 s after it has loaded, sets the cookie late=1 and fetches /beacon/7.
  /js-assets         a page with an image, a font, a video and a stylesheet (/asset/<name>: hits counted).
  /js-click          a page whose <ul id="more"> fills only when its button is clicked.
  /asset/<name>      a few bytes, of the type the name's extension says.
  /files/<path>      site.files[path] (bytes a test sets: sitemaps, say) as application/gzip when the path ends
                     in .gz, else application/xml; 404 when it has none.
HEAD reaches every route too, and is answered without a body.
Anything else answers 404. The server speaks HTTP/1.1 with keep-alive and logs nothing.
"""
import base64
import contextlib
import functools
import gzip
import html
import http.client
import json
import os
import random
import re
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import NamedTuple
from urllib.parse import parse_qs, urlsplit


CAPTCHA_PAGE = ("<html><head><title>Just a moment...</title></head><body><h2>Please verify you are human</h2>"
                "<div class=\"g-recaptcha\" data-sitekey=\"x\"></div></body></html>")
LINKS_PAGE = """<html><head><title>Links</title>{base}<link rel="next" href="/page/9"></head><body>
<a class="relative" href="page/1">one</a> <a class="spaced" href=" /page/2 ">two</a>
<a class="fragment" href="#os.error">here</a> <a class="none">no link</a>
<a class="gone" href="/status/404">gone</a> <img src="page/3"></body></html>"""


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
    # Quoted: w3lib 2.1 (Debian 12) reads only a bare label.
    "gbk-quoted-header": EncodingCase('text/html; charset="gbk"', "gbk", "", _CHINESE),
    # "①" is in Windows' cp932 but not in Shift_JIS, as browsers read that label.
    "sjis-header": EncodingCase("text/html; charset=shift_jis", "cp932", "", "①日本語のページ"),
    # A byte-order mark outranks the header, as in browsers.
    "bom-over-header": EncodingCase("text/html; charset=gbk", "utf-8-sig", "", _CHINESE),
    # A bytes-to-bytes codec is no charset: the <meta> after it decides.
    "base64-header": EncodingCase("text/html; charset=base64", "gbk", '<meta charset="gbk">', _CHINESE),
    "base64-meta": EncodingCase("text/html", "utf-8", '<meta charset="base64">', _CHINESE),
    "undefined-meta": EncodingCase("text/html", "utf-8", '<meta charset="undefined">', _CHINESE),
}


def encoded_page(case):
    html = (f"<html><head>{case.meta}<title>encoding</title></head>"
            f"<body><p>{case.text}</p></body></html>")
    return html.encode(case.codec)


# About 190 KB decoded: several decompression steps of the downloader, a few KB compressed.
COMPRESSIBLE_PAGE = ("<html><head><title>compressed</title></head><body>"
                     + "<p>the same words, again and again</p>" * 5000 + "</body></html>").encode()


def _raw_deflate(data):
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


def _two_gzip_members(data):
    half = len(data) // 2
    return gzip.compress(data[:half]) + gzip.compress(data[half:])


# case -> (Content-Encoding header, how the body is encoded)
COMPRESSED_CASES = {
    "gzip": ("gzip", gzip.compress),
    "deflate": ("deflate", zlib.compress),
    "raw-deflate": ("deflate", _raw_deflate),  # what some servers send as "deflate"
    "gzip-members": ("gzip", _two_gzip_members),
    "deflate-gzip": ("deflate, gzip", lambda data: gzip.compress(zlib.compress(data))),
}

FLAP_FAULTS = ("drop", "503", "stall", "reset")


def flap_fault(seed, n, hit, rate=0.3):
    """What /flap/<n> answers its hit-th hit with: one of FLAP_FAULTS, or None (the page). The same
    in every run and every process: a string seed does not depend on PYTHONHASHSEED."""
    chance = random.Random(f"{seed}:{n}:{hit}")
    return chance.choice(FLAP_FAULTS) if chance.random() < rate else None


BOMB_DECODED = 200 * 1024 * 1024
TRICKLE_BYTES = 100_000
HANG_UP_WAIT = 30.0


@functools.cache
def gzip_bomb():
    """BOMB_DECODED zero bytes, gzipped; built once, a megabyte at a time."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1024 * 1024)
    return b"".join([packer.compress(zeros) for _ in range(BOMB_DECODED // len(zeros))] + [packer.flush()])


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

    do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def reply(self, status, body, content_type, headers=()):
        self.send_head(status, content_type, len(body), headers)
        self.send_body(body)

    def send_head(self, status, content_type, length=None, headers=()):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if length is not None:
            self.send_header("Content-Length", str(length))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()

    def send_body(self, body):
        if self.command != "HEAD":
            self.wfile.write(body)

    def reply_html(self, html, status=200, headers=()):
        self.reply(status, html.encode("utf-8"), "text/html; charset=utf-8", headers)

    def page(self, number):
        n = int(number)
        self.reply_html(f'<html><head><title>Page {n}</title></head><body><h1>Title {n}</h1>'
                        f'<a href="/page/{n + 1}">next</a><p class="n">{n}</p></body></html>')

    def text(self):
        self.reply(200, self.query.get("body", "").encode(), "text/plain; charset=utf-8")

    def links(self):
        base = self.query.get("base")
        self.reply_html(LINKS_PAGE.format(base=f'<base href="{base}">' if base else ""))

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
        with self.server.site.in_flight():
            time.sleep(float(self.query.get("seconds", 1)))
        self.reply_html(f"<html><body><p>slow {html.escape(self.path)}</p></body></html>")     # one body per URL

    def json_document(self):
        self.reply(200, json.dumps({"ok": True, "items": [1, 2, 3]}).encode(), "application/json")

    def set_cookie(self):
        self.reply(200, b"cookies set", "text/plain", [("Set-Cookie", f"{name}={value}; Path=/")
                                                       for name, value in self.query.items()])

    def hook(self):
        parts = urlsplit(self.path)
        self.server.site.receive(parts.path, self.body, parts.query)
        self.reply(*self.server.site.hook_answers.get(parts.path, (204, b"", "text/plain")))

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

    def some_bytes(self, count):
        body = b"x" * int(count)
        if self.query.get("chunked") != "1":
            return self.reply(200, body, "text/plain")
        self.send_head(200, "text/plain", headers=[("Transfer-Encoding", "chunked")])
        for start in range(0, len(body), 4096):
            piece = body[start:start + 4096]
            self.send_body(b"%x\r\n%s\r\n" % (len(piece), piece))
        self.send_body(b"0\r\n\r\n")

    def compressed(self, case):
        if case not in COMPRESSED_CASES:
            return self.reply(404, b"no such compressed case", "text/plain")
        coding, encode = COMPRESSED_CASES[case]
        self.reply(200, encode(COMPRESSIBLE_PAGE), "text/html; charset=utf-8", [("Content-Encoding", coding)])

    def bomb(self):
        self.reply(200, gzip_bomb(), "text/html", [("Content-Encoding", "gzip")])

    def trickle(self):
        every = float(self.query.get("every", 0.05))
        if self.query.get("part") == "headers":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Trickle: ")
        else:
            self.send_head(200, "text/plain", TRICKLE_BYTES)
        self.close_connection = True
        for _ in range(TRICKLE_BYTES):  # a write after the client hung up ends this (ConnectionError)
            time.sleep(every)
            self.wfile.write(b"x")

    def stall(self):
        self.send_head(200, "text/plain", int(self.query.get("length", 100)))
        self.send_body(b"x" * int(self.query.get("sent", 10)))
        self.wait_for_hang_up()

    def wait_for_hang_up(self):
        self.close_connection = True
        self.connection.settimeout(HANG_UP_WAIT)
        try:
            self.rfile.read(1)  # the client sends nothing more: this returns when it closes
        except OSError:
            pass  # reset by the client, or HANG_UP_WAIT passed

    def reset(self):
        self.send_head(200, "text/plain", 1000)
        self.send_body(b"x" * 100)
        self.close_connection = True
        if self.query.get("fin") == "1":
            return
        # With linger 0, closing sends a reset. Close the descriptor itself: the request's file
        # objects would keep the socket open, and the server would end it with a FIN instead.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        os.close(self.connection.detach())

    def flap(self, number):
        hit = self.server.site.hits(urlsplit(self.path).path)
        fault = flap_fault(self.query.get("seed", ""), int(number), hit, float(self.query.get("rate", 0.3)))
        if fault == "503":
            return self.reply_html("<html><body>try again later</body></html>", 503)
        self.query = {}   # /stall and /reset with their defaults
        answer = {None: lambda: self.page(number), "drop": self.drop, "stall": self.stall, "reset": self.reset}
        return answer[fault]()

    def file(self, path):
        body = self.server.site.files.get(path)
        if body is None:
            return self.reply(404, b"no such file", "text/plain")
        self.reply(200, body, "application/gzip" if path.endswith(".gz") else "application/xml")

    def robots(self):
        time.sleep(self.server.site.robots_delay)
        text = self.server.site.robots_txt
        if text is None:
            return self.reply(404, b"no robots.txt here", "text/plain")
        self.reply(self.server.site.robots_status, text.encode(), "text/plain; charset=utf-8")

    def gated(self, number):
        site = self.server.site
        with site.held_at_gate():
            site.gate.wait(HANG_UP_WAIT)
        self.page(number)

    def moody(self, number):
        mood = self.server.site.mood
        if mood == "503":
            return self.reply_html("<html><body>overloaded</body></html>", 503)
        if mood != "ok":
            time.sleep(float(mood))
        self.page(number)

    def versioned(self, number):
        site, n = self.server.site, int(number)
        time.sleep(float(self.query.get("seconds", 0)))
        if n in site.gone:
            site.count_status(n, 410)
            return self.reply_html("<html><body>gone</body></html>", 410)
        version = site.versions.get(n, 0)
        etag, modified = f'"{n}-{version}"', time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(1e9 + version))
        headers = [("ETag", etag)] if site.validators in ("both", "etag") else []
        headers += [("Last-Modified", modified)] if site.validators in ("both", "last-modified") else []
        headers += [("Vary", site.vary)] if site.vary else []
        asked_etag, asked_since = self.headers.get("If-None-Match"), self.headers.get("If-Modified-Since")
        if ((asked_etag is not None and site.validators in ("both", "etag") and asked_etag == etag) or
                (asked_etag is None and asked_since == modified and site.validators in ("both", "last-modified"))):
            site.count_status(n, 304)
            return self.reply(304, b"", "text/html; charset=utf-8", headers)
        site.count_status(n, 200)
        title = f"Title {n}" if n in site.same_items else f"Title {n} v{version}"
        self.reply_html(f"<html><head><title>Page {n}</title></head><body><!-- v{version} --><h1>{title}</h1>"
                        f"<p class='n'>{n}</p></body></html>", headers=headers)

    def index(self, first, last):
        links = "".join(f'<li><a class="article" href="/versioned/{n}">{n}</a></li>'
                        for n in range(int(first), int(last) + 1))
        self.reply_html(f"<html><body><ul>{links}</ul></body></html>")

    def shop(self, number):
        site, n = self.server.site, int(number)
        if site.captcha:
            self.reply_html(CAPTCHA_PAGE)
            return
        if site.blocked_from is not None and n >= site.blocked_from:
            self.reply_html(site.block_page)
            return
        etag = f'"shop-{n}-relaid"' if n in site.relaid else f'"shop-{n}"'     # a page laid out anew is a new page
        if site.shop_validators and self.headers.get("If-None-Match") == etag:
            self.send_head(304, "text/html", headers=[("ETag", etag)])
            return
        headers = [("ETag", etag)] if site.shop_validators else []
        price = site.price_text or f"{n}.99 EUR"
        title = f"<h2 class='name'>Product {n}</h2>" if n in site.relaid else f"<h1>Product {n}</h1>"
        product = "" if n in site.sold_out else f"{title}<span class='price'>{price}</span>"
        self.reply_html(f"<html><head><title>Shop {n}</title></head><body>{product}<p>{n}</p></body></html>",
                        headers=headers)

    def js_shop(self, number):
        self.reply_html(f"<html><head><title>Shop {number}</title></head><body><div id='product'></div><script>"
                        f"fetch('/data/{number}.json').then(r => r.json()).then(d => {{"
                        "document.getElementById('product').innerHTML = '<h1>' + d.title + '</h1>"
                        "<span class=\"price\">' + d.price + '</span>';});</script></body></html>")

    def data(self, number):
        self.reply(200, json.dumps({"title": f"Product {number}", "price": f"{number}.99 EUR"}).encode(),
                   "application/json")

    def static(self, number):
        tag = "h2" if int(number) in self.server.site.relaid else "h1"
        # A script in the head, not a fetch(): the parser waits for it, so the browser has asked for it before the
        # page is read (a fetch still in flight then is cut off with the page).
        self.reply_html(f"<html><head><title>Shop {number}</title><script src='/beacon/{number}'></script></head>"
                        f"<body><{tag}>Product {number}</{tag}>"
                        f"<span class='price'>{number}.99 EUR</span></body></html>")

    def beacon(self, number):
        self.send_head(204, "text/plain")

    def log_message(self, format, *args):
        pass  # the suite's output is for test results

    # -- pages built by their scripts (rendering)
    def js_page(self, number):
        time.sleep(float(self.query.get("delay", 0)))
        self.reply_html(JS_PAGE.format(n=int(number)))

    def js_data(self, number):
        self.reply(200, json.dumps({"title": f"Title {int(number)}"}).encode(), "application/json")

    def js_never(self):
        self.reply_html('<html><body><p id="early">early</p><script src="/stall?length=100&sent=0"></script>'
                        "</body></html>")

    def js_cookies(self):
        self.reply_html('<html><body><p id="cookies"></p><script>document.getElementById("cookies").textContent = '
                        'document.cookie; document.cookie = "from_page=1; path=/";</script></body></html>')

    def js_late(self):
        self.reply_html('<html><body><p id="ready">ready</p><script>window.onload = function () { setTimeout('
                        'function () { document.cookie = "late=1; path=/"; fetch("/beacon/7"); }, 600); };'
                        '</script></body></html>')

    def js_assets(self):
        self.reply_html(ASSETS_PAGE)

    def js_click(self):
        self.reply_html('<html><body><button id="load">more</button><ul id="more"></ul><script>'
                        'document.getElementById("load").onclick = function () { document.getElementById("more")'
                        '.innerHTML = "<li>one</li><li>two</li>"; };</script></body></html>')

    def asset(self, name):
        kind = {"png": "image/png", "woff2": "font/woff2", "mp4": "video/mp4", "css": "text/css"}
        self.reply(200, b"body { color: black }" if name.endswith(".css") else b"\0" * 64,
                   kind.get(name.rpartition(".")[2], "application/octet-stream"))


JS_PAGE = """<html><head><title>Shell {n}</title></head><body><div id="app"></div><script>
window.addEventListener("load", function () {{
  fetch("/js-data/{n}").then(function (r) {{ return r.json(); }}).then(function (d) {{
    document.getElementById("app").innerHTML = '<h1 class="title">' + d.title + '</h1>';
  }});
}});
</script></body></html>"""
ASSETS_PAGE = """<html><head><link rel="stylesheet" href="/asset/style.css"><style>
@font-face { font-family: "f"; src: url("/asset/font.woff2"); } p { font-family: "f"; }</style></head>
<body><p>text</p><img src="/asset/picture.png"><video src="/asset/film.mp4" autoplay muted></video></body></html>"""

_ROUTES = [
    (re.compile(r"/js/(\d+)"), _Handler.js_page),
    (re.compile(r"/js-data/(\d+)"), _Handler.js_data),
    (re.compile(r"/js-never"), _Handler.js_never),
    (re.compile(r"/js-cookies"), _Handler.js_cookies),
    (re.compile(r"/js-late"), _Handler.js_late),
    (re.compile(r"/js-assets"), _Handler.js_assets),
    (re.compile(r"/js-click"), _Handler.js_click),
    (re.compile(r"/asset/([\w.]+)"), _Handler.asset),
    (re.compile(r"/js-shop/(\d+)"), _Handler.js_shop),
    (re.compile(r"/data/(\d+)\.json"), _Handler.data),
    (re.compile(r"/static/(\d+)"), _Handler.static),
    (re.compile(r"/beacon/(\d+)"), _Handler.beacon),
    (re.compile(r"/shop/(\d+)"), _Handler.shop),
    (re.compile(r"/versioned/(\d+)"), _Handler.versioned),
    (re.compile(r"/index/(\d+)-(\d+)"), _Handler.index),
    (re.compile(r"/robots\.txt"), _Handler.robots),
    (re.compile(r"/files/(.+)"), _Handler.file),
    (re.compile(r"/moody/(\d+)"), _Handler.moody),
    (re.compile(r"/gated/(\d+)"), _Handler.gated),
    (re.compile(r"/page/(\d+)"), _Handler.page),
    (re.compile(r"/links"), _Handler.links),
    (re.compile(r"/text"), _Handler.text),
    (re.compile(r"/flaky/([^/]+)"), _Handler.flaky),
    (re.compile(r"/status/(\d{3})"), _Handler.status),
    (re.compile(r"/redirect"), _Handler.redirect),
    (re.compile(r"/slow"), _Handler.slow),
    (re.compile(r"/json"), _Handler.json_document),
    (re.compile(r"/set-cookie"), _Handler.set_cookie),
    (re.compile(r"/echo"), _Handler.echo),
    (re.compile(r"/hook(?:/[^/]+)?"), _Handler.hook),
    (re.compile(r"/enc/([^/]+)"), _Handler.encoding),
    (re.compile(r"/drop"), _Handler.drop),
    (re.compile(r"/bytes/(\d+)"), _Handler.some_bytes),
    (re.compile(r"/compressed/([^/]+)"), _Handler.compressed),
    (re.compile(r"/gzip-bomb"), _Handler.bomb),
    (re.compile(r"/trickle"), _Handler.trickle),
    (re.compile(r"/stall"), _Handler.stall),
    (re.compile(r"/reset"), _Handler.reset),
    (re.compile(r"/flap/(\d+)"), _Handler.flap),
]


class _ProxyHandler(BaseHTTPRequestHandler):
    """A forward proxy for http:// targets: the request's absolute URL is fetched and its answer relayed."""
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_GET(self):
        proxy = self.server.proxy
        if proxy.credentials and self.headers.get("Proxy-Authorization") != proxy.credentials:
            return self._answer(407, [("Proxy-Authenticate", 'Basic realm="test"')], b"")
        proxy.record(self.path)
        target = urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("proxy-authorization", "proxy-connection")}
        upstream = http.client.HTTPConnection(target.hostname, target.port, timeout=10)
        try:
            upstream.request(self.command, target.path + (f"?{target.query}" if target.query else ""), body, headers)
            answer = upstream.getresponse()
            self._answer(answer.status, [(k, v) for k, v in answer.getheaders()
                                         if k.lower() not in ("transfer-encoding", "connection", "content-length")],
                         answer.read())
        finally:
            upstream.close()

    do_HEAD = do_POST = do_GET

    def _answer(self, status, headers, body):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Via", "1.1 test-proxy")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format, *args):
        pass


class _Served:
    """A server of this module, run in a daemon thread for the life of a `with` block."""

    _server = None

    def _serve(self, server, name):
        self._server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True).start()

    def __exit__(self, *exc_info):
        self._server.shutdown()
        self._server.server_close()


class TestProxy(_Served):
    """A real forward proxy on 127.0.0.1 for a `with` block: it relays http:// requests, counts them,
    and with `user`/`password` answers 407 to a request without those credentials."""

    __test__ = False

    def __init__(self, user=None, password=None):
        self.credentials = ("Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()) if user else None
        self.user, self.password = user, password
        self.requests = []
        self._lock = threading.Lock()

    def __enter__(self):
        server = _Server(("127.0.0.1", 0), _ProxyHandler)
        server.proxy = self
        self._serve(server, "test-proxy")
        return self

    def url(self) -> str:
        userinfo = f"{self.user}:{self.password}@" if self.user else ""
        return f"http://{userinfo}127.0.0.1:{self._server.server_port}"

    def record(self, url):
        with self._lock:
            self.requests.append(url)


def self_signed_certificate(directory, host="127.0.0.1"):
    """(certificate file, key file) of a new self-signed certificate for `host` (an IP address), made
    by openssl in `directory`; the certificate file is also the CA bundle that trusts it."""
    cert, key = os.path.join(directory, "site.pem"), os.path.join(directory, "site.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", f"/CN={host}", "-addext", f"subjectAltName=IP:{host}"],
                   check=True, capture_output=True)
    return cert, key


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that gave up (a read-timeout test) is expected; anything else is a bug here.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class DeadHost:
    """A host that is down the worst way for a `with` block: it accepts every connection on 127.0.0.1 and
    never answers (each request waits out its REQUEST_TIMEOUT). `accepted` counts the connections."""

    def __init__(self):
        self.accepted = 0
        self._held: list = []
        self._listener = socket.socket()
        self._stop = threading.Event()

    def __enter__(self):
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self._listener.settimeout(0.05)
        threading.Thread(target=self._accept, name="test-dead-host", daemon=True).start()
        return self

    def url(self, path="/"):
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}{path}"

    def _accept(self):
        while not self._stop.is_set():
            try:
                connection, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:                       # closed at the block's end
                return
            self._held.append(connection)        # held open, never read from nor written to
            self.accepted += 1

    def __exit__(self, *exc_info):
        self._stop.set()
        self._listener.close()
        for connection in self._held:
            connection.close()


class TestSite(_Served):
    """The server, run in a daemon thread for the life of a `with` block, on `host` (another
    address than 127.0.0.1 for clients in a network namespace: tests/netns.py); over TLS with
    `certificate`, a (certificate file, key file) pair (self_signed_certificate())."""

    __test__ = False  # a helper, not a test class, whatever its name says to pytest

    def __init__(self, host="127.0.0.1", certificate=None):
        self.host = host
        self.certificate = certificate
        self._hits = Counter()
        self._hits_lock = threading.Lock()
        self.hit_times = []          # (time.monotonic(), path) of every hit, in order
        self._bodies = []            # (path, body, query) of every request to /hook, in order
        self.hook_answers = {}       # /hook path -> (status, body, content type) it answers (default: 204)
        self._in_flight = self.most_in_flight = 0
        self.robots_txt = None       # what /robots.txt answers (None: 404), with robots_status
        self.robots_status = 200
        self.robots_delay = 0.0
        self.files = {}              # /files/<path>: path -> the bytes it answers
        self.mood = "ok"             # how /moody/<n> answers: "ok", "503", or seconds to sleep first
        self.gate = threading.Event()    # /gated/<n> answers once it is set
        self._at_gate = 0
        self.versions = {}           # /versioned/<n>: n -> its version (0 unless set)
        self.same_items = set()      # /versioned/<n> whose items do not show the version
        self.gone = set()            # /versioned/<n> answering 410
        self.validators = "both"     # what /versioned/<n> sends: both, etag, last-modified, none
        self.vary = None             # its Vary header
        self.statuses = Counter()    # (n, status) -> hits of /versioned/<n> answered so
        self.relaid = set()          # /shop/<n> with its title moved (a changed layout)
        self.sold_out = set()        # /shop/<n> with no product on it
        self.price_text = None       # what every /shop/<n> says its price is (None: "n.99 EUR")
        self.captcha = False         # every /shop/<n> answers CAPTCHA_PAGE
        self.blocked_from = None     # /shop/<n> with n >= it answers block_page (None: none does)
        self.block_page = CAPTCHA_PAGE
        self.shop_validators = False   # /shop/<n> sends an ETag and answers 304 when it holds

    def __enter__(self):
        server = _Server((self.host, 0), _Handler)
        server.site = self
        if self.certificate:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self.certificate)
            # The handshake happens in the connection's own thread, where a client's refusal is its alone.
            server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
        self._serve(server, "test-site")
        return self

    def __exit__(self, *exc_info):
        self.gate.set()              # what waits at the gate is answered, not left hanging
        super().__exit__(*exc_info)

    def url(self, path="/"):
        scheme = "https" if self.certificate else "http"
        return f"{scheme}://{self.host}:{self._server.server_port}{path}"

    def record_hit(self, path):
        with self._hits_lock:
            self._hits[path] += 1
            self.hit_times.append((time.monotonic(), path))

    @contextlib.contextmanager
    def in_flight(self):
        with self._hits_lock:
            self._in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self._in_flight)
        try:
            yield
        finally:
            with self._hits_lock:
                self._in_flight -= 1

    @contextlib.contextmanager
    def held_at_gate(self):
        with self._hits_lock:
            self._at_gate += 1
        try:
            yield
        finally:
            with self._hits_lock:
                self._at_gate -= 1

    def held(self) -> int:
        """How many /gated requests wait for the gate now."""
        with self._hits_lock:
            return self._at_gate

    def receive(self, path, body, query=""):
        with self._hits_lock:
            self._bodies.append((path, body, query))

    def received(self, path="/hook"):
        """The JSON bodies sent to a /hook path, in the order they came."""
        with self._hits_lock:
            return [json.loads(body) for where, body, _ in self._bodies if where == path]

    def received_queries(self, path="/hook"):
        """The query strings of the requests to a /hook path, in the order they came."""
        with self._hits_lock:
            return [query for where, _, query in self._bodies if where == path]

    def count_status(self, n, status):
        with self._hits_lock:
            self.statuses[(n, status)] += 1

    def status_counts(self, status):
        """How many /versioned pages answered `status`."""
        with self._hits_lock:
            return sum(count for (_, answered), count in self.statuses.items() if answered == status)

    def hits(self, path):
        with self._hits_lock:
            return self._hits[path]

    def reset(self):
        with self._hits_lock:
            self._hits.clear()
            self.hit_times.clear()
            self.most_in_flight = 0
            self.statuses.clear()
