"""Per-batch counters, Scrapy-like: kept by each worker, shared through the backend, reported at a batch's end.

    BatchStats    a worker's collector: `inc(name, n, batch_id)` from any of its threads, a lock and a dict add
    StatsFlusher  sends what was counted to the backend's BatchCounters (ports.py), exactly once
    report()      the one line the master logs when it closes a batch (summary(): `batchd status` too)

Names are flat strings with slashes ("downloader/request_count", "downloader/response_status_count/200",
"retry/reason_count/HTTP 503", "item/stored"...); any name is counted. `batch_id=None` means the batch of
the task the calling thread works on (`working_on()`, set by the worker as a fetch thread starts a task).

Counts are per batch and leave the worker in flushes: the lander flushes before every write-back (so a
batch's counts are in the backend before its last task settles, and the master's close sees them all),
every STATS_FLUSH_INTERVAL, soon after the worker starts tasks of a new batch, and when it stops. A flush
is numbered per worker (`source`, `seq`); one whose answer never came (the backend went down mid-call) is
sent again under the same number, and the backend applies a number once: never lost, never added twice.

The counters per host (names under "host/", hosts/counts.py) leave in the same flush, the worker's
HOST_STATS_TOP busiest hosts as they are and the rest as "(other)"; each flush also publishes the worker's
gauges per host (tasks set aside, attempts in flight), its busiest HOST_STATS_TOP, for a few intervals.
"""
import itertools
import threading
import time
from typing import Callable, Optional

from ..hosts.counts import DONE, FAILED, IN_FLIGHT, WAITING, fold_top, split_host_counts
from ..backends.ports import BatchCounters
from ..recrawl.pages import FOUND, ITEMS_UNCHANGED, VERDICTS
from ..render.renderer import BROWSER_RESTARTS, BROWSER_STARTS, RENDER_MS, RENDERED
from ..service.systemd import counted

# What the report names, in its order: (counter, words). The basics are always shown, the others when not 0.
REQUESTS, RESPONSES = "downloader/request_count", "downloader/response_count"
ITEM_BASICS = (("item/stored", "stored"), ("item/dumped", "dumped"), ("item/invalid", "invalid"))
STATUS_PREFIX = "downloader/response_status_count/"
RETRY_PREFIX = "retry/reason_count/"
RETRY_COUNT = "retry/count"
BYTES = "downloader/response_bytes"
PROXY_FAILURES = "proxy/failures"
GAUGE_TTL_SLACK = 10.0      # s beyond three flush intervals that a worker's gauges outlive its last flush


