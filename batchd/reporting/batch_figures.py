"""What the dashboard's batch page shows beside `batchd status`, gathered as plain data (web/api.py serves it as
/api/batch, web/html.py draws it): the batch's top failure reasons, what its responses weighed and how many were
304s, what a re-crawl found, and its life for the chart of settled tasks.

`gather_batch_figures` starts from what `gather_status` gathered (reporting/status.py: the counters, the tally, the
master's samples) and reads three things more: the batch record (its close time), the store's clock and the
batch's failure groups (as `batchd failed` groups them: reporting/failed_tasks.py).

The batch's life is the master's samples while its snapshot holds them (the batch running, or over while the
master that ran it still publishes). Once the snapshot is gone (the master stopped: `run --once`, or a master
run in-process that publishes none) the store keeps no finer series than the record: its opening, its close and
its settled tasks. The chart is then drawn from those two points, and says so (`drawn_from`).
"""
import time
from datetime import datetime
from typing import Optional

from ..errors import ConfigError
from ..model import BatchRecord, FailureQuery
from ..settle.batch_stats import BYTES, STATUS_PREFIX
from .failed_tasks import summary as failure_summary
from .status import found_counts, read_or_note

REASONS_SHOWN = 5          # failure reasons named on the batch page, the most common first
NOT_MODIFIED = STATUS_PREFIX + "304"
# Where the chart's points come from: the master's samples of the tally, or the batch record's opening and close.
SAMPLES, RECORD = "samples", "record"


def gather_batch_figures(runtime, status: dict) -> dict:
    """The batch page's own figures for the batch `status` (gather_status's answer) shows. A store that cannot be
    reached is named under "unreachable"; what `status` holds is still given."""
    batch = status["batch"]
    unreachable: list[str] = []
    figures: dict = {"namespace": runtime.namespace, "batch": batch["id"] if batch else None,
                     "unreachable": unreachable, "failures": None,
                     "responses": responses(status["counters"]), "found": None, "life": None}
    if batch is None:
        return figures
    if status["counters"] is not None:
        figures["found"] = found_counts(status["counters"])
    finished = bool(batch["is_done"])
    figures["life"] = {"points": [list(point) for point in status["life"]], "drawn_from": SAMPLES}
    if not status["store_reached"]:
        return figures
    store = runtime.store
    read = read_or_note(unreachable, lambda: (store.last_batch(), store.now()))
    if read is None:
        return figures
    record, store_now = read
    if record is None or record.id != batch["id"]:      # a batch opened since status was read: the next read has it
        return figures
    figures["failures"] = top_failures(store, record.id, unreachable)
    if finished and len(status["life"]) < 2:
        figures["life"] = record_life(record, store_now)
    return figures


def responses(counters: Optional[dict]) -> Optional[dict]:
    """The bytes of the batch's responses and its 304s (not modified: settled as unchanged without a body), from
    its counters (the record's once it closed, flushed so far while it runs); None without counters."""
    if counters is None:
        return None
    return {"bytes": counters.get(BYTES, 0), "not_modified": counters.get(NOT_MODIFIED, 0)}


def top_failures(store, batch_id: int, unreachable: list) -> Optional[dict]:
    """The batch's failed tasks (still failed: not requeued since), by kind as `batchd failed` counts them, the
    REASONS_SHOWN most common; each kind is the text the failures page's ?reason= filter takes. None when the
    store keeps no failure records or cannot be read."""
    try:
        groups = read_or_note(unreachable, lambda: store.failure_groups(FailureQuery(batch_id)))
    except ConfigError:          # a store that keeps no failure records: the tally's count stands alone
        return None
    if groups is None:
        return None
    kinds = failure_summary(groups)
    return {"total": sum(count for _, count in kinds), "kinds_total": len(kinds),
            "reasons": [{"kind": kind, "count": count} for kind, count in kinds[:REASONS_SHOWN]]}


def record_life(record: BatchRecord, store_now: datetime) -> Optional[dict]:
    """A closed batch's life from its record alone: 0 settled at its opening, all its settled tasks at its close
    (Unix times, through the store's clock: a record's times are the store's). The record keeps whole seconds: a
    batch that closed within the second it opened is drawn over that second. None when the record keeps no close
    time (a record table of the user's own may leave update_time NULL)."""
    if record.update_time is None:
        return None
    now = time.time()

    def unix(when: datetime) -> float:
        return round(now - (store_now - when).total_seconds(), 3)
    opened, closed = unix(record.batch_date), unix(record.update_time)
    settled = record.done_count + record.fail_count
    return {"points": [[opened, 0], [max(closed, opened + 1), settled]], "drawn_from": RECORD}
