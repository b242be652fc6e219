"""The one settle path: every outcome of a task goes through `Settler.settle`.

Who settles, and with which move (task.py has the state machine):

    a worker's write-back (worker/pipeline.py)          FINISH_DONE, FINISH_FAILED, REQUEUE
    update_task outside a worker (runtime.py)           MARK_DONE, MARK_FAILED
    BATCH_TASK_MAX_ATTEMPTS (master/patrol.py)          FINISH_FAILED
    a lease that expired, an orphan (master/patrol.py)  REQUEUE
    `batchd requeue --failed` (control/requeue.py)      REQUEUE_FAILED

Each settle does, in this order:

1. **the state move**, one compare-and-set statement: only rows in the move's sources move, and how many
   did is the truth the rest counts;
2. **the failure records** of the tasks it fails (settle/failures.py), one upsert. Of tasks the caller
   holds (a worker's leases, the master's own claims: `held`), they are written first, before the move
   itself: a settle interrupted between the two (a crash, an outage) then never leaves a failed task
   without its reason, and a write-back retried after an outage writes them again, though its move then
   moves nothing. Of a task nobody holds (update_task outside a worker), whether it moves is known only
   after the move: its record follows it, and a task that did not move (already done) gets none;
3. **the leases** of the tasks, given back by the worker that held them (`release`): a task added to
   the tally is never still in the queue, since the master reads the tally first and the queue after
   it (master/patrol.py, check_progress); a task counted twice there would raise the batch's total;
4. **the tally**: what the rows that moved add to their batch's done / failed (`Move.tally_of`). A tally
   the queue cannot take now is not worth failing the settle for: one WARNING, and the master reconciles
   it from the table when the batch closes;
5. **the stats**: `counted(done, failed)`, the settling process's own totals (a worker's ledger row:
   its stop line, /metrics).
"""
import logging
from typing import Callable, Optional, Sequence

from ..backends.ports import BatchTally
from ..backends.store import BatchStore
from ..errors import BackendUnavailable
from ..model import TaskFailure
from ..task import Move

log = logging.getLogger("batchd.settle")


def count_nothing(done: int, failed: int) -> None:
    """The stats of a settler whose process keeps no totals of its own (the master, the command)."""


class Settler:
    def __init__(self, store: BatchStore, tally: BatchTally, counted: Callable[[int, int], None] = count_nothing):
        self.store, self.tally, self.counted = store, tally, counted

    def settle(self, move: Move, batch_id: Optional[int], task_ids: Sequence,
               failures: Sequence[TaskFailure] = (), older_than: Optional[float] = None, held: bool = True,
               release: Callable[[], None] = lambda: None) -> int:
        """Apply `move` to `task_ids` of batch `batch_id` (None: before any batch, nothing to tally), with
        the failure records of those it fails, and `release` their leases; how many rows moved.
        BackendUnavailable from the records or the move: nothing is counted, and the caller tries the
        whole settle again; from `release`: the tally is still added, and the error raised after it."""
        if failures and held:
            self.store.record_failures(failures)
        moved = self.store.move(move, task_ids, older_than=older_than)
        if failures and not held and moved == len(task_ids):
            self.store.record_failures(failures)
        try:
            release()
        finally:
            self._count(move, batch_id, moved)
        return moved

    def _count(self, move: Move, batch_id: Optional[int], moved: int) -> None:
        done, failed = move.tally_of(moved)
        if batch_id is not None and (done or failed):
            self._add_to_tally(batch_id, done, failed)
        if done or failed:
            self.counted(done, failed)

    def _add_to_tally(self, batch_id: int, done: int, failed: int) -> None:
        try:
            self.tally.add_settled(batch_id, done, failed)
        except BackendUnavailable as e:
            log.warning("batch %d: %d done, %d failed not counted in its tally (%s); the master counts them when "
                        "the batch closes", batch_id, done, failed, e)
