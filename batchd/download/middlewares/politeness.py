"""Politeness toward each site, across the threads of a worker: at most CONCURRENT_REQUESTS_PER_DOMAIN
requests in flight to one host, and DOWNLOAD_DELAY seconds between two requests to it (randomised
0.5x to 1.5x unless RANDOMIZE_DOWNLOAD_DELAY is off, so that a site sees no fixed rhythm). DOMAIN_RATE_LIMIT is
a backend's HostRates port (backends/host_rates.py in one process, Redis for every worker).

A thread asks for its turn before each attempt (retries too) and gives it back when the attempt
ends. Waiting for a turn is a wait by design: the thread promises the heart no more than the delay
or an attempt's bound (threads.py). A host's state is dropped once it is idle, so a crawl of many
hosts keeps this small.
"""
import random
import threading
import time
from typing import Callable, Optional
from urllib.parse import urlsplit

from ...backends.host_rates import KEPT_HOSTS
from ...http import Request, Response
from ...process.threads import guard
from ..chain import ChainContext, DownloaderMiddleware


class _Host:
    __slots__ = ("in_flight", "next_start")

    def __init__(self):
        self.in_flight = 0
        self.next_start = 0.0    # time.monotonic() before which no request to this host starts


class PolitenessMiddleware(DownloaderMiddleware):
    """Each attempt takes its turn at its host (politeness_for: only when it could hold one back)."""

    def __init__(self, politeness: "Politeness"):
        self.politeness = politeness

    @classmethod
    def from_context(cls, context: ChainContext) -> Optional["PolitenessMiddleware"]:
        politeness = politeness_for(context.settings, context.threads)
        return cls(politeness) if politeness is not None else None

    def process_request(self, request: Request) -> None:
        self.politeness.take(request.url)

    def process_response(self, request: Request, response: Response) -> Response:
        self.politeness.give_back(request.url)
        return response

    def process_exception(self, request: Request, exception: BaseException) -> None:
        self.politeness.give_back(request.url)
        return None


def politeness_for(settings, threads: int) -> Optional["Politeness"]:
    """None when it could hold nothing back: no delay, and no more threads than a host may take at once."""
    if settings.DOWNLOAD_DELAY <= 0 and settings.CONCURRENT_REQUESTS_PER_DOMAIN >= threads:
        return None
    return Politeness(settings.CONCURRENT_REQUESTS_PER_DOMAIN, settings.DOWNLOAD_DELAY,
                      settings.RANDOMIZE_DOWNLOAD_DELAY, attempt_bound=settings.DOWNLOAD_TIMEOUT)


class Politeness:
    def __init__(self, concurrency: int, delay: float, randomize: bool = True, attempt_bound: float = 600.0,
                 clock: Callable[[], float] = time.monotonic):
        self.concurrency, self.delay, self.randomize = concurrency, delay, randomize
        self.attempt_bound, self.clock = attempt_bound, clock
        self._hosts: dict = {}
        self._changed = threading.Condition()

    def take(self, url: str) -> None:
        """Wait for, and take, one of the places of `url`'s host (an attempt to fetch it)."""
        key = host_of(url)
        with self._changed:
            host = self._hosts.get(key) or self._remember(key)
            while True:
                wait = self._wait_for(host)
                if wait <= 0:
                    break
                with guard.waiting(wait + 1):
                    self._changed.wait(wait)
            host.in_flight += 1
            host.next_start = self.clock() + self._gap()

    def _wait_for(self, host: _Host) -> float:
        """0 when a request to the host may start now; else how long to wait before looking again."""
        if host.in_flight >= self.concurrency:
            return self.attempt_bound       # woken when one ends
        return host.next_start - self.clock()

    def give_back(self, url: str) -> None:
        with self._changed:
            host = self._hosts.get(host_of(url))
            if host is not None:
                host.in_flight -= 1
            self._changed.notify_all()

    def _gap(self) -> float:
        return self.delay * random.uniform(0.5, 1.5) if self.randomize else self.delay

    def _remember(self, key: str) -> _Host:
        if len(self._hosts) >= KEPT_HOSTS:
            now = self.clock()
            self._hosts = {k: h for k, h in self._hosts.items() if h.in_flight or h.next_start > now}
        host = self._hosts[key] = _Host()
        return host


def host_of(url: str) -> str:
    return urlsplit(url).netloc.lower()
