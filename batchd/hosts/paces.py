"""A worker's per-host pace: the one place its links space the requests to each host.

`HostPaces` is shared by the links that space requests: the politeness link takes each attempt's turn
there (the in-flight count, the next start), and robots.txt's Crawl-delay and the throttle's learnt delay
are told to it. The gap after a start is the largest of the host's delay (randomised as DOWNLOAD_DELAY is),
its Crawl-delay (unless the rate-limit link books it for the namespace: `crawl_delay_booked`) and its
throttle delay. `needs_pacing` says whether a worker's paces could hold anything back at all.
"""
import math
import random
import threading
import time
from typing import Callable
from urllib.parse import urlsplit

from .rates import KEPT_HOSTS
from .terms import HostTerms


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


def needs_pacing(paces: HostPaces, settings, threads: int) -> bool:
    """Whether `paces` could hold a request back with these settings: a host's terms with a delay or fewer
    places than `threads`, robots.txt's Crawl-delay read, or the throttle."""
    holds_back = any(terms.delay > 0 or terms.concurrency < threads for terms in paces.terms.every())
    return holds_back or settings.ROBOTSTXT_OBEY or settings.AUTOTHROTTLE_ENABLED
