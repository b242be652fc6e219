"""The state machine of a task row, in one place.

    PENDING ──claim──► PROCESSING ──finish──► DONE / FAILED
                          │
                          └──requeue (lease lost, or its requests ended
                                      without update_task)──► PENDING
    FAILED ──requeue failed (`batchd requeue --failed`, in the open batch)──► PENDING
    any state ──reset (a new full batch)──► PENDING      (BATCH_RESET_FAILED=false: FAILED stays)

Every store applies a `Move` as one compare-and-set statement
(`... WHERE id IN (...) AND state IN (<sources>)`): the claim and the reset of a new batch as
much as a write-back (batchd/backends/sql.py `_apply`, the memory store's `_apply`). It reports
how many rows moved, so a transition that raced with another one is visible instead of silent.
"""
from dataclasses import dataclass
from enum import Enum, IntEnum


class TaskState(IntEnum):
    PENDING = 0
    DONE = 1
    PROCESSING = 2
    FAILED = -1


@dataclass(frozen=True)
class Transition:
    name: str
    sources: tuple  # () means "from any state"
    target: TaskState
    # What each row that really moved adds to its batch's tally of settled tasks (done, failed): the master's
    # progress counts no row, it adds up these (batchd/settle/settler.py applies them).
    tally: tuple = (0, 0)
    # Of a move from any state (no sources): the states it leaves alone.
    keeps: tuple = ()


class Move(Enum):
    CLAIM = Transition("claim", (TaskState.PENDING,), TaskState.PROCESSING)
    FINISH_DONE = Transition("finish done", (TaskState.PROCESSING,), TaskState.DONE, tally=(1, 0))
    FINISH_FAILED = Transition("finish failed", (TaskState.PROCESSING,), TaskState.FAILED, tally=(0, 1))
    REQUEUE = Transition("requeue", (TaskState.PROCESSING,), TaskState.PENDING)
    # update_task() called outside request processing (e.g. from the master's own code):
    # the user's explicit word on a task nobody has settled yet.
    MARK_DONE = Transition("mark done", (TaskState.PENDING, TaskState.PROCESSING), TaskState.DONE, tally=(1, 0))
    MARK_FAILED = Transition("mark failed", (TaskState.PENDING, TaskState.PROCESSING), TaskState.FAILED,
                             tally=(0, 1))
    # An operator's word (batchd requeue --failed): failed tasks of the open batch are crawled again.
    REQUEUE_FAILED = Transition("requeue failed", (TaskState.FAILED,), TaskState.PENDING, tally=(0, -1))
    RESET = Transition("reset", (), TaskState.PENDING)
    # A full batch with BATCH_RESET_FAILED=false: the failed tasks stay failed, outside the batch.
    RESET_KEEPING_FAILED = Transition("reset keeping failed", (), TaskState.PENDING, keeps=(TaskState.FAILED,))

    @property
    def sources(self):
        return self.value.sources

    @property
    def target(self):
        return self.value.target

    def tally_of(self, moved: int) -> tuple:
        """(done, failed) that `moved` rows of this move add to their batch's tally."""
        done, failed = self.value.tally
        return done * moved, failed * moved

    @property
    def keeps(self):
        return self.value.keeps

    def allows(self, state) -> bool:
        return state in self.sources if self.sources else state not in self.keeps


def settling_move(outcome: TaskState) -> Move:
    """The write-back of a worker's outcome for a task it processed: done, failed, or back to pending."""
    return {TaskState.DONE: Move.FINISH_DONE, TaskState.FAILED: Move.FINISH_FAILED,
            TaskState.PENDING: Move.REQUEUE}[outcome]


def mark_move(ok: bool) -> Move:
    return Move.MARK_DONE if ok else Move.MARK_FAILED
