"""The ledger: what a worker holds in memory that has not landed yet.

Per worker a row (pid, heartbeat, counters) and a fixed number of slots, one per
in-flight task, each counting the items yielded for that task and not yet stored.
The write-back gate reads a task's slot: `update_task(ok=True)` is written only once
it reaches 0. A worker with no free slot takes no new task.

`LocalLedger` keeps this in the worker's own memory (a worker run in-process);
the supervisor swaps in `SharedLedger` rows that it can read from outside.
"""
import abc
import collections
import ctypes
import multiprocessing
import os
import threading
import time
from dataclasses import dataclass
from enum import IntEnum
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

    def note_served(self) -> None:
        """The worker leased a task: a crash from now on is not a crash loop (its supervisor respawns it
        at once)."""

    def set_outages(self, outages: list) -> None:
        """The backends this worker is waiting for (batchd.service.outages.Outage), for its supervisor's STATUS=."""


class LocalLedger(Ledger):
    def __init__(self, slots: int):
        self._lock = threading.Lock()
        self._keys: list = [None] * slots
        self._counts = [0] * slots
        self._free = collections.deque(range(slots))
        self._totals = {"done": 0, "failed": 0, "items": 0}
        self.heartbeat = time.monotonic()

    def acquire_slot(self) -> Optional[int]:
        with self._lock:
            if not self._free:
                return None
            slot = self._free.popleft()
            self._keys[slot], self._counts[slot] = "", 0
            return slot

    def label(self, slot: int, task_key: str) -> None:
        with self._lock:
            self._keys[slot] = task_key

    def release_slot(self, slot: int) -> None:
        with self._lock:
            if self._keys[slot] is not None:
                self._free.append(slot)
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
        return len(self._free)

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


# -- the shared block of a supervised host

KEY_BYTES = 64                 # a task key longer than this is shortened (it only names the task in logs)
BACKEND_BYTES = 16
REASON_BYTES = 160


class Phase(IntEnum):
    EMPTY = 0                  # no child on this row
    STARTING = 1               # forked: loading the spider
    RUNNING = 2                # its loop is running


class _Slot(ctypes.Structure):
    _fields_ = [("in_use", ctypes.c_int32), ("key_len", ctypes.c_int32),
                ("key", ctypes.c_char * KEY_BYTES), ("unflushed", ctypes.c_int64)]


class _Row(ctypes.Structure):
    # Written by the child that owns the row; the supervisor reads it, and writes it only
    # while no child owns it (before a fork, after a reap). Aligned 8-byte fields: no torn reads.
    _fields_ = [("pid", ctypes.c_int64), ("phase", ctypes.c_int64), ("heartbeat", ctypes.c_double),
                ("done", ctypes.c_int64), ("failed", ctypes.c_int64), ("items", ctypes.c_int64),
                ("served", ctypes.c_int64),                 # 1 once it leased a task / finished a patrol
                # the master's row only: its view of the batch; next_due: when the next opens (next_due_text)
                ("batch_id", ctypes.c_int64), ("settled", ctypes.c_int64), ("total", ctypes.c_int64),
                ("rate", ctypes.c_double), ("is_done", ctypes.c_int64), ("done_count", ctypes.c_int64),
                ("fail_count", ctypes.c_int64), ("next_due", ctypes.c_char * 64),
                ("wait_until", ctypes.c_double),            # when the last host waiting for its crawl hours may go on
                ("paused_since", ctypes.c_double),          # `batchd pause`: since when (Unix time, 0: not paused)
                ("queued", ctypes.c_int64),                 # tasks in the queue after its last refill
                # the backend it waits for, since when (Unix time, 0: none) and why
                ("outage_since", ctypes.c_double), ("outage_backend", ctypes.c_char * BACKEND_BYTES),
                ("outage_reason", ctypes.c_char * REASON_BYTES)]


