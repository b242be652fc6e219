"""A reparse batch, as the master opens and walks it (`batchd reparse`, docs/recrawl.md "Reparse").

A reparse is a batch of its own: its record says `mode: reparse` and `reparse_of: N` in its opening, its tasks are
claimed, leased, settled and counted as any batch's, and its close judges its data (batchd/quality/). Only the
workers see the difference: a task of a reparse batch is served from batch N's archive instead of the network
(worker/replays.py). So `batchd reparse` under the daemon queues the work for every worker of the namespace, on
any number of hosts, and on its own runs the same master and worker in one process (control/reparse.py).

Which tasks it takes is its opening's: every task (whatever its state: a task that failed in batch N is parsed
again from what its failure left in the archive), the tasks whose BATCH_TASK_HOST_FIELD names `host`, or the one
`task`. Its reset walks the table as an incremental batch's does, counting the rows it leaves settled, so that
the batch's figures are its own. The one task is moved when the batch opens, before the walk (whose claims trail
it, so the task cannot settle before the walk has passed it and be counted as left settled).

The calendar is not moved by a reparse: it crawls nothing, and the next crawl is due as the crawl before said
(its date is kept in the opening: BatchRecord.calendar_date).
"""
from dataclasses import replace
from typing import Optional

from ..backends.store import BatchStore
from ..hosts.claims import host_of
from ..model import REPARSE_MODE, BatchOpening, BatchRecord
from ..task import Move


def reparse_asked(asked: str) -> Optional[BatchOpening]:
    """The reparse an open request carries (a BatchOpening as JSON, left by `batchd reparse`); None for the plain
    "now" or "force" of `batchd open-batch`."""
    if not asked.startswith("{"):
        return None
    opening = BatchOpening.from_json(asked)
    return opening if opening.mode == REPARSE_MODE else None


def reparse_request(batch_id: int, host: Optional[str] = None, task: Optional[str] = None,
                    fetch_missing: bool = False) -> BatchOpening:
    """What `batchd reparse` asks the master to open."""
    return BatchOpening(mode=REPARSE_MODE, reset_failed=True, reparse_of=batch_id,
                        host=host.lower() if host else None, task=task, fetch_missing=fetch_missing)


def opening_after(asked: BatchOpening, last: Optional[BatchRecord]) -> BatchOpening:
    """The reparse's opening as the batch opens after `last`: the calendar goes on counting from the last crawl."""
    date = last.calendar_date.isoformat(sep=" ") if last is not None else None
    return replace(asked, calendar_date=date)


def take_the_task(store: BatchStore, opening: BatchOpening) -> int:
    """A reparse of one task: that task back to pending as the batch opens (how many moved: 0 or 1)."""
    return store.move(Move.RESET, [opening.task]) if opening.task is not None else 0


def reset_reparse_chunk(store: BatchStore, after, upper, opening: BatchOpening) -> int:
    """The reparse's reset of the rows with after < id <= upper: all of them, or its host's, or none (its one task
    moved at the opening); how many moved."""
    if opening.task is not None:
        return 0
    if opening.host is None:
        return store.reset_chunk(after, upper, Move.RESET)
    ids = [task_id for task_id, value in store.hosts_in_chunk(after, upper) if host_of(value) == opening.host]
    return store.move(Move.RESET, ids) if ids else 0


def what_reparses(opening: BatchOpening) -> str:
    """The tasks a reparse takes, for its lines: 'every task', 'the tasks of host example.com', 'task 12'."""
    if opening.task is not None:
        return f"task {opening.task}"
    return f"the tasks of host {opening.host}" if opening.host else "every task"
