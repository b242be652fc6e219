"""DOMAIN_RATE_LIMIT kept in one process: the memory and SQLite backends' HostRates port (the Redis one
holds it for every worker of a namespace: backends/mysql_redis/lua/book_host_rate.lua runs the same arithmetic)."""
import threading
import time
from typing import Callable

KEPT_HOSTS = 10_000          # past this many, idle hosts are forgotten


def booked_start(theoretical: float, now: float, per_second: float, burst: int) -> tuple:
    """One booking of the generic cell rate algorithm: (seconds to wait, the next theoretical arrival). A
    request to a host is due every 1/per_second s; `burst` - 1 intervals of credit let that many start at
    once after a lull. Redis runs the same arithmetic in book_host_rate.lua."""
    interval = 1.0 / per_second
    theoretical = max(theoretical, now)
    start = max(now, theoretical - (burst - 1) * interval)
    return start - now, theoretical + interval


class LocalHostRates:
    """HostRates within one process (`for_namespace`: the one every worker of the process shares)."""

    _shared: dict = {}
    _shared_lock = threading.Lock()

    @classmethod
    def for_namespace(cls, namespace: str) -> "LocalHostRates":
        with cls._shared_lock:
            return cls._shared.setdefault(namespace, cls())

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._next: dict = {}          # host -> theoretical arrival of its next request
        self._lock = threading.Lock()

    def reserve(self, host: str, per_second: float, burst: int) -> float:
        with self._lock:
            now = self.clock()
            if len(self._next) >= KEPT_HOSTS:
                self._next = {h: at for h, at in self._next.items() if at > now}
            wait, self._next[host] = booked_start(self._next.get(host, now), now, per_second, burst)
        return wait
