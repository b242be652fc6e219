"""Leases taken ahead for a worker's fetch threads: several per round trip to the queue.

A fetch thread that needs a task takes one this worker already leased. The leases are asked for
several at once (LeaseQueue.lease_many, one round trip), and before the last is taken: the thread
that takes one of the last few does the round trip for the others, outside the lock, while they go
on taking what is left. A thread waits for a round trip only when nothing is left, and then never
does one of its own while another is under way. (In a worker whose threads keep the GIL busy, the
answer of a round trip waits for the GIL a few milliseconds: done by one thread while the rest
wait, a fifth of the fetch threads' time went to waiting for leases.)

How many per round trip: up to PREFETCH_MOST, fewer while the queue runs short (a worker must not
sit on the batch's last tasks while others idle; then nothing is asked for ahead either), and never
more than the ledger has free slots for. While the queue is empty, a worker's idle threads share
one look every EMPTY_RECHECK seconds, so they can poll often (a new batch starts at once) without a
round trip each; each look that finds it empty again doubles that wait, up to EMPTY_RECHECK_MOST
(a worker whose threads wait on a slow host's answers for a minute asks a few times a second, not
twenty). A worker that has leased nothing since it started looks every EMPTY_RECHECK for its first
FIRST_LEASE_WINDOW seconds, without doubling: started with its master, it finds the queue empty until the
master has opened the batch and fed it, a few hundred ms, and by then the doubled wait was 0.16 to 0.4 s
(the first lease came a median 160 ms after the queue was fed, now 20: docs/performance.md). A lease
waiting here is renewed with the worker's others and given back at a stop, like any lease it holds:
nothing about the guarantees changes, only the round trips.
"""
import collections
import itertools
import os
import socket
import threading
import time
import uuid
from typing import Callable, Optional

from ..model import Lease
from ..backends.ports import LeaseQueue

PREFETCH_MOST = 32     # leases per round trip, at most (8 cost a worker 2 % more CPU per task than 32)
SHARE_OF_QUEUE = 16    # while the queue is short, take at most 1/16 of what is left in it
EMPTY_RECHECK = 0.01   # s: after the queue was found empty, the worker's idle threads look again this often
                       # (a worker started with its master finds the queue empty a few ms before it is fed)
EMPTY_RECHECK_MOST = 0.4   # s: ... and, while it stays empty, at least this often
FIRST_LEASE_WINDOW = 5.0   # s: a worker that has leased nothing since its start looks every EMPTY_RECHECK this long


class LeasePrefetch:
    def __init__(self, leases: LeaseQueue, lease_seconds: float, next_token: Callable[[], str],
                 free_slots: Callable[[], int]):
        self.leases, self.lease_seconds = leases, lease_seconds
        self._next_token, self._free_slots = next_token, free_slots
        self._waiting: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._refilled = threading.Condition(self._lock)
        self._refilling = False  # a thread is on a round trip for more
        self._batch = 1          # how many the next round trip asks for
        self._empty_until = 0.0  # idle threads polling meanwhile share the last answer: one round trip
        self._empty_wait = EMPTY_RECHECK
        self._eager_until = time.monotonic() + FIRST_LEASE_WINDOW   # until the first lease (0 after it)

    def take(self) -> Optional[Lease]:
        """A leased task for the calling thread (which holds a ledger slot for it), or None when the queue
        is empty. The thread may first do the round trip that brings the next ones."""
        with self._lock:
            while not self._waiting and self._refilling:
                self._refilled.wait()
            if self._waiting:
                lease = self._waiting.popleft()
                if self._refilling or len(self._waiting) >= self._batch // 2 or time.monotonic() < self._empty_until:
                    return lease
                # Ahead: this thread holds its slot already, and each lease still waiting will need one.
                wanted = min(self._batch, self._free_slots() - len(self._waiting))
                if wanted < 1:
                    return lease
            elif time.monotonic() < self._empty_until:
                return None
            else:
                lease, wanted = None, max(1, min(self._batch, self._free_slots() + 1))
            self._refilling = True
        try:
            taken = self.leases.lease_many([self._next_token() for _ in range(wanted)], self.lease_seconds)
        except BaseException:
            with self._lock:
                if lease is not None:    # not lost: it waits here for the next thread, renewed meanwhile
                    self._waiting.appendleft(lease)
                self._refilled_with([])
            raise
        with self._lock:
            self._refilled_with(taken)
            if lease is None and self._waiting:
                lease = self._waiting.popleft()
        return lease

    def _refilled_with(self, taken: list) -> None:
        """(Under the lock) the round trip's answer: its leases wait here, and the next one's size."""
        self._refilling = False
        self._refilled.notify_all()
        if not taken:
            if not self._waiting:
                now = time.monotonic()
                self._batch, self._empty_until = 1, now + self._empty_wait
                if now >= self._eager_until:
                    self._empty_wait = min(EMPTY_RECHECK_MOST, self._empty_wait * 2)
            return
        self._empty_wait, self._eager_until = EMPTY_RECHECK, 0.0
        self._batch = max(1, min(PREFETCH_MOST, taken[-1].queue_left // SHARE_OF_QUEUE))
        self._waiting.extend(taken)

    def hold_off(self, seconds: float) -> None:
        """Lease nothing new for `seconds` (what was leased ahead is still taken)."""
        with self._lock:
            self._empty_until = max(self._empty_until, time.monotonic() + seconds)

    def waiting(self) -> list:
        """The leases no thread has taken yet (renewed with the others)."""
        with self._lock:
            return list(self._waiting)

    def drain(self) -> list:
        """The leases no thread will take now (the worker stops): to be given back."""
        with self._lock:
            drained, self._waiting = list(self._waiting), collections.deque()
            return drained


class LeaseTokens:
    """The tokens a worker takes its leases with: unique per worker (several may share a process), each
    starting with its process's prefix (`worker_token_prefix`)."""

    def __init__(self, pid: Optional[int] = None):
        self.prefix = f"{worker_token_prefix(pid or os.getpid())}{uuid.uuid4().hex[:8]}:"
        self._numbers = itertools.count(1)

    def next(self) -> str:
        return f"{self.prefix}{next(self._numbers)}"


def worker_token_prefix(pid: int) -> str:
    """The start of every lease token of a worker process: its supervisor gives back a dead worker's
    leases by it (`expire_leases_of`)."""
    return f"{socket.gethostname()}:{pid}:"
