"""Where a batch stands, gathered as plain data: from the store, the queue and the supervisors' snapshots.

`gather_status` reads the batch record, its tally, the queue and every snapshot the supervisors
publish (reporting/snapshots.py lists their fields) into one dict; `gather_history` the last batches from
their records (`--history`), and `gather_hosts` the batch's counters per host and the workers' gauges
(hosts/counts.py, `--hosts`). Whoever shows them lays them out: the command's text and --json
(cli/status_text.py), the dashboard's pages and its JSON API (web/).
"""
import json
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Optional

from ..hosts.counts import breaker_phases, host_rows
from ..hosts.crawl_hours import CrawlHours
from ..hosts.terms import HostTerms
from ..schedule import due_text
from ..errors import BackendUnavailable
from ..service.systemd import escape_controls
from ..model import BatchRecord, Progress, SpiderPrint
from ..recrawl.pages import FOUND, VERDICTS
from .process_memory import measure_of
from .quality_report import quality_line
from .snapshots import RATE_WINDOW, eta, freshest_master, samples_of, window_rate


def gather_status(runtime) -> dict:
    """Everything `batchd status` shows, as plain data: the batch record, its tally and the queue (no row
    of the task table is counted), the snapshots. A backend that cannot be reached is named under
    "unreachable" and the rest is still gathered: with MySQL down, the batch as the master's supervisor
    last published it in Redis."""
    store, layout, backend = runtime.store, runtime.layout, runtime.backend
    unreachable: list[str] = []
    reached = read_or_note(unreachable, lambda: (store.open(layout), store.last_batch(), quality_line(store),
                                                 store.now()))
    record = reached[1] if reached else None
    next_batch = read_or_note(unreachable, lambda: next_batch_entry(runtime.settings, store, record)) \
        if reached else None
    # The tally before the queue, as the master reads them (master/patrol.py, check_progress).
    seen = read_or_note(unreachable, lambda: (backend.board.read_statuses(),
                                          backend.tally.settled(record.id) if record else None,
                                          backend.leases.queue_counts(),
                                          _counters(backend, record), backend.leases.paused_since()))
    now = time.time()
    snapshots, settled, (waiting, leased), counters, paused_since = seen or ([], None, (None, None), None, None)
    master = freshest_master(snapshots)
    batch, tasks = _batch_and_tasks(record, settled, (waiting or 0) + (leased or 0), None if reached else master)
    of_this_batch = master is not None and batch is not None and int(master["batch_id"]) == batch["id"]
    samples = samples_of(master) if of_this_batch else []
    pace = batch_pace(record, tasks, samples, now, reached[3] if reached else None)
    finished = bool(batch and batch["is_done"])
    hours = CrawlHours(HostTerms.from_settings(runtime.settings), runtime.settings)
    hosts = [_host_entry(s, finished) for s in sorted(snapshots, key=lambda s: (s["host"], s["instance"]))]
    return {
        "namespace": runtime.namespace,
        "table": layout.table,
        "items_in": runtime.items_place(),
        "unreachable": unreachable,
        "store_reached": reached is not None,
        "batch": batch,
        "tasks": tasks,
        "counters": counters,
        "quality": reached[2] if reached else None,     # the last closed batch's judgement (batchd quality)
        "queue": {"waiting": waiting, "leased": leased},
        "paused_since": paused_since,
        "rate": pace.rate,              # settled tasks per second over rate_seconds, up to rate_as_of
        "rate_seconds": pace.seconds,
        "rate_as_of": pace.as_of,
        "rate_basis": pace.basis,       # PACE_BASES: the last RATE_WINDOW, the batch so far, or the whole batch
        "rate_window": RATE_WINDOW,
        "life": samples_of(master, "batch_life") if of_this_batch else [],    # (Unix time, settled): its chart
        # None once the batch is over (nothing left to time), while paused, and while nothing has settled.
        # ... and counted through the closed hours of CRAWL_HOURS (hosts/crawl_hours.py), and no sooner than the
        # last host its master's claims left waiting may go on.
        "eta_seconds": None if finished or tasks is None else eta_through_hours(
            hours, eta(tasks["total"] - tasks["settled"], None if paused_since else pace.rate),
            float((master or {}).get("batch_wait_until") or 0) if of_this_batch else 0.0, now),
        "next_batch": next_batch,           # when the next batch is due (BATCH_INTERVAL or BATCH_SCHEDULE)
        "hosts_waiting": hours.waiting(),   # [{hosts, windows, until}]: the hosts outside their CRAWL_HOURS now
        "hosts": hosts,
        "memory": workers_memory(hosts),
        "workers_alive": sum(int(s.get("workers_alive", 0)) for s in snapshots),
        "workers_wanted": sum(int(s.get("workers_wanted", 0)) for s in snapshots),
        # A finished batch has every item of its tasks landed (a task settles only then): a snapshot taken
        # before its last flush must not say otherwise.
        "unflushed": 0 if finished else sum(int(s.get("unflushed", 0)) for s in snapshots),
        "time": now,
    }


