"""`batchd status`: where a batch stands, from the store, the queue and the supervisors' snapshots.

`gather_status` reads the batch record, its tally, the queue and every snapshot the supervisors
publish (supervisor/snapshots.py lists their fields) into one dict; `render_status` turns it into
text (`--json` prints the dict). Keeping the two apart lets another view (a progress bar, a watch
loop) reuse the gathering. `gather_history` and `render_history` do the same for `--history`, from
the batch records alone.
"""
import json
import time
from typing import Any, Optional

from ..errors import BackendUnavailable
from ..model import BatchRecord, Progress
from ..settle.stats import summary
from ..supervisor.snapshots import duration, eta, freshest_master, paused_text

def gather_status(runtime) -> dict:
    """Everything `batchd status` shows, as plain data: the batch record, its tally and the queue (no row
    of the task table is counted), the snapshots. A backend that cannot be reached is named under
    "unreachable" and the rest is still gathered: with MySQL down, the batch as the master's supervisor
    last published it in Redis."""
    store, layout, backend = runtime.store, runtime.layout, runtime.backend
    unreachable: list[str] = []
    reached = _reached(unreachable, lambda: (store.open(layout), store.last_batch()))
    record = reached[1] if reached else None
    seen = _reached(unreachable, lambda: (backend.board.read_statuses(), backend.leases.pending_count(),
                                          backend.leases.leased_count(),
                                          backend.tally.settled(record.id) if record else None,
                                          _counters(backend, record), backend.leases.paused_since()))
    snapshots, waiting, leased, settled, counters, paused_since = seen or ([], None, None, None, None, None)
    master = freshest_master(snapshots)
    rate = float(master["batch_rate"]) if master else None
    batch, tasks = _batch_and_tasks(record, settled, (waiting or 0) + (leased or 0), None if reached else master)
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
        "rate": rate,
        "eta_seconds": eta(tasks["total"] - tasks["settled"], rate) if tasks else None,
        "hosts": [_host_entry(s) for s in sorted(snapshots, key=lambda s: (s["host"], s["instance"]))],
        "workers_alive": sum(int(s.get("workers_alive", 0)) for s in snapshots),
        "unflushed": sum(int(s.get("unflushed", 0)) for s in snapshots),
        "time": time.time(),
    }


def _counters(backend, record: Optional[BatchRecord]) -> Optional[dict]:
    """The batch's counters: the record's once it is done, the backend's totals (flushed so far) before."""
    if record is None:
        return None
    return record.counters if record.is_done else backend.counters.counts(record.id)


def _reached(unreachable: list, read):
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
    rate = "unknown (no supervised master publishes one)" if status["rate"] is None else f"{status['rate']:.1f} tasks/s"
    lines.append(f"rate     {rate}, ETA {duration(status['eta_seconds'])}")
    hosts = ", ".join(f"{h['host']} {h['workers_alive']} ({h['role']}@{h['instance']}"
                      f"{', master' if h['master_alive'] else ''})" for h in status["hosts"]) or "none reporting"
    lines.append(f"workers  {status['workers_alive']} alive: {hosts}")
    for host in status["hosts"]:
        for w in host["workers"]:
            lines.append(f"  {host['host']}@{host['instance']} {w['name']} pid {w['pid']}: {w['done']} done, "
                         f"{w['failed']} failed, {w['items']} items, {w['tasks']} tasks in hand, "
                         f"{w['unflushed']} unflushed, beat {w['silent']:.0f}s ago")
    lines.append(f"unflushed items {status['unflushed']}")
    return "\n".join(lines)


def _progress_lines(tasks: Optional[dict]) -> list:
    if tasks is None:
        return []
    if tasks["done"] is None:          # the store is down: the master's last word on it
        ago = duration(time.time() - tasks["as_of"])
        return [f"progress {tasks['settled']}/{tasks['total']} (the master's figures {ago} ago)"]
    return [f"{bar(tasks['done'], tasks['failed'], tasks['total'])} {tasks['settled']}/{tasks['total']}",
            f"progress {tasks['settled']}/{tasks['total']}: {tasks['done']} done, {tasks['failed']} failed, "
            f"{tasks['processing']} processing, {tasks['pending']} pending"]


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
    return {"id": record.id, "opened": record.batch_date.isoformat(sep=" "),
            "closed": closed.isoformat(sep=" ") if closed else None, "is_done": bool(record.is_done),
            "duration_seconds": seconds, "done": record.done_count, "failed": record.fail_count,
            "total": record.total_count, "items": record.counters.get("item/stored") if record.stats else None,
            "rate": settled / seconds if seconds else None}


HISTORY_COLUMNS = ("batch", "opened", "closed", "duration", "done", "failed", "total", "items", "rate")


def render_history(entries: list) -> str:
    """One line per batch under a header, columns aligned; a blank where a figure is unknown."""
    if not entries:
        return "no batch yet (the master opens the first one)"
    rows = [HISTORY_COLUMNS] + [_history_row(entry) for entry in entries]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HISTORY_COLUMNS))]
    text_columns = (1, 2)       # the dates read left to right; figures line up on their right
    return "\n".join("  ".join(cell.ljust(width) if i in text_columns else cell.rjust(width)
                               for i, (cell, width) in enumerate(zip(row, widths))).rstrip() for row in rows)


def _history_row(entry: dict) -> tuple:
    def blank_or(value, shown) -> str:
        return "" if value is None else shown(value)
    return (str(entry["id"]), entry["opened"], entry["closed"] or ("" if entry["is_done"] else "(running)"),
            blank_or(entry["duration_seconds"], duration), str(entry["done"]), str(entry["failed"]), str(entry["total"]),
            blank_or(entry["items"], str), blank_or(entry["rate"], lambda rate: f"{rate:.1f}/s"))
