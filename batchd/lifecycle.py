"""How a loop is told to stop, and how it waits out an outage.

`StopFlag` carries the two stops of a batchd process: the first request is a warm
stop (stop leasing, finish in-flight work, flush, write back), a second one is cold
(abandon in-flight work to the leases). Signal handlers only call `request()`.

`Backoff` spaces the retries of a loop that met BackendUnavailable: a resident
process waits for ever (an unreachable database is not a start-up failure); a
once-mode run gives up and exits 69.
"""
import logging
import random
import threading
import time
from typing import Callable, Optional

from .errors import BackendUnavailable

log = logging.getLogger("batchd")


class StopFlag:
    def __init__(self):
        self._warm = threading.Event()
        self._cold = threading.Event()

    def request(self) -> None:
        """First call: warm stop. Any later call: cold stop."""
        if self._warm.is_set():
            self._cold.set()
        self._warm.set()

    def request_cold(self) -> None:
        self._warm.set()
        self._cold.set()

    def is_set(self) -> bool:
        return self._warm.is_set()

    @property
    def cold(self) -> bool:
        return self._cold.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        return self._warm.wait(timeout)

    def wait_cold(self, timeout: Optional[float] = None) -> bool:
        return self._cold.wait(timeout)


class Backoff:
    """Exponential delays with jitter: 0.5 s, 1 s, 2 s ... up to `cap`."""

    def __init__(self, base: float = 0.5, cap: float = 30.0):
        self.base, self.cap, self.failures = base, cap, 0

    def next_delay(self) -> float:
        delay = min(self.cap, self.base * 2 ** self.failures)
        self.failures += 1
        return delay * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self.failures = 0


def until_available(action: Callable, stop: StopFlag, heartbeat: Callable = lambda: None,
                    once: bool = False, what: str = "backend"):
    """Run `action` until it does not raise BackendUnavailable: one log line when the outage starts,
    one when it ends. With once=True the first failure is final. Returns None if stopped meanwhile."""
    backoff, down_since = Backoff(), None
    while True:
        try:
            result = action()
        except BackendUnavailable as e:
            if once:
                raise
            if down_since is None:
                down_since = time.monotonic()
                log.error("%s; retrying with backoff", e)
            heartbeat()
            if _sleep_beating(backoff.next_delay(), stop, heartbeat):
                return None
            continue
        if down_since is not None:
            log.info("%s is back after %.0f s", what, time.monotonic() - down_since)
        return result


def _sleep_beating(seconds: float, stop: StopFlag, heartbeat: Callable) -> bool:
    """Sleep in short steps, beating; True if a stop was requested."""
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if stop.wait(min(left, 1.0)):
            return True
        heartbeat()