# How a batch's rate was measured: over the last RATE_WINDOW of the master's samples and the tally now; from
# its opening to now (no supervised master samples it); from its opening to its close (it is over).
PACE_BASES = ("window", "so_far", "whole_batch")


@dataclass(frozen=True)
class Pace:
    rate: Optional[float] = None        # settled tasks per second
    seconds: Optional[float] = None     # over how long
    as_of: Optional[float] = None       # up to when (Unix time)
    basis: Optional[str] = None         # one of PACE_BASES


def eta_through_hours(hours: CrawlHours, work: Optional[float], wait_until: float, now: float) -> Optional[float]:
    """Seconds until `work` seconds of crawling are done within the global crawl hours, and no sooner than
    `wait_until` (Unix time, 0: no host waits); None when the work is not known."""
    seconds = hours.seconds_for(work)
    return max(seconds, wait_until - now) if seconds is not None and wait_until else seconds


def next_batch_entry(settings, store, record: Optional[BatchRecord]) -> dict:
    """When the next batch is due and by which rule: {"due": text, "rule": "BATCH_SCHEDULE" or
    "BATCH_INTERVAL", "schedule": the expression or None}; due None before the first batch (the master opens
    it at once)."""
    rule = "BATCH_SCHEDULE" if settings.BATCH_SCHEDULE else "BATCH_INTERVAL"
    return {"due": due_text(record, settings, store) if record is not None else None, "rule": rule,
            "schedule": settings.BATCH_SCHEDULE or None}


def batch_pace(record: Optional[BatchRecord], tasks: Optional[dict], samples: list, now: float,
               store_now: Optional[datetime]) -> Pace:
    """The batch's rate as of now. A batch over: its average from its opening to its close (its record's
    times). A batch running: the master's samples of the tally with the tally as read now as the newest,
    over the last RATE_WINDOW; with no samples (no supervised master publishes them), its average since
    it opened, on the store's clock. Unknown only with neither the store nor the samples, or a batch
    opened this very second."""
    if record is not None and record.is_done:
        average = batch_average(record)
        return Pace() if average is None else Pace(average[0], average[1], None, "whole_batch")
    if samples and tasks is not None and tasks["done"] is not None and now > samples[-1][0] \
            and tasks["settled"] >= samples[-1][1]:
        samples = samples + [(now, tasks["settled"])]       # the tally now: the newest sample
    measured = window_rate(samples)
    if measured is not None:
        return Pace(measured[0], round(measured[1], 3), samples[-1][0], "window")
    if record is not None and tasks is not None and store_now is not None:
        seconds = (store_now - record.batch_date).total_seconds()
        if seconds >= 1:
            return Pace(tasks["settled"] / seconds, round(seconds, 3), now, "so_far")
    return Pace(as_of=samples[-1][0] if samples else None)


