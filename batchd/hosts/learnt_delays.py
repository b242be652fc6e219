"""The adaptive throttle's learnt delay per host (AUTOTHROTTLE_ENABLED), kept per worker process across its
threads: how each answer moves it is in download/middlewares/throttle.py, the link that feeds it; the delay is
told to the worker's HostPaces (hosts/paces.py), where the politeness link spaces the host's starts by it.

A host met for the first time gets the start delay; the delay stays within the floor (DOWNLOAD_DELAY) and the
cap (AUTOTHROTTLE_MAX_DELAY). A line at INFO names a host whose delay rises past a notable threshold (each
STEP x the start delay) or comes back down, not each request.
"""
import logging
import math
import threading
import time
from typing import Callable

from .paces import KEPT_HOSTS, host_of

log = logging.getLogger("batchd")

PENALTY = 2.0                    # an overloaded answer multiplies the host's delay by this
STEP = 4.0                       # a line at INFO each time the delay crosses a power of this (x the unit)


class _Learnt:
    __slots__ = ("delay", "logged_level")

    def __init__(self, delay: float):
        self.delay = delay
        self.logged_level = 0        # the threshold level last said at INFO


class HostThrottle:
    """Each host's learnt delay between the starts of two of its requests."""

    def __init__(self, start_delay: float = 1.0, max_delay: float = 60.0, target_concurrency: float = 1.0,
                 min_delay: float = 0.0, kept: int = KEPT_HOSTS, clock: Callable[[], float] = time.monotonic):
        self.min_delay, self.max_delay = min_delay, max(max_delay, min_delay)
        self.start_delay = min(max(start_delay, min_delay), self.max_delay)
        self.target_concurrency, self.kept, self.clock = target_concurrency, kept, clock
        self.unit = max(self.start_delay, 0.1)    # what the INFO thresholds are multiples of
        self._hosts: dict = {}                    # host -> _Learnt, oldest first
        self._lock = threading.Lock()

    def delay_of(self, url: str) -> float:
        """The delay between two starts of requests to `url`'s host now."""
        with self._lock:
            learnt = self._hosts.get(host_of(url))
            return learnt.delay if learnt is not None else self.start_delay

    def delay_for_attempt(self, url: str) -> float:
        """The host's delay as an attempt at it starts: a host met for the first time is kept from now on."""
        with self._lock:
            return self._learnt(host_of(url)).delay

    def slow_down(self, url: str, why: str) -> float:
        """The host is overloaded (`why`): its delay doubled at once, at least to the start delay."""
        host = host_of(url)
        with self._lock:
            learnt = self._learnt(host)
            learnt.delay = self._bounded(max(learnt.delay * PENALTY, self.start_delay))
            self._say_if_notable(host, learnt, why)
            return learnt.delay

    def follow_latency(self, url: str, latency: float, may_lower: bool) -> float:
        """Halfway towards latency / the target concurrency; `may_lower` False: never lower."""
        host = host_of(url)
        with self._lock:
            learnt = self._learnt(host)
            towards = (learnt.delay + latency / self.target_concurrency) / 2
            if may_lower or towards > learnt.delay:
                learnt.delay = self._bounded(towards)
            self._say_if_notable(host, learnt, f"latency {latency:.2f} s")
            return learnt.delay

    def _bounded(self, delay: float) -> float:
        return min(self.max_delay, max(self.min_delay, delay))

    def _say_if_notable(self, host: str, learnt: _Learnt, why: str) -> None:
        """INFO when the delay rises to a new threshold, or falls two below the last one said (or to the
        start): a host that hovers around a threshold is not said again and again."""
        level = max(0, math.floor(math.log(learnt.delay / self.unit, STEP))) if learnt.delay > 0 else 0
        if level > learnt.logged_level:
            log.info("%s: %.3g s between the starts of its requests, slowed down (%s)", host, learnt.delay, why)
        elif level <= learnt.logged_level - 2 or (level == 0 < learnt.logged_level):
            log.info("%s: %.3g s between the starts of its requests, sped up again (%s)", host, learnt.delay, why)
        else:
            return
        learnt.logged_level = level

    def _learnt(self, host: str) -> _Learnt:
        learnt = self._hosts.get(host)
        if learnt is None:
            if len(self._hosts) >= self.kept:
                del self._hosts[next(iter(self._hosts))]      # the oldest goes: met again, it starts afresh
            learnt = self._hosts[host] = _Learnt(self.start_delay)
        return learnt