class BatchStats:
    """The counters of one worker, per batch, not yet flushed. Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counts: dict = {}             # batch id -> {name: n} counted since the last flush took them
        self._local = threading.local()     # .batch_id: the batch of the calling thread's task
        self._batches_seen: set = set()
        self._latest: Optional[int] = None  # the batch this worker last started a task of

    def working_on(self, batch_id: int) -> bool:
        """The calling thread works on a task of `batch_id` now; True when this worker had no task of it yet."""
        self._local.batch_id = batch_id
        with self._lock:
            self._latest = batch_id
            if batch_id in self._batches_seen:
                return False
            self._batches_seen.add(batch_id)
            return True

    def inc(self, name: str, count: int = 1, batch_id=None) -> None:
        """Add `count` to `name` in `batch_id` (None: the calling thread's batch, else the batch this worker
        last started a task of; a count made before any task is dropped: it belongs to no batch)."""
        if batch_id is None:
            batch_id = getattr(self._local, "batch_id", None)
        with self._lock:
            if batch_id is None:
                batch_id = self._latest
                if batch_id is None:
                    return
            counts = self._counts.get(batch_id)
            if counts is None:
                counts = self._counts[batch_id] = {}
            counts[name] = counts.get(name, 0) + count

    def take(self) -> dict:
        """Everything counted so far ({batch id: {name: n}}), now no longer here."""
        with self._lock:
            taken, self._counts = self._counts, {}
        return taken

    def peek(self) -> dict:
        """A copy of what is counted and not yet taken."""
        with self._lock:
            return {batch_id: dict(counts) for batch_id, counts in self._counts.items()}


class StatsFlusher:
    """Sends a BatchStats' counts to a BatchCounters port. One flush at a time; a flush whose call failed is
    kept, numbered, and sent again before anything counted after it (BackendUnavailable reaches the caller,
    who waits the outage out as it does for its own calls). `gauges()`: the worker's hosts now, {host: {field: n}};
    `top`: HOST_STATS_TOP."""

    def __init__(self, stats: BatchStats, counters: BatchCounters, source: str, interval: float, top: int = 50,
                 gauges: Callable[[], dict] = dict):
        self.stats, self.counters, self.source, self.interval = stats, counters, source, interval
        self.top, self.gauges = top, gauges
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        self._unsent: Optional[tuple] = None     # (seq, {batch id: counts}) sent without an answer yet
        self._due = time.monotonic() + interval

    def flush(self) -> None:
        """Send every count made so far (and any earlier flush still unsent)."""
        with self._lock:
            self._due = time.monotonic() + self.interval
            if self._unsent is not None:
                self._send(*self._unsent)      # before anything newer: its number must still be its own
            taken = self.stats.take()
            if taken:
                self._unsent = (next(self._numbers), taken)
                self._send(*self._unsent)
            self.counters.set_host_gauges(self.source, fold_top(self.gauges(), self.top, (WAITING, IN_FLIGHT)),
                                          3 * self.interval + GAUGE_TTL_SLACK)

    def forget_gauges(self) -> None:
        """The worker stops: its hosts are no longer its own."""
        self.counters.set_host_gauges(self.source, {}, 0)

    def flush_if_due(self) -> None:
        if time.monotonic() >= self._due:
            self.flush()

    def due_now(self) -> None:
        """Flush at the lander's next turn (a worker's first task of a new batch)."""
        self._due = 0.0

    def unsent(self) -> dict:
        """{batch id: counts} this worker holds, flushed or not yet sent, without the hosts' (for the line of a
        stop that could not flush)."""
        held = self.stats.peek()
        unsent = self._unsent
        if unsent is not None:
            for batch_id, counts in unsent[1].items():
                mine = held.setdefault(batch_id, {})
                for name, n in counts.items():
                    mine[name] = mine.get(name, 0) + n
        return {batch_id: split_host_counts(counts)[0] for batch_id, counts in held.items()}

    def _send(self, seq: int, per_batch: dict) -> None:
        for batch_id in sorted(per_batch):
            counts, hosts = split_host_counts(per_batch[batch_id])
            self.counters.add_counts(batch_id, counts, self.source, seq, fold_top(hosts, self.top, (DONE, FAILED)),
                                     self.top)
            del per_batch[batch_id]     # a retry of this flush need not resend it (it would be ignored)
        self._unsent = None


def report(batch_id: int, counts: dict, flags: int = 0) -> str:
    """The master's line at a batch's close; `flags`: its quality flags, counted at its end when there are some."""
    flagged = f", {flags} quality flag{'' if flags == 1 else 's'} (batchd quality)" if flags else ""
    return f"batch {batch_id} done: {summary(counts)}{flagged}"


def summary(counts: dict) -> str:
    """A batch's counters in words, on one line: the basics, then what is not 0."""
    responses = counts.get(RESPONSES) or _sum_under(counts, STATUS_PREFIX)
    parts = [counted(counts.get(REQUESTS, 0), "request"),
             counted(responses, "response") + _breakdown(counts, STATUS_PREFIX)]
    retries = counts.get(RETRY_COUNT) or _sum_under(counts, RETRY_PREFIX)
    if retries:
        parts.append(f"{retries} {'retry' if retries == 1 else 'retries'}{_breakdown(counts, RETRY_PREFIX)}")
    parts.append(size_text(counts.get(BYTES, 0)))
    parts += [f"{counted(counts.get(name, 0), 'item') if first else counts.get(name, 0)} {words}"
              for first, (name, words) in zip((True, False, False), ITEM_BASICS)]     # "1 item stored, 0 dumped"
    if counts.get(ITEMS_UNCHANGED):
        parts.append(f"{counts[ITEMS_UNCHANGED]} unchanged")
    found = [FOUND + verdict for verdict in VERDICTS]
    if any(counts.get(name) for name in found):
        parts.append("tasks: " + " / ".join(f"{counts.get(FOUND + v, 0)} {v}" for v in VERDICTS))
    if counts.get(PROXY_FAILURES):
        parts.append(f"{counts[PROXY_FAILURES]} proxy failures")
    if counts.get(RENDERED) or counts.get(BROWSER_STARTS):
        parts.append(_rendering(counts))
    known = ({name for name, _ in ITEM_BASICS} | {REQUESTS, RESPONSES, RETRY_COUNT, BYTES, PROXY_FAILURES, ITEMS_UNCHANGED}
             | set(found) | {RENDERED, RENDER_MS, BROWSER_STARTS, BROWSER_RESTARTS})
    parts += [f"{name} {n}" for name, n in sorted(counts.items())
              if n and name not in known and not name.startswith((STATUS_PREFIX, RETRY_PREFIX))]
    return ", ".join(parts)


def _rendering(counts: dict) -> str:
    """ "12 pages rendered in 3.4 s (2 browsers started, 1 replaced)" """
    started, replaced = counts.get(BROWSER_STARTS, 0), counts.get(BROWSER_RESTARTS, 0)
    return (f"{counted(counts.get(RENDERED, 0), 'page')} rendered in {counts.get(RENDER_MS, 0) / 1000:.1f} s "
            f"({counted(started, 'browser')} started, {replaced} replaced)")


def _sum_under(counts: dict, prefix: str) -> int:
    return sum(n for name, n in counts.items() if name.startswith(prefix))


def _breakdown(counts: dict, prefix: str) -> str:
    """ " (200: 4980, 404: 10)": the non-zero counters under `prefix`, the largest first."""
    shown = sorted(((name[len(prefix):], n) for name, n in counts.items() if name.startswith(prefix) and n),
                   key=lambda pair: (-pair[1], pair[0]))
    return f" ({', '.join(f'{key}: {n}' for key, n in shown)})" if shown else ""


def size_text(size: int) -> str:
    """Bytes as people read them: 512 B, 3.2 kB, 48.1 MB, 2.0 GB (powers of 1000)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
