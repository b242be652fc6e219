"""`batchd status`: where a batch stands, from the store, the queue and the supervisors' snapshots.

`gather_status` reads the batch record, its tally, the queue and every snapshot the supervisors
publish (reporting/snapshots.py lists their fields) into one dict; `render_status` turns it into
text (`--json` prints the dict). Keeping the two apart lets another view (a progress bar, a watch
loop) reuse the gathering. `gather_history` and `render_history` do the same for `--history`, from
the batch records alone, and `gather_hosts` and `render_hosts` for `--hosts`, from the batch's counters
per host and the workers' gauges (hosts/counts.py).
"""
import json
import time
from typing import Any, Optional

from ..hosts.counts import LATENCY_BOUNDS, OTHER, breaker_phases, host_rows
from ..errors import BackendUnavailable
from ..service.systemd import escape_controls
from ..model import BatchRecord, Progress
from ..recrawl.pages import FOUND, VERDICTS
from ..settle.batch_stats import summary
from .snapshots import (RATE_WINDOW, duration, eta, freshest_master, paused_text, rate_text, samples_of,
                                    window_rate)

def gather_status(runtime) -> dict:
    """Everything `batchd status` shows, as plain data: the batch record, its tally and the queue (no row
    of the task table is counted), the snapshots. A backend that cannot be reached is named under
    "unreachable" and the rest is still gathered: with MySQL down, the batch as the master's supervisor
    last published it in Redis."""
    store, layout, backend = runtime.store, runtime.layout, runtime.backend
    unreachable: list[str] = []
    reached = read_or_note(unreachable, lambda: (store.open(layout), store.last_batch()))
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


def bar(done: int, failed: int, total: int, width: int = 30) -> str:
    """[#####xx.....]: # done, x failed, . still to go."""
    if total <= 0:
        return "[" + "." * width + "]"
    filled = min(width, round(width * done / total))
    spoiled = min(width - filled, round(width * failed / total))
    return "[" + "#" * filled + "x" * spoiled + "." * (width - filled - spoiled) + "]"


def render_status(status: dict) -> str:
    lines = [f"namespace {status['namespace']} (task table {status['table']})"]
    lines += [f"MISSING  {reason}" for reason in status["unreachable"]]
    if status["paused_since"] is not None:
        lines.append(f"PAUSED   since {paused_text(status['paused_since'])}: nothing is claimed or leased "
                     "(batchd resume)")
    batch, tasks, queue = status["batch"], status["tasks"], status["queue"]
    if batch is None:
        lines.append("batch    none yet (the master opens the first one)" if status["store_reached"]
                     else "batch    unknown")
    else:
        opened = f" opened {batch['date']}" if batch["date"] else ""
        lines.append(f"batch    {batch['id']}{opened}, {'finished' if batch['is_done'] else 'running'}")
    lines += _progress_lines(tasks)
    if status["counters"] is not None:
        lines.append(f"counters {summary(status['counters'])}")
    if queue["waiting"] is not None:
        lines.append(f"queue    {queue['waiting']} waiting, {queue['leased']} leased")
    lines.append(f"rate     {_rate_words(status)}, ETA {duration(status['eta_seconds'])}")
    lines.append(f"workers  {status['workers_alive']} alive of {status['workers_wanted']} wanted: "
                 f"{workers_text(status['hosts'])}")
    for host in status["hosts"]:
        for w in host["workers"]:
            lines.append(f"  {escape_controls(host['host'])} {supervisor_name(host)}, {w['name']} "
                         f"(pid {w['pid']}): {w['done']} done, {w['failed']} failed, {w['items']} items, "
                         f"{w['tasks']} tasks in hand, {w['unflushed']} unflushed, beat {w['silent']:.0f}s ago")
    lines.append(f"unflushed items {status['unflushed']}")
    return "\n".join(lines)


def _rate_words(status: dict) -> str:
    if status["rate"] is not None:
        return rate_text((status["rate"], status["rate_seconds"]))
    if status["rate_as_of"] is not None:
        return "unknown yet (one sample of the tally so far)"
    return "unknown (no supervised master publishes one)"


def workers_text(hosts: list) -> str:
    """host vm — 2 workers (batchd-worker@1), the master (batchd-master); host vm2 — ...: what each host's
    supervisors run, named as their units are. Host and instance names are shown escaped."""
    by_host: dict = {}
    for entry in hosts:
        by_host.setdefault(entry["host"], []).append(f"{_runs(entry)} ({supervisor_name(entry)})")
    text = "; ".join(f"host {escape_controls(host)} — {', '.join(seats)}" for host, seats in by_host.items())
    return text or "none reporting"


def supervisor_name(entry: dict) -> str:
    """batchd-worker@1, batchd-master, batchd-run: the supervisor by its seat, escaped."""
    seat = entry["role"] if entry["instance"] == entry["role"] else f"{entry['role']}@{entry['instance']}"
    return escape_controls(f"batchd-{seat}")