def batch_average(record: BatchRecord) -> Optional[tuple]:
    """(settled tasks per second, seconds) from the batch's opening (batch_date) to its close (the update_time of
    its record once done); None when no close is known. The record keeps whole seconds: a batch that closed
    within the second it opened counts as one second."""
    if not record.is_done or record.update_time is None:
        return None
    seconds = max(0.0, (record.update_time - record.batch_date).total_seconds())
    return (record.done_count + record.fail_count) / max(seconds, 1.0), seconds


def _counters(backend, record: Optional[BatchRecord]) -> Optional[dict]:
    """The batch's counters: the record's once it is done, the backend's totals (flushed so far) before."""
    if record is None:
        return None
    return record.counters if record.is_done else backend.counters.counts(record.id)


def read_or_note(unreachable: list, read):
    """What `read` returns, or None with the outage noted (one line per backend)."""
    try:
        return read()
    except BackendUnavailable as e:
        unreachable.append(str(e))
        return None


def _batch_and_tasks(record: Optional[BatchRecord], settled: Optional[tuple], in_flight: int,
                     master: Optional[dict]) -> tuple:
    """The batch and its task counts from its record (exact once it is done) and, while it runs, its tally
    and the queue; without the store, from the master's last snapshot."""
    if record is not None:
        progress = _progress_of(record, settled, in_flight)
        return ({"id": record.id, "date": record.batch_date.isoformat(sep=" "), "is_done": bool(record.is_done),
                 "reparse_of": record.how_opened.reparse_of},
                {"total": progress.total, "settled": progress.settled, "done": progress.done,
                 "failed": progress.failed, "processing": progress.processing, "pending": progress.pending})
    if master is None:
        return None, None
    settled_count, total = int(master["batch_settled"]), int(master["batch_total"])
    return ({"id": int(master["batch_id"]), "date": None, "is_done": bool(int(master.get("batch_is_done", 0)))},
            {"total": total, "settled": settled_count, "done": None, "failed": None, "processing": None,
             "pending": None, "as_of": float(master["updated"])})


def _progress_of(record: BatchRecord, settled: Optional[tuple], in_flight: int) -> Progress:
    if record.is_done:
        return Progress(total=record.total_count, done=record.done_count, failed=record.fail_count,
                        pending=0, processing=0)
    done, failed = settled or (record.done_count, record.fail_count)
    return Progress.from_counters(record.total_count, done, failed, in_flight)


def _host_entry(snapshot: dict, finished: bool = False) -> dict:
    """A supervisor's snapshot as plain data; once the batch is over, nothing of it is unflushed."""
    numbers = ("pid", "workers_alive", "workers_wanted", "master_alive", "done", "failed", "items",
               "unflushed", "in_flight")
    entry: dict[str, Any] = {name: int(snapshot.get(name, 0)) for name in numbers}
    workers = json.loads(snapshot.get("workers") or "[]")
    if finished:
        entry["unflushed"] = 0
        workers = [dict(worker, unflushed=0) for worker in workers]
    entry.update(host=snapshot["host"], instance=snapshot["instance"], role=snapshot["role"],
                 rate=float(snapshot.get("rate", 0)), seconds_ago=round(time.time() - float(snapshot["updated"]), 1),
                 workers=workers)
    if snapshot.get("outage_since"):      # what its children wait for
        entry["outage"] = {"backend": snapshot.get("outage_backend", "?"), "since": float(snapshot["outage_since"]),
                           "reason": snapshot.get("outage_reason", "")}
    return entry


def workers_memory(hosts: list) -> Optional[dict]:
    """The memory of every worker the snapshots list, their browsers included, in bytes, and how it was measured
    (reporting/process_memory.py); None when no snapshot measures it (an older batchd)."""
    measured = [w for host in hosts for w in host["workers"] if "memory" in w]
    if not measured:
        return None
    return {"bytes": sum(w["memory"] for w in measured), "browsers": sum(w["browser_memory"] for w in measured),
            "workers": len(measured),
            "measure": measure_of(how for w in measured for how in w["memory_measure"].split("+"))}