@dataclass(frozen=True)
class Lost:
    """What a dead child held in memory: its in-flight task keys and their unflushed items."""

    items: int
    task_keys: tuple


class LedgerBlock:
    """One fixed-size block of anonymous shared memory: a row per child, slots per worker row.

    The supervisor allocates it before forking (`RawArray` from the fork context: no /dev/shm
    name to leak, nothing a resource tracker could unlink), so every child maps the same pages.
    Rows [0, master_rows) are for masters and have no slots; the rest are workers' rows.
    """

    def __init__(self, master_rows: int, worker_rows: int, slots_per_worker: int):
        self.master_rows, self.worker_rows = master_rows, worker_rows
        self.slots_per_worker = slots_per_worker

        class Block(ctypes.Structure):
            _fields_ = [("rows", _Row * (master_rows + worker_rows)),
                        ("slots", _Slot * max(1, worker_rows * slots_per_worker))]

        self._raw = multiprocessing.get_context("fork").RawArray(ctypes.c_byte, ctypes.sizeof(Block))
        self._block = Block.from_buffer(self._raw)

    @property
    def size(self) -> int:
        return len(self._raw)

    def master_row_numbers(self) -> range:
        return range(self.master_rows)

    def worker_row_numbers(self) -> range:
        return range(self.master_rows, self.master_rows + self.worker_rows)

    def row(self, number: int) -> _Row:
        return self._block.rows[number]

    def slots(self, number: int) -> list:
        if number < self.master_rows:
            return []
        first = (number - self.master_rows) * self.slots_per_worker
        return [self._block.slots[i] for i in range(first, first + self.slots_per_worker)]

    # -- the supervisor's side
    def prepare(self, number: int) -> None:
        """Blank a row for a child about to be forked; its heartbeat starts now."""
        ctypes.memset(ctypes.addressof(self.row(number)), 0, ctypes.sizeof(_Row))
        for slot in self.slots(number):
            ctypes.memset(ctypes.addressof(slot), 0, ctypes.sizeof(_Slot))
        row = self.row(number)
        row.phase, row.heartbeat = Phase.STARTING, time.monotonic()

    def lost(self, number: int) -> Lost:
        held = [slot for slot in self.slots(number) if slot.in_use]
        return Lost(items=sum(max(0, slot.unflushed) for slot in held),
                    task_keys=tuple(slot.key[:slot.key_len].decode("utf-8", "replace") or "?" for slot in held))

    def clear(self, number: int) -> None:
        self.prepare(number)
        self.row(number).phase = Phase.EMPTY

    def silence(self, number: int, now: Optional[float] = None) -> float:
        """Seconds since the row's child last beat."""
        return (time.monotonic() if now is None else now) - self.row(number).heartbeat

    def view(self, number: int) -> dict:
        """A row as `batchd status` lists a worker: its counters and what it holds now."""
        row, held = self.row(number), self.lost(number)
        return {"done": row.done, "failed": row.failed, "items": row.items, "unflushed": held.items,
                "tasks": len(held.task_keys), "silent": round(self.silence(number), 1)}

    def totals(self, numbers) -> dict:
        """Sums over the given rows: tasks done / failed, items landed, items unflushed, tasks held."""
        sums = {"done": 0, "failed": 0, "items": 0, "unflushed": 0, "in_flight": 0}
        for number in numbers:
            row = self.row(number)
            sums["done"] += row.done
            sums["failed"] += row.failed
            sums["items"] += row.items
            lost = self.lost(number)
            sums["unflushed"] += lost.items
            sums["in_flight"] += len(lost.task_keys)
        return sums

    # -- the children's side
    def worker_ledger(self, number: int, slots: int) -> "SharedLedger":
        return SharedLedger(self, number, min(slots, self.slots_per_worker))

    def master_beat(self, number: int, master=None) -> None:
        """The master child's heartbeat; with its Master, the batch figures for STATUS too."""
        row = self.row(number)
        row.heartbeat = time.monotonic()
        if master is None:
            return
        row.served = int(master.served)
        batch, progress = master.batch, master.last_progress
        if batch is not None and progress is not None:
            row.batch_id, row.settled, row.total = batch.id, progress.settled, progress.total
            row.done_count, row.fail_count = progress.done, progress.failed
            row.is_done, row.rate = int(batch.is_done), master.rate.per_second()
            row.next_due = master.next_due_text().encode()[:64]
            waiting = master.timing.hosts_wait_until()
            row.wait_until = waiting.timestamp() if waiting is not None else 0.0
        row.paused_since = master.paused_since or 0.0
        row.queued = master.queue_length

    def set_outages(self, number: int, outages: list) -> None:
        """A child's row names the backends it waits for: the earliest outage's start, every name, a reason."""
        row = self.row(number)
        if not outages:
            row.outage_since = 0.0
            return
        first = min(outages, key=lambda o: o.since_wall)
        row.outage_backend = "+".join(o.backend for o in outages).encode()[:BACKEND_BYTES]
        row.outage_reason = first.reason.encode("utf-8", "replace")[:REASON_BYTES]
        row.outage_since = first.since_wall

    def outage(self, number: int) -> Optional[tuple]:
        """(backend, since as Unix time, reason) of what the row's child waits for, or None."""
        row = self.row(number)
        if not row.outage_since:
            return None
        return (row.outage_backend.decode("utf-8", "replace"), row.outage_since,
                row.outage_reason.decode("utf-8", "replace"))

    def mark_running(self, number: int) -> None:
        row = self.row(number)
        row.pid, row.phase, row.heartbeat = os.getpid(), Phase.RUNNING, time.monotonic()


