"""Per-host terms (HOSTS: `[hosts."example.com"]` tables) and the one per-host pace of a worker.

`HostTerms.for_url(url)` is the one place a request's host is resolved to its terms: the rate, burst,
concurrency, delay, timeouts, proxy and headers that hold at that host. A host listed as itself wins;
else the longest `*.domain` it is a subdomain of (`*.example.com` matches a.example.com and
a.b.example.com, never example.com itself); else the global settings. A pattern's table sets only what it
names: the rest is the global settings'. Hosts are matched by name (the port aside). Without HOSTS, the
answer is the global terms at once, without parsing the URL: a single-site crawl pays one test.

`HostPaces` is a worker's per-host state, shared by the links that space requests: the politeness
link takes each attempt's turn there (the in-flight count, the next start), and robots.txt's
Crawl-delay and the throttle's learnt delay are told to it. The gap after a start is the largest of
the host's delay (randomised as DOWNLOAD_DELAY is), its Crawl-delay (unless the rate-limit link books it for
the namespace: `crawl_delay_booked`) and its throttle delay.
"""
import math
import random
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Optional
from urllib.parse import urlsplit

from ..backends.host_rates import KEPT_HOSTS
from ..config import Settings, redact_url


@dataclass(frozen=True)
class Terms:
    """What holds at one host; `pattern` is the [hosts] table it came from ("" for the global settings)."""
    rate: float = 0.0
    burst: int = 1
    concurrency: int = 8
    delay: float = 0.0
    timeout: float = 30.0
    download_timeout: float = 180.0
    proxy: Optional[str] = None
    headers: dict = field(default_factory=dict)
    pattern: str = ""

    def describe(self) -> str:
        """One line of the terms, the proxy's password redacted: for `batchd check`."""
        shown = [f"rate {self.rate:g}/s" if self.rate else "no rate limit", f"burst {self.burst}",
                 f"concurrency {self.concurrency}", f"delay {self.delay:g} s", f"timeout {self.timeout:g} s",
                 f"download_timeout {self.download_timeout:g} s"]
        if self.proxy:
            shown.append(f"proxy {redact_url(self.proxy)}")
        if self.headers:
            shown.append("headers " + ", ".join(sorted(self.headers)))
        return ", ".join(shown)


def global_terms(settings: Settings) -> Terms:
    """The terms of every host no [hosts] table names."""
    return Terms(rate=settings.DOMAIN_RATE_LIMIT, burst=settings.DOMAIN_RATE_BURST,
                 concurrency=settings.CONCURRENT_REQUESTS_PER_DOMAIN, delay=settings.DOWNLOAD_DELAY,
                 timeout=settings.REQUEST_TIMEOUT, download_timeout=settings.DOWNLOAD_TIMEOUT)


class HostTerms:
    """The terms of each host: the global ones, and those of the HOSTS patterns over them."""

    def __init__(self, defaults: Terms = Terms(), hosts: Optional[dict] = None, kept: int = KEPT_HOSTS):
        """`hosts`: HOSTS as parsed (config.parse_hosts): {pattern: {term: value}}."""
        self.defaults, self.kept = defaults, kept
        self.patterns = {pattern: replace(defaults, pattern=pattern, **table)
                         for pattern, table in (hosts or {}).items()}
        self._resolved: dict = {}       # host -> Terms, at most `kept` (then started afresh)

    @classmethod
    def from_settings(cls, settings: Settings) -> "HostTerms":
        return cls(global_terms(settings), settings.HOSTS)

    def every(self) -> list:
        """The global terms, then each pattern's."""
        return [self.defaults, *self.patterns.values()]

    def for_url(self, url: str) -> Terms:
        if not self.patterns:
            return self.defaults
        return self.for_host(urlsplit(url).hostname or "")

    def for_host(self, host: str) -> Terms:
        """`host` (a name, in lower case) resolved: itself, else its longest `*.` suffix, else the globals."""
        if not self.patterns:
            return self.defaults
        terms = self._resolved.get(host)
        if terms is None:
            if len(self._resolved) >= self.kept:
                self._resolved = {}       # a crawl of many hosts: resolving again is cheap, memory stays flat
            terms = self._resolved[host] = self._match(host)
        return terms

    def _match(self, host: str) -> Terms:
        exact = self.patterns.get(host)
        if exact is not None:
            return exact
        labels = host.split(".")
        for start in range(1, len(labels)):       # a.b.example.com: *.b.example.com, then *.example.com, *.com
            wildcard = self.patterns.get("*." + ".".join(labels[start:]))
            if wildcard is not None:
                return wildcard
        return self.defaults