def _runs(entry: dict) -> str:
    parts = []
    if entry["role"] != "master":
        alive, wanted = entry["workers_alive"], entry["workers_wanted"]
        parts.append(f"{alive}{'' if alive == wanted else f' of {wanted}'} worker{'' if wanted == 1 else 's'}")
    if entry["role"] != "worker":
        parts.append("the master" if entry["master_alive"] else "no master")
    return " and ".join(parts)


def _progress_lines(tasks: Optional[dict]) -> list:
    if tasks is None:
        return []
    if tasks["done"] is None:          # the store is down: the master's last word on it
        ago = duration(time.time() - tasks["as_of"])
        return [f"progress {tasks['settled']}/{tasks['total']} (the master's figures {ago} ago)"]
    return [f"{bar(tasks['done'], tasks['failed'], tasks['total'])} {tasks['settled']}/{tasks['total']}",
            f"progress {tasks['settled']}/{tasks['total']}: {tasks['done']} done, {tasks['failed']} failed, "
            f"{tasks['processing']} processing, {tasks['pending']} pending"]


def render_table(columns: tuple, rows: list, text_columns: tuple) -> str:
    """`rows` of cells under `columns`, aligned: the `text_columns` read left to right, figures line up on
    their right."""
    rows = [columns] + rows
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(width) if i in text_columns else cell.rjust(width)
                               for i, (cell, width) in enumerate(zip(row, widths))).rstrip() for row in rows)


def render_json(data) -> str:
    return json.dumps(data, indent=2, sort_keys=True)


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
            "found": found_counts(record.counters), "rate": settled / seconds if seconds else None}


def found_counts(counters: dict) -> Optional[dict]:
    """What a re-crawl found, in tasks {new, changed, unchanged, gone}; None when the batch kept no page."""
    found = {verdict: counters.get(FOUND + verdict, 0) for verdict in VERDICTS}
    return found if any(found.values()) else None


HISTORY_COLUMNS = ("batch", "mode", "opened", "closed", "duration", "opened with", "done", "failed", "total", "items",
                   *VERDICTS, "rate")


def render_history(entries: list) -> str:
    """One line per batch under a header, columns aligned; a blank where a figure is unknown."""
    if not entries:
        return "no batch yet (the master opens the first one)"
    return render_table(HISTORY_COLUMNS, [_history_row(entry) for entry in entries], text_columns=(1, 2, 3))


def _history_row(entry: dict) -> tuple:
    def blank_or(value, shown) -> str:
        return "" if value is None else shown(value)
    mode = entry["mode"] if entry["reset_failed"] or entry["mode"] == "incremental" else f"{entry['mode']}, failed kept"
    found = entry["found"] or {}
    return (str(entry["id"]), mode, entry["opened"], entry["closed"] or ("" if entry["is_done"] else "(running)"),
            blank_or(entry["duration_seconds"], duration), blank_or(entry["opened_with"], str), str(entry["done"]),
            str(entry["failed"]), str(entry["total"]), blank_or(entry["items"], str),
            *(blank_or(found.get(verdict), str) for verdict in VERDICTS),
            blank_or(entry["rate"], lambda rate: f"{rate:.1f}/s"))


# -- `batchd status --hosts`

HOST_COLUMNS = ("host", "waiting", "in flight", "done", "failed", "p50", "p95", "breaker")


def gather_hosts(runtime) -> dict:
    """The open (or last) batch's hosts as plain data, most tasks waiting first: its counters per host (the
    HOST_STATS_TOP kept, and OTHER) and what the live workers say of them now."""
    store, layout, counters = runtime.store, runtime.layout, runtime.backend.counters
    unreachable: list[str] = []
    reached = read_or_note(unreachable, lambda: (store.open(layout), store.last_batch()))
    record = reached[1] if reached else None
    seen = read_or_note(unreachable,
                        lambda: (counters.host_counts(record.id) if record else {}, counters.host_gauges()))
    counts, gauges = seen or ({}, {})
    breakers = read_or_note(unreachable, lambda: breaker_phases(runtime.backend.host_breakers(runtime.namespace))) or {}
    return {"namespace": runtime.namespace, "batch": record.id if record else None, "unreachable": unreachable,
            "hosts": host_rows(counts, gauges, breakers), "top": runtime.settings.HOST_STATS_TOP}


def render_hosts(status: dict) -> str:
    """A line per host under a header; a host's name is crawled text, shown with its control characters
    escaped."""
    lines = [f"namespace {status['namespace']}, batch {status['batch'] if status['batch'] is not None else 'none yet'}"]
    lines += [f"MISSING  {reason}" for reason in status["unreachable"]]
    if not status["hosts"]:
        return "\n".join(lines + ["no host counted yet"])
    rows = [(escape_controls(row["host"]), str(row["waiting"]), str(row["in_flight"]), str(row["done"]),
             str(row["failed"]), _latency_text(row["p50"]), _latency_text(row["p95"]), row["breaker"] or "-")
            for row in status["hosts"]]
    lines.append(render_table(HOST_COLUMNS, rows, text_columns=(0, 7)))
    lines.append(f"(p50, p95: the top of the latency bucket; past the busiest {status['top']} hosts, {OTHER})")
    return "\n".join(lines)


def _latency_text(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:g}s" if seconds != float("inf") else f">{LATENCY_BOUNDS[-2]:g}s"