def supervisor_name(entry: dict) -> str:
    """batchd-worker@1, batchd-master, batchd-run: the supervisor by its seat, escaped."""
    seat = entry["role"] if entry["instance"] == entry["role"] else f"{entry['role']}@{entry['instance']}"
    return escape_controls(f"batchd-{seat}")


# -- `batchd status --history`

def gather_history(runtime, count: int) -> list:
    """The last `count` batches from their records, newest first, as plain data. A batch still open has no
    close: its duration and rate run to now, on the store's clock, and its items are its counters' so far
    (when the backend that keeps them answers)."""
    store = runtime.store
    store.open(runtime.layout)
    now = store.now()
    records = store.recent_batches(count)
    running = next((record for record in records if not record.is_done), None)
    so_far = read_or_note([], lambda: runtime.backend.counters.counts(running.id)) if running else None
    return [history_entry(record, now, so_far if record is running else None) for record in records]


def history_entry(record: BatchRecord, now, counters_so_far: Optional[dict] = None) -> dict:
    """A batch's line of the history; a record table of the user's own may leave update_time NULL: no close
    known, no duration, no rate. A closed batch's rate is its average from its opening to its close
    (batch_average), a running one's from its opening to now. A count batchd kept is a number, 0 included;
    None only where none was kept (an open batch's items, when its counters are not at hand)."""
    closed = record.update_time if record.is_done else None
    end = closed if record.is_done else now
    seconds = max(0.0, (end - record.batch_date).total_seconds()) if end is not None else None
    settled = record.done_count + record.fail_count
    if record.is_done:
        average = batch_average(record)
        rate = average[0] if average else None
    else:
        rate = settled / max(seconds, 1.0) if seconds is not None else None
    counters = record.counters if record.stats else counters_so_far
    opening = record.how_opened
    return {"id": record.id, "mode": opening.mode, "reset_failed": opening.reset_failed, "reparse_of": opening.reparse_of,
            "opened_with": opening.opened_with, "opened": record.batch_date.isoformat(sep=" "),
            "closed": closed.isoformat(sep=" ") if closed else None, "is_done": bool(record.is_done),
            "duration_seconds": seconds, "done": record.done_count, "failed": record.fail_count,
            "total": record.total_count, "items": counters.get("item/stored", 0) if counters is not None else None,
            "found": found_counts(record.counters), "rate": rate, "spider": spider_entry(record.spider)}


def spider_entry(spider: Optional[SpiderPrint]) -> Optional[dict]:
    """The spider the batch opened with: its print, what changed since the batch before, whether --refetch
    forced a whole fetch, and so whether it trusted no validator; None when its record does not say."""
    return None if spider is None else {"code": spider.code, "settings": spider.settings,
                                        "changed": list(spider.changed), "forced": spider.forced,
                                        "refetched": spider.refetches}


def found_counts(counters: dict) -> Optional[dict]:
    """What a re-crawl found, in tasks {new, changed, unchanged, gone}; None when the batch kept no page."""
    found = {verdict: counters.get(FOUND + verdict, 0) for verdict in VERDICTS}
    return found if any(found.values()) else None


# -- `batchd status --hosts`

def gather_hosts(runtime) -> dict:
    """The open (or last) batch's hosts as plain data, most tasks waiting first: its counters per host (the
    HOST_STATS_TOP kept, and OTHER) and what the live workers say of them now."""
    store, layout, counters = runtime.store, runtime.layout, runtime.backend.counters
    unreachable: list[str] = []
    reached = read_or_note(unreachable, lambda: (store.open(layout), store.last_batch()))
    record = reached[1] if reached else None
    seen = read_or_note(unreachable,
                        lambda: (dict(counters.host_counts(record.id)) if record else {}, counters.host_gauges()))
    counts, gauges = seen or ({}, {})
    breakers = read_or_note(unreachable, lambda: breaker_phases(runtime.backend.host_breakers(runtime.namespace))) or {}
    return {"namespace": runtime.namespace, "batch": record.id if record else None, "unreachable": unreachable,
            "hosts": host_rows(counts, gauges, breakers), "top": runtime.settings.HOST_STATS_TOP}
