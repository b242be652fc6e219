"""ROBOTSTXT_OBEY: each request is checked against the robots.txt of its origin (scheme://host:port),
parsed by Protego, before it is sent; a disallowed one fails at once with "forbidden by robots.txt".

A worker reads an origin's robots.txt once per batch, with one attempt outside the chain (its own
short timeout and size bound; the downloader follows a few redirects), and keeps the verdict until
the next batch starts. Requests to the same origin meanwhile wait for that one fetch (NotYet: their tasks are set aside). What
the answer means, after RFC 9309:

  2xx             its rules; a file that is not robots.txt at all (an HTML page, bytes that are not
                  text) has no rule Protego recognises, and so allows everything.
  4xx but 429     no robots.txt: everything is allowed (the site publishes no rules).
  5xx, 429, a     the site could not say: everything is disallowed for UNREACHABLE_FOR seconds, then
  network error   asked again. RFC 9309 and Google do so (Scrapy allows instead): the rules may well
                  forbid what we would crawl, and a site that cannot serve a small text file is in
                  no state to serve pages either; a task failed for it is tried again next batch.
  over MAXSIZE    (Google reads 500 KiB) not a robots.txt to honour: everything is allowed, with a
                  warning naming the origin.

Protego's Crawl-delay for our user agent is honoured too (at most CRAWL_DELAY_MOST seconds): it is told to
the worker's HostPaces (hosts/terms.py), where the rate-limit link books it as one request per
Crawl-delay in the HostRates port, shared by every worker of the namespace (a site asks it of the crawler,
not of each process), and the politeness link keeps it between two starts in this worker too (more if the
host's own delay or the throttle's is longer).
"""
import logging
import threading
import time
from typing import Callable, NoReturn, Optional, Union
from urllib.parse import urlsplit

from protego import Protego

from ..bodies import ResponseTooLarge
from ...http import Request, RequestFailed, Response
from ..chain import ChainContext, Counts, DownloaderMiddleware, NoCounts, NotYet
from ...hosts.terms import HostTerms
from ...hosts.paces import HostPaces

log = logging.getLogger("batchd")

ROBOTS_PATH = "/robots.txt"
FETCH_TIMEOUT = 10.0             # seconds to connect, and between two reads, for a robots.txt
MAXSIZE = 512 * 1024             # bytes of a robots.txt, at most
UNREACHABLE_FOR = 60.0           # seconds an origin whose robots.txt could not be had stays disallowed
KEPT_ORIGINS = 10_000            # past this many, the oldest origins are forgotten (and read again if met)
ROBOTS_RECHECK = 0.05            # s: a request waiting for another thread's read of robots.txt looks again
CRAWL_DELAY_MOST = 60.0          # a site's Crawl-delay beyond this is held to this
FORBIDDEN = "forbidden by robots.txt"


class ForbiddenByRobots(Exception):
    """What a request forbidden by robots.txt failed with."""


class _Verdict:
    """One origin's robots.txt: being fetched until `ready` is set; then `settled` with its rules, or
    with None for a site that could not answer (disallowed until `expires`)."""

    __slots__ = ("ready", "settled", "rules", "unreachable", "expires")

    def __init__(self):
        self.ready = threading.Event()
        self.settled = False
        self.rules: Optional[Protego] = None
        self.unreachable = ""          # why the site could not say (HTTP 503, ConnectTimeout...)
        self.expires = float("inf")


