"""The hosts `python -m bench.hosts` crawls: one listening socket per host, each on a loopback address of
its own (Linux routes all of 127.0.0.0/8 to lo, and batchd tells hosts apart by address), every socket
served by one asyncio loop in a process of its own (forked, as bench/site.py's built-in server), so that
a thousand hosts and hundreds of connections held open cost one process and no thread each.

What a host does with a request, by its kind:

- `fast`: answers at once, a small page (about 1 KB: the bench measures how hosts are scheduled, not
  parsing, which `python -m bench compare` measures);
- `slow`: answers after SLOW_SECONDS;
- `rate`: answers at once, and its /robots.txt asks the Crawl-delay it is given (the bench's --crawl-delay,
  1: one request a second from all of batchd's workers together; the mix sets ROBOTSTXT_OBEY; every other
  host's /robots.txt is a 404: all allowed);
- `dead`: takes the connection and the request and never answers;
- `refusing`: nothing listens (a port the bench bound once and closed): each connection is refused;
- `429`: answers 429 Too Many Requests with `Retry-After: 1`, every time.

Each host counts its page hits (not /robots.txt) in shared memory: how many, the first's and the last's
wall-clock time, so that the bench reads the rate a host saw.
"""
import asyncio
import multiprocessing
import socket
import time
from dataclasses import dataclass
from typing import Optional

from bench.site import HeadsProtocol

SLOW_SECONDS = 1.0
KINDS = ("fast", "slow", "rate", "dead", "refusing", "429")
# Each URL's page names its own path, as a real site's do: one body served for every URL is what the quality
# checks flag as a block page (docs/quality.md).
PAGE = (b"<!doctype html><html><head><title>bench host page</title>"
        b'<meta name="description" content="a page of python -m bench.hosts">'
        b'<link rel="canonical" href="{path}"></head><body><nav><a href="/">home</a><a href="/docs">docs</a></nav>'
        b'<main><article><ol class="breadcrumbs"><a href="/">home</a></ol><h1>A page</h1>'
        b'<time datetime="2026-01-01">1 Jan</time><p class="lead">What the bench crawls.</p>'
        + b"".join(b"<h2>Section %d</h2><p>Some words of section %d, to parse.</p>" % (n, n) for n in range(12))
        + b"</article></main></body></html>")


def page_of(path: bytes) -> bytes:
    return PAGE.replace(b"{path}", path)


@dataclass(frozen=True)
class Host:
    kind: str
    address: str       # 127.x.y.z
    port: int
    index: int         # its slot in the hit counters

    def url(self, path: str) -> str:
        return f"http://{self.address}:{self.port}{path}"

    @property
    def netloc(self) -> str:
        return f"{self.address}:{self.port}"


def loopback_address(number: int) -> str:
    """127.0.0.2, 127.0.0.3, ... 127.0.0.254, then 127.0.1.1 ...: the number-th address after 127.0.0.1."""
    high, low = divmod(number, 253)
    if high > 255:
        raise SystemExit(f"bench.hosts: {number} hosts do not fit in 127.0.0.0/16")
    return f"127.0.{high}.{low + 2}"


class _Hits:
    """Per host: page hits since the last reset, the first's and the last's time (one writer: the loop)."""

    def __init__(self, hosts: int):
        self.shared = multiprocessing.get_context("fork").RawArray("d", 3 * hosts)

    def reset(self) -> None:
        for i in range(len(self.shared)):
            self.shared[i] = 0.0

    def record(self, index: int) -> None:
        now, at = time.time(), 3 * index
        if self.shared[at] == 0:
            self.shared[at + 1] = now
        self.shared[at] += 1
        self.shared[at + 2] = now

    def of(self, index: int) -> tuple:
        """(hits, first, last)."""
        at = 3 * index
        return int(self.shared[at]), self.shared[at + 1], self.shared[at + 2]


