"""`batchd requeue --failed` (and the dashboard's requeue): the failed tasks of the open batch back to pending."""
from typing import Optional

from ..model import BatchRecord, FailureQuery
from ..service.systemd import counted
from ..reporting.failed_tasks import chosen_batch
from ..settle.settler import Settler
from ..task import Move
from .actions import wake_master

REQUEUE_CHUNK = 500      # tasks moved back to pending per statement


def requeue_failed(runtime, batch_id: Optional[int] = None, reason: Optional[str] = None) -> str:
    """`batchd requeue --failed`: the failed tasks of the open batch (those whose reason holds `reason`) back to
    pending, in chunks, each a compare-and-set from FAILED (Move.REQUEUE_FAILED); their attempts start afresh,
    the batch's tally loses them, and the master is woken to claim them. A closed batch is left alone: the next
    batch crawls every task again anyway."""
    store, backend = runtime.store, runtime.backend
    store.open(runtime.layout)
    asked, last = chosen_batch(store, batch_id)
    if asked is None:
        return "no batch has been opened yet: no task to requeue"
    if asked != last.id or last.is_done:
        return _closed(asked)
    query, requeued, after = FailureQuery(asked, reason), 0, None
    settler = Settler(store, backend.tally)
    while chunk := store.failures(query, after=after, limit=REQUEUE_CHUNK):
        ids = [record.task_id for record in chunk]
        backend.leases.forget_attempts(ids)     # before the move: a claim right after it counts from 1
        moved = settler.settle(Move.REQUEUE_FAILED, asked, ids)
        requeued, after = requeued + moved, ids[-1]
    if requeued:
        wake_master(runtime)
    matching = f" whose reason holds {reason!r}" if reason else ""
    said = f"batch {asked}: {counted(requeued, 'failed task')}{matching} back to pending"
    if requeued and _closed_meanwhile(store, last):
        return f"{said}; but {_closed(asked)}"
    return said + ("; the workers crawl them again" if requeued else "")


def _closed(batch_id: int) -> str:
    return (f"batch {batch_id} is closed; its failed tasks are crawled again in the next batch "
            "(batchd open-batch opens it now)")


def _closed_meanwhile(store, last: BatchRecord) -> bool:
    now = store.last_batch()
    return now is None or now.id != last.id or now.is_done