class RobotsTxtMiddleware(DownloaderMiddleware):
    """Fails a request its origin's robots.txt disallows for its user agent (see this module's text)."""

    def __init__(self, download: Callable[[Request], Response], user_agent: str = "batchd",
                 stats: Counts = NoCounts(), unreachable_for: float = UNREACHABLE_FOR,
                 maxsize: int = MAXSIZE, kept: int = KEPT_ORIGINS, proxy: Optional[str] = None,
                 clock: Callable[[], float] = time.monotonic, paces: Optional[HostPaces] = None,
                 host_terms: HostTerms = HostTerms()):
        """`download`: one attempt outside the chain; `user_agent`: matched when a request has no
        User-Agent of its own; `proxy`: PROXY,
        through which robots.txt is read too (with a PROXY_POOL, the environment's proxy serves);
        `paces`: the worker's (its politeness link's), where Crawl-delay is told (None: paces of its own);
        `host_terms`: a host with a proxy of its own has its robots.txt read through it."""
        self.host_terms = host_terms
        self.paces = paces or HostPaces(clock=clock)
        self.download, self.user_agent, self.stats = download, user_agent, stats
        self.unreachable_for, self.maxsize, self.kept = unreachable_for, maxsize, kept
        self.proxy, self.clock = proxy, clock
        self._origins: dict = {}          # origin -> _Verdict, oldest first
        self._lock = threading.Lock()

    @classmethod
    def from_context(cls, context: ChainContext) -> Optional["RobotsTxtMiddleware"]:
        settings = context.settings
        if not settings.ROBOTSTXT_OBEY:
            return None
        if context.download is None:
            raise TypeError("RobotsTxtMiddleware needs the context's download (one attempt outside the chain)")
        user_agent = settings.USER_AGENT[0] if settings.USER_AGENT else "batchd"
        return cls(context.download, user_agent, context.stats, proxy=settings.PROXY, paces=context.paces,
                   host_terms=context.host_terms)

    def batch_started(self, batch_id) -> None:
        with self._lock:
            self._origins = {}

    def process_request(self, request: Request) -> None:
        parts = urlsplit(request.url)
        if parts.path == ROBOTS_PATH or parts.scheme not in ("http", "https"):
            return None
        verdict = self._verdict_for(f"{parts.scheme}://{parts.netloc.lower()}", request)
        if verdict.rules is None:
            self._forbid(request, f"{FORBIDDEN} (unreachable: {verdict.unreachable})")
        user_agent = self._agent_of(request)
        if not verdict.rules.can_fetch(request.url, user_agent):
            self._forbid(request, FORBIDDEN)
        delay = verdict.rules.crawl_delay(user_agent)
        self.paces.keep_crawl_delay(request.url, min(float(delay), CRAWL_DELAY_MOST) if delay and delay > 0 else 0.0)
        return None

    def _forbid(self, request: Request, reason: str) -> NoReturn:
        self.stats.inc("robotstxt/forbidden")
        raise RequestFailed(request, ForbiddenByRobots(reason), reason, 1)

    def _agent_of(self, request: Request) -> str:
        for name, value in (request.fetch.headers or {}).items():
            if name.lower() == "user-agent":
                return value.decode("latin-1") if isinstance(value, bytes) else value
        return self.user_agent

    # -- the verdicts
    def _verdict_for(self, origin: str, request: Request) -> _Verdict:
        while True:
            verdict, mine = self._claim(origin)
            if mine:
                self._fill(origin, verdict)
            elif not verdict.ready.is_set():
                # Another thread reads it: this request's task is set aside meanwhile (NotYet), or the
                # waiting is the downloader's when it may not park.
                raise NotYet(request, ROBOTS_RECHECK, f"{ROBOTS_PATH} being read")
            if verdict.settled:
                return verdict
            # The fetching thread was interrupted (its task's timeout): this one asks again.

    def _claim(self, origin: str) -> tuple:
        """(the origin's verdict, True if this thread is to fetch it)."""
        with self._lock:
            verdict = self._origins.get(origin)
            if verdict is not None and not (verdict.ready.is_set() and verdict.expires <= self.clock()):
                return verdict, False
            if verdict is None and len(self._origins) >= self.kept:
                del self._origins[next(iter(self._origins))]
            verdict = self._origins[origin] = _Verdict()
            return verdict, True

    def _fill(self, origin: str, verdict: _Verdict) -> None:
        try:
            answer = self._fetch(origin)
            if isinstance(answer, Protego):
                verdict.rules = answer
            else:
                verdict.unreachable, verdict.expires = answer, self.clock() + self.unreachable_for
                log.warning("%s%s could not be read (%s): the origin is disallowed for %g s", origin,
                            ROBOTS_PATH, answer, self.unreachable_for)
            verdict.settled = True
        finally:
            if not verdict.settled:     # interrupted: nothing was learnt, and the next request asks again
                with self._lock:
                    if self._origins.get(origin) is verdict:
                        del self._origins[origin]
            verdict.ready.set()

    def _fetch(self, origin: str) -> Union[Protego, str]:
        """The origin's rules (everything allowed where it has none), or why the site could not say."""
        self.stats.inc("robotstxt/request_count")
        request = Request(origin + ROBOTS_PATH, headers={"User-Agent": self.user_agent}, timeout=FETCH_TIMEOUT,
                          maxsize=self.maxsize, proxy=self.host_terms.for_url(origin).proxy or self.proxy)
        try:
            response = self.download(request)
        except RequestFailed as exc:
            if isinstance(exc.response_or_exception, ResponseTooLarge):
                log.warning("%s%s is over %d bytes: not honoured, everything is allowed", origin, ROBOTS_PATH,
                            self.maxsize)
                return Protego.parse("")
            return exc.reason
        except Exception as exc:
            return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        status = response.status_code
        if status >= 500 or status == 429:
            return f"HTTP {status}"
        if status >= 400:
            return Protego.parse("")
        return _parsed(response.content)


def _parsed(body: bytes) -> Protego:
    """The rules of a robots.txt body (UTF-8 by RFC 9309; bytes that are not are replaced, and a line
    Protego cannot read is no rule)."""
    try:
        return Protego.parse(body.decode("utf-8", errors="replace"))
    except Exception:       # Protego 0.2 can trip on some garbage: no rule read is no rule to obey
        return Protego.parse("")