class _HostProtocol(HeadsProtocol):
    """GET only, answered as the host's kind says."""

    def __init__(self, host: Host, hits: _Hits, crawl_delay: int):
        self.host, self.hits, self.crawl_delay = host, hits, crawl_delay

    def _answer(self, head: bytes) -> None:
        target = (head.split(b"\r\n", 1)[0].split(b" ") + [b"", b""])[1]
        if target == b"/robots.txt":
            if self.host.kind == "rate":
                self._reply(b"200 OK", b"User-agent: *\nCrawl-delay: %d\n" % self.crawl_delay, b"text/plain")
            else:
                self._reply(b"404 Not Found", b"no robots.txt", b"text/plain")
            return
        self.hits.record(self.host.index)
        if self.host.kind == "dead":
            return                                  # the connection stays open, unanswered
        if self.host.kind == "slow":
            asyncio.get_running_loop().call_later(SLOW_SECONDS, self._reply, b"200 OK", page_of(target))
        elif self.host.kind == "429":
            self._reply(b"429 Too Many Requests", b"slow down", b"text/plain", b"Retry-After: 1\r\n")
        else:
            self._reply(b"200 OK", page_of(target))

    def _reply(self, status: bytes, body: bytes, kind: bytes = b"text/html; charset=utf-8",
                extra: bytes = b"") -> None:
        if self.transport is None:                  # the client gave up (a timeout) before the answer
            return
        self.transport.write(b"HTTP/1.1 %s\r\nServer: bench-hosts\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n"
                             % (status, kind, len(body), extra) + body)


def _serve(listeners: list, hits: _Hits, crawl_delay: int) -> None:
    """The hosts' process: one event loop over every listening socket the parent made."""
    loop = asyncio.new_event_loop()
    for host, listener in listeners:
        loop.run_until_complete(loop.create_server(
            lambda host=host: _HostProtocol(host, hits, crawl_delay), sock=listener, backlog=1024))
    try:
        loop.run_forever()
    finally:
        loop.close()


class Hosts:
    """Every host of a sitting, made up front by kind (`counts`: kind -> how many), served until exit."""

    def __init__(self, counts: dict, crawl_delay: int):
        unknown = sorted(set(counts) - set(KINDS))
        if unknown:
            raise ValueError(f"bench.hosts: unknown host kinds {unknown}")
        self.counts, self.crawl_delay = counts, crawl_delay
        self.by_kind: dict = {kind: [] for kind in KINDS}
        self.hits = _Hits(sum(counts.values()))
        self.process: Optional[multiprocessing.process.BaseProcess] = None

    def __enter__(self):
        listeners = []
        try:
            for kind, count in self.counts.items():
                for _ in range(count):
                    listeners.append(self._open(kind, len(listeners)))
            served = [(host, sock) for host, sock in listeners if host.kind != "refusing"]
            self.process = multiprocessing.get_context("fork").Process(
                target=_serve, args=(served, self.hits, self.crawl_delay), name="bench-hosts", daemon=True)
            self.process.start()
        finally:
            for _, sock in listeners:
                sock.close()                         # the served ones live on in the hosts' process
        return self

    def _open(self, kind: str, index: int) -> tuple:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((loopback_address(index), 0))
        if kind != "refusing":                       # a refusing host's port is closed at once
            listener.listen(1024)
            listener.setblocking(False)
        host = Host(kind, *listener.getsockname()[:2], index=index)
        self.by_kind[kind].append(host)
        return host, listener

    def __exit__(self, *exc_info):
        if self.process is not None and self.process.is_alive():
            self.process.terminate()
            self.process.join(10)

    def reset(self) -> None:
        self.hits.reset()

    def hits_of(self, hosts: list) -> dict:
        """The page hits the hosts saw since the reset: how many, and requests a second from the first to
        the last (None under two hits)."""
        counted = [self.hits.of(host.index) for host in hosts]
        total = sum(hits for hits, _, _ in counted)
        spans = [(hits - 1) / (last - first) for hits, first, last in counted if hits > 1 and last > first]
        return {"hits": total, "hits_per_s": max(spans) if spans else None}
