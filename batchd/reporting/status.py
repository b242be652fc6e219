"""Where a batch stands, gathered as plain data: from the store, the queue and the supervisors' snapshots.

`gather_status` reads the batch record, its tally, the queue and every snapshot the supervisors
publish (reporting/snapshots.py lists their fields) into one dict; `gather_history` the last batches from
their records (`--history`), and `gather_hosts` the batch's counters per host and the workers' gauges
(hosts/counts.py, `--hosts`). Whoever shows them lays them out: the command's text and --json
(cli/status_text.py), the dashboard's pages and its JSON API (web/).
"""
import json
import time
from typing import Any, Optional

from ..hosts.counts import breaker_phases, host_rows
from ..errors import BackendUnavailable
from ..service.systemd import escape_controls
from ..model import BatchRecord, Progress, SpiderPrint
from ..recrawl.pages import FOUND, VERDICTS
from .quality_report import quality_line
from .snapshots import RATE_WINDOW, eta, freshest_master, samples_of, window_rate


def gather_status(runtime) -> dict:
    """Everything `batchd status` shows, as plain data: the batch record, its tally and the queue (no row
    of the task table is counted), the snapshots. A backend that cannot be reached is named under
    "unreachable" and the rest is still gathered: with MySQL down, the batch as the master's supervisor
    last published it in Redis."""
    store, layout, backend = runtime.store, runtime.layout, runtime.backend
    unreachable: list[str] = []
    reached = read_or_note(unreachable, lambda: (store.open(layout), store.last_batch(), quality_line(store)))
    record = reached[1] if reached else None
    # The tally before the queue, as the master reads them (master/patrol.py, check_progress).
    seen = read_or_note(unreachable, lambda: (backend.board.read_statuses(),
                                          backend.tally.settled(record.id) if record else None,
                                          backend.leases.queue_counts(),
                                          _counters(backend, record), backend.leases.paused_since()))
    snapshots, settled, (waiting, leased), counters, paused_since = seen or ([], None, (None, None), None, None)
    master = freshest_master(snapshots)
    batch, tasks = _batch_and_tasks(record, settled, (waiting or 0) + (leased or 0), None if reached else master)
    of_this_batch = master is not None and batch is not None and int(master["batch_id"]) == batch["id"]
    samples = samples_of(master) if of_this_batch else []
    measured = window_rate(samples)
    rate = measured[0] if measured else None
    return {
        "namespace": runtime.namespace,
        "table": layout.table,
        "unreachable": unreachable,
        "store_reached": reached is not None,
        "batch": batch,
        "tasks": tasks,
        "counters": counters,
        "quality": reached[2] if reached else None,     # the last closed batch's judgement (batchd quality)
        "queue": {"waiting": waiting, "leased": leased},
        "paused_since": paused_since,
        "rate": rate,                   # settled tasks per second over rate_seconds, up to rate_as_of
        "rate_seconds": round(measured[1], 3) if measured else None,
        "rate_as_of": samples[-1][0] if samples else None,
        "rate_window": RATE_WINDOW,
        "life": samples_of(master, "batch_life") if of_this_batch else [],    # (Unix time, settled): its chart
        "eta_seconds": eta(tasks["total"] - tasks["settled"], None if paused_since else rate) if tasks else None,
        "hosts": [_host_entry(s) for s in sorted(snapshots, key=lambda s: (s["host"], s["instance"]))],
        "workers_alive": sum(int(s.get("workers_alive", 0)) for s in snapshots),
        "workers_wanted": sum(int(s.get("workers_wanted", 0)) for s in snapshots),
        "unflushed": sum(int(s.get("unflushed", 0)) for s in snapshots),
        "time": time.time(),
    }


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
        return ({"id": record.id, "date": record.batch_date.isoformat(sep=" "), "is_done": bool(record.is_done)},
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


def _host_entry(snapshot: dict) -> dict:
    numbers = ("pid", "workers_alive", "workers_wanted", "master_alive", "done", "failed", "items",
               "unflushed", "in_flight")
    entry: dict[str, Any] = {name: int(snapshot.get(name, 0)) for name in numbers}
    entry.update(host=snapshot["host"], instance=snapshot["instance"], role=snapshot["role"],
                 rate=float(snapshot.get("rate", 0)), seconds_ago=round(time.time() - float(snapshot["updated"]), 1),
                 workers=json.loads(snapshot.get("workers") or "[]"))
    if snapshot.get("outage_since"):      # what its children wait for
        entry["outage"] = {"backend": snapshot.get("outage_backend", "?"), "since": float(snapshot["outage_since"]),
                           "reason": snapshot.get("outage_reason", "")}
    return entry


def supervisor_name(entry: dict) -> str:
    """batchd-worker@1, batchd-master, batchd-run: the supervisor by its seat, escaped."""
    seat = entry["role"] if entry["instance"] == entry["role"] else f"{entry['role']}@{entry['instance']}"
    return escape_controls(f"batchd-{seat}")


# -- `batchd status --history`

def gather_history(runtime, count: int) -> list:
    """The last `count` batches from their records, newest first, as plain data. A batch still open has no
    close: its duration and rate run to now, on the store's clock."""
    store = runtime.store
    store.open(runtime.layout)
    now = store.now()
    return [history_entry(record, now) for record in store.recent_batches(count)]


def history_entry(record: BatchRecord, now) -> dict:
    """A batch's line of the history; a record table of the user's own may leave update_time NULL: no close
    known, no duration."""
    closed = record.update_time if record.is_done else None
    end = closed if record.is_done else now
    seconds = max(0.0, (end - record.batch_date).total_seconds()) if end is not None else None
    settled = record.done_count + record.fail_count
    opening = record.how_opened
    return {"id": record.id, "mode": opening.mode, "reset_failed": opening.reset_failed,
            "opened_with": opening.opened_with, "opened": record.batch_date.isoformat(sep=" "),
            "closed": closed.isoformat(sep=" ") if closed else None, "is_done": bool(record.is_done),
            "duration_seconds": seconds, "done": record.done_count, "failed": record.fail_count,
            "total": record.total_count, "items": record.counters.get("item/stored") if record.stats else None,
            "found": found_counts(record.counters), "rate": settled / seconds if seconds else None,
            "spider": spider_entry(record.spider)}


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