class SharedLedger(Ledger):
    """A worker's own row of the LedgerBlock, through the Ledger interface the write-back gate uses."""

    def __init__(self, block: LedgerBlock, number: int, slots: int):
        self._lock = threading.Lock()
        self._block, self._number = block, number
        self._row = block.row(number)
        self._slots = block.slots(number)[:slots]
        self._free = collections.deque(n for n, slot in enumerate(self._slots) if not slot.in_use)

    def note_served(self) -> None:
        self._row.served = 1

    def set_outages(self, outages: list) -> None:
        self._block.set_outages(self._number, outages)

    def acquire_slot(self) -> Optional[int]:
        with self._lock:
            if not self._free:
                return None
            number = self._free.popleft()
            slot = self._slots[number]
            slot.key_len, slot.unflushed, slot.in_use = 0, 0, 1
            return number

    def label(self, slot: int, task_key: str) -> None:
        data = task_key.encode("utf-8")[:KEY_BYTES]
        with self._lock:
            self._slots[slot].key = data
            self._slots[slot].key_len = len(data)

    def release_slot(self, slot: int) -> None:
        with self._lock:
            entry = self._slots[slot]
            if entry.in_use:
                self._free.append(slot)
            entry.in_use, entry.unflushed, entry.key_len = 0, 0, 0

    def add(self, slot: int, n: int) -> None:
        with self._lock:
            self._slots[slot].unflushed += n

    def sub(self, slot: int, n: int) -> None:
        with self._lock:
            self._slots[slot].unflushed -= n

    def unflushed(self, slot: int) -> int:
        return self._slots[slot].unflushed

    def free_slots(self) -> int:
        return len(self._free)

    def beat(self) -> None:
        self._row.heartbeat = time.monotonic()

    def count(self, done: int = 0, failed: int = 0, items: int = 0) -> None:
        with self._lock:
            self._row.done += done
            self._row.failed += failed
            self._row.items += items

    def totals(self) -> dict:
        with self._lock:
            return {"done": self._row.done, "failed": self._row.failed, "items": self._row.items,
                    "unflushed": sum(slot.unflushed for slot in self._slots if slot.in_use)}
