"""AUTOTHROTTLE_ENABLED: a delay between the starts of two requests to one host, learnt from how the
host answers, kept per worker process (across its threads).

A host met for the first time gets AUTOTHROTTLE_START_DELAY. Each answer moves its delay:

  2xx                 halfway towards latency / AUTOTHROTTLE_TARGET_CONCURRENCY, the delay at which
                      about that many requests are in flight to the host at once (a host answering
                      in 0.5 s with a target of 2 gets 0.25 s): a slow host is spaced out, a fast,
                      healthy one is caught up with again, a halving at a time;
  429, 503, timeouts  doubled at once (at least to the start delay), and the host's next start is put
                      off by the new delay: it says it is overloaded, or it is;
  anything else       (a 404, a 500) may raise the delay as a 2xx would, never lower it: a quick error
                      page says nothing of how fast the host serves its pages.

The delay stays within DOWNLOAD_DELAY (the floor) and AUTOTHROTTLE_MAX_DELAY. It is told to the worker's
HostPaces (hosts/terms.py), where the politeness link spaces the host's starts by the largest of
it, the host's own delay and its Crawl-delay: without that link, the throttle learns but spaces nothing. A line at INFO names a
host whose delay rises past a notable threshold (each 4x the start delay) or comes back down, not
each request.
"""
import logging
import math
import threading
import time
from typing import Callable, Optional

import requests

from ...errors import ConfigError
from ...http import Request, Response
from ..chain import ChainContext, DownloaderMiddleware
from ...hosts.paces import KEPT_HOSTS, HostPaces, host_of

log = logging.getLogger("batchd")

PENALTY = 2.0                    # a 429, a 503 or a timeout multiplies the host's delay by this
STEP = 4.0                       # a line at INFO each time the delay crosses a power of this (x the unit)
OVERLOADED_STATUSES = frozenset({429, 503})


class _Pace:
    __slots__ = ("delay", "logged_level")

    def __init__(self, delay: float):
        self.delay = delay
        self.logged_level = 0        # the threshold level last said at INFO


class AutoThrottleMiddleware(DownloaderMiddleware):
    """Spaces each host's requests by a delay learnt from its answers (see this module's text)."""

    def __init__(self, start_delay: float = 1.0, max_delay: float = 60.0, target_concurrency: float = 1.0,
                 min_delay: float = 0.0, kept: int = KEPT_HOSTS, clock: Callable[[], float] = time.monotonic,
                 paces: Optional[HostPaces] = None):
        """`paces`: the worker's (its politeness link's), where the delays are told (None: paces of its own)."""
        self.paces = paces or HostPaces(clock=clock)
        self.min_delay, self.max_delay = min_delay, max(max_delay, min_delay)
        self.start_delay = min(max(start_delay, min_delay), self.max_delay)
        self.target_concurrency, self.kept, self.clock = target_concurrency, kept, clock
        self.unit = max(self.start_delay, 0.1)    # what the INFO thresholds are multiples of
        self._hosts: dict = {}                    # host -> _Pace, oldest first
        self._lock = threading.Lock()

    @classmethod
    def from_context(cls, context: ChainContext) -> Optional["AutoThrottleMiddleware"]:
        settings = context.settings
        if not settings.AUTOTHROTTLE_ENABLED:
            return None
        if settings.AUTOTHROTTLE_START_DELAY > settings.AUTOTHROTTLE_MAX_DELAY:
            raise ConfigError(f"AUTOTHROTTLE_START_DELAY ({settings.AUTOTHROTTLE_START_DELAY:g}) is more than "
                              f"AUTOTHROTTLE_MAX_DELAY ({settings.AUTOTHROTTLE_MAX_DELAY:g})")
        return cls(settings.AUTOTHROTTLE_START_DELAY, settings.AUTOTHROTTLE_MAX_DELAY,
                   settings.AUTOTHROTTLE_TARGET_CONCURRENCY, settings.DOWNLOAD_DELAY, paces=context.paces)

    def delay_of(self, url: str) -> float:
        """The delay between two starts of requests to `url`'s host now."""
        with self._lock:
            pace = self._hosts.get(host_of(url))
            return pace.delay if pace is not None else self.start_delay

    def process_request(self, request: Request) -> None:
        """The host's delay, told again before each attempt: the paces forget an idle host."""
        with self._lock:
            delay = self._pace_of(host_of(request.url)).delay
        self.paces.keep_throttle_delay(request.url, delay)

    def process_response(self, request: Request, response: Response) -> Response:
        status = response.status_code
        if status in OVERLOADED_STATUSES:
            self._slow_down(request.url, f"HTTP {status}")
        else:
            self._follow_latency(request.url, response.elapsed, may_lower=200 <= status < 300)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        if isinstance(exception, requests.Timeout):
            self._slow_down(request.url, type(exception).__name__)
        return None

    def _slow_down(self, url: str, why: str) -> None:
        host = host_of(url)
        with self._lock:
            pace = self._pace_of(host)
            pace.delay = self._bounded(max(pace.delay * PENALTY, self.start_delay))
            self._say_if_notable(host, pace, why)
        self.paces.keep_throttle_delay(url, pace.delay, put_off=True)

    def _follow_latency(self, url: str, latency: float, may_lower: bool) -> None:
        host = host_of(url)
        with self._lock:
            pace = self._pace_of(host)
            towards = (pace.delay + latency / self.target_concurrency) / 2
            if may_lower or towards > pace.delay:
                pace.delay = self._bounded(towards)
            self._say_if_notable(host, pace, f"latency {latency:.2f} s")
        self.paces.keep_throttle_delay(url, pace.delay)

    def _bounded(self, delay: float) -> float:
        return min(self.max_delay, max(self.min_delay, delay))

    def _say_if_notable(self, host: str, pace: _Pace, why: str) -> None:
        """INFO when the delay rises to a new threshold, or falls two below the last one said (or to the
        start): a host that hovers around a threshold is not said again and again."""
        level = max(0, math.floor(math.log(pace.delay / self.unit, STEP))) if pace.delay > 0 else 0
        if level > pace.logged_level:
            log.info("%s: %.3g s between the starts of its requests, slowed down (%s)", host, pace.delay, why)
        elif level <= pace.logged_level - 2 or (level == 0 < pace.logged_level):
            log.info("%s: %.3g s between the starts of its requests, sped up again (%s)", host, pace.delay, why)
        else:
            return
        pace.logged_level = level

    def _pace_of(self, host: str) -> _Pace:
        pace = self._hosts.get(host)
        if pace is None:
            if len(self._hosts) >= self.kept:
                del self._hosts[next(iter(self._hosts))]      # the oldest goes: met again, it starts afresh
            pace = self._hosts[host] = _Pace(self.start_delay)
        return pace
