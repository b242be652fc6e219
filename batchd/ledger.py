"""The ledger: what a worker holds in memory that has not landed yet.

Per worker a row (pid, heartbeat, counters) and a fixed number of slots, one per
in-flight task, each counting the items yielded for that task and not yet stored.
The write-back gate reads a task's slot: `update_task(ok=True)` is written only once
it reaches 0. A worker with no free slot takes no new task.

`LocalLedger` keeps this in the worker's own memory (a worker run in-process);
the supervisor swaps in `SharedLedger` rows that it can read from outside.
"""
import abc
import threading
import time
from typing import Optional


class Ledger(abc.ABC):
    """One worker's view of its row. Thread-safe for the worker's threads."""

    @abc.abstractmethod
    def acquire_slot(self) -> Optional[int]:
        """A free slot for the next task, or None when every slot is taken."""

    @abc.abstractmethod
    def label(self, slot: int, task_key: str) -> None:
        """Name the task a slot holds (for the supervisor's account of a dead worker)."""

    @abc.abstractmethod
    def release_slot(self, slot: int) -> None:
        """The task is written back (or abandoned): its slot is free again."""

    @abc.abstractmethod
    def add(self, slot: int, n: int) -> None:
        """n items yielded for the slot's task, buffered in memory."""

    @abc.abstractmethod
    def sub(self, slot: int, n: int) -> None:
        """n of the slot's items landed (stored, or dumped to failed_items.jsonl)."""

    @abc.abstractmethod
    def unflushed(self, slot: int) -> int: ...

    @abc.abstractmethod
    def free_slots(self) -> int: ...

    @abc.abstractmethod
    def beat(self) -> None:
        """The worker is alive (the supervisor's watchdog reads this)."""

    @abc.abstractmethod
    def count(self, done: int = 0, failed: int = 0, items: int = 0) -> None:
        """Add to the worker's totals: tasks written done / failed, items landed."""

    @abc.abstractmethod
    def totals(self) -> dict:
        """{"done", "failed", "items", "unflushed"} for this worker."""


class LocalLedger(Ledger):
    def __init__(self, slots: int):
        self._lock = threading.Lock()
        self._keys: list = [None] * slots
        self._counts = [0] * slots
        self._totals = {"done": 0, "failed": 0, "items": 0}
        self.heartbeat = time.monotonic()

    def acquire_slot(self) -> Optional[int]:
        with self._lock:
            for slot, key in enumerate(self._keys):
                if key is None:
                    self._keys[slot], self._counts[slot] = "", 0
                    return slot
            return None

    def label(self, slot: int, task_key: str) -> None:
        with self._lock:
            self._keys[slot] = task_key

    def release_slot(self, slot: int) -> None:
        with self._lock:
            self._keys[slot], self._counts[slot] = None, 0

    def add(self, slot: int, n: int) -> None:
        with self._lock:
            self._counts[slot] += n

    def sub(self, slot: int, n: int) -> None:
        with self._lock:
            self._counts[slot] -= n

    def unflushed(self, slot: int) -> int:
        return self._counts[slot]

    def free_slots(self) -> int:
        return self._keys.count(None)

    def beat(self) -> None:
        self.heartbeat = time.monotonic()

    def count(self, done: int = 0, failed: int = 0, items: int = 0) -> None:
        with self._lock:
            self._totals["done"] += done
            self._totals["failed"] += failed
            self._totals["items"] += items

    def totals(self) -> dict:
        with self._lock:
            return dict(self._totals, unflushed=sum(self._counts))