class _Pace:
    __slots__ = ("in_flight", "next_start", "crawl_delay", "throttle_delay")

    def __init__(self):
        self.in_flight = 0
        self.next_start = 0.0        # time.monotonic() before which no request to this host starts
        self.crawl_delay = 0.0       # robots.txt's Crawl-delay for the host
        self.throttle_delay = 0.0    # the throttle's delay for the host


class HostPaces:
    """A worker's per-host state across its threads (see this module's text). A host's state is dropped
    once it is idle, past `kept` hosts, so a crawl of many hosts keeps this small."""

    def __init__(self, terms: HostTerms = HostTerms(), randomize: bool = True,
                 clock: Callable[[], float] = time.monotonic, kept: int = KEPT_HOSTS):
        self.terms, self.randomize, self.clock, self.kept = terms, randomize, clock, kept
        # Set by the rate-limit link when it books each host's Crawl-delay for the whole namespace: a second gap
        # here would only send a request that comes at its booked slot back to wait, and its slot lost.
        self.crawl_delay_booked = False
        self._hosts: dict = {}
        self._lock = threading.Lock()

    def take(self, url: str) -> float:
        """Take one of the places of `url`'s host (an attempt to fetch it): 0; or, taking nothing, how
        long before one may be free (math.inf: once an attempt at the host ends)."""
        key, terms = host_of(url), self.terms.for_url(url)
        with self._lock:
            pace = self._pace(key)
            if pace.in_flight >= terms.concurrency:
                return math.inf
            now = self.clock()
            wait = pace.next_start - now
            if wait > 0:
                return wait
            pace.in_flight += 1
            crawl_delay = 0.0 if self.crawl_delay_booked else pace.crawl_delay
            pace.next_start = now + max(self._gap(terms.delay), crawl_delay, pace.throttle_delay)
            return 0.0

    def give_back(self, url: str) -> None:
        with self._lock:
            pace = self._hosts.get(host_of(url))
            if pace is not None:
                pace.in_flight -= 1

    def crawl_delay(self, url: str) -> float:
        """The Crawl-delay told for `url`'s host (0: none)."""
        pace = self._hosts.get(host_of(url))
        return pace.crawl_delay if pace is not None else 0.0

    def keep_crawl_delay(self, url: str, seconds: float) -> None:
        with self._lock:
            self._pace(host_of(url)).crawl_delay = seconds

    def keep_throttle_delay(self, url: str, seconds: float, put_off: bool = False) -> None:
        """The throttle's delay for the host; `put_off`: no request starts before it has passed from now."""
        with self._lock:
            pace = self._pace(host_of(url))
            pace.throttle_delay = seconds
            if put_off:
                pace.next_start = max(pace.next_start, self.clock() + seconds)

    def spaces(self) -> bool:
        """Whether some host's requests are spaced by a delay of its terms."""
        return any(terms.delay > 0 for terms in self.terms.every())

    def _gap(self, delay: float) -> float:
        return delay * random.uniform(0.5, 1.5) if self.randomize and delay > 0 else delay

    def _pace(self, key: str) -> _Pace:
        pace = self._hosts.get(key)
        if pace is None:
            if len(self._hosts) >= self.kept:
                now = self.clock()
                self._hosts = {k: p for k, p in self._hosts.items() if p.in_flight or p.next_start > now}
            pace = self._hosts[key] = _Pace()
        return pace


def host_of(url: str) -> str:
    """The key of a host's pace: scheme aside, its name and port as the URL writes them, in lower case."""
    return urlsplit(url).netloc.lower()
