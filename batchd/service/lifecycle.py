"""How a loop is told to stop, and how its retries are spaced.

`StopFlag` carries the two stops of a batchd process: the first request is a warm
stop (stop leasing, finish in-flight work, flush, write back), a second one is cold
(abandon in-flight work to the leases). Signal handlers only call `request()`.

`Backoff` spaces retries: of a loop that met an outage (batchd/service/outages.py), of an idle
worker polling an empty queue, of a supervisor respawning a child that keeps dying.
"""
import random
import threading
from typing import Optional


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
        delay = min(self.cap, self.base * 2 ** min(self.failures, 32))
        self.failures += 1
        return delay * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self.failures = 0
