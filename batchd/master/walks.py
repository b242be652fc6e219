"""Walks of the task table in primary-key chunks: the reset that opens a batch, and the count that
reconciles the master's tally when a batch closes.

A walk never holds the ids of a batch and never runs a long statement: each step reads the next
chunk's last id (`next_chunk`, the primary key only), then handles the rows up to it in one short
statement. Chunks are sized to take about CHUNK_SECONDS each on this machine and this table:
the first has BATCH_RESET_CHUNK rows, each next one is scaled by how long the last took (at most
doubled or halved), so a walk slows itself down when the server is busy and speeds up when it is
not. The master runs a walk a few chunks per patrol (docs/architecture.md, A batch's life).
"""
import time
from dataclasses import replace
from typing import Callable

from ..backends.store import BatchStore
from ..model import BatchRecord
from ..task import Move
from .reparse_opening import reset_reparse_chunk, take_the_task

CHUNK_SECONDS = 0.05       # what one chunk should take
MAX_CHUNK = 1_000_000      # rows, at most, whatever the machine


class ChunkPacer:
    """Chunk sizes that keep each chunk near CHUNK_SECONDS."""

    def __init__(self, first: int):
        self.size = max(1, first)
        self.smallest = self.largest = self.size

    def took(self, seconds: float, rows: int) -> None:
        if rows < self.size:       # the table's short tail says nothing of the machine
            return
        factor = min(2.0, max(0.5, CHUNK_SECONDS / max(seconds, 1e-6)))
        self.size = max(1, min(MAX_CHUNK, int(self.size * factor)))
        self.smallest, self.largest = min(self.smallest, self.size), max(self.largest, self.size)


class TableWalk:
    """One walk from the row after `after` (the first when None) to the end of the table."""

    def __init__(self, store: BatchStore, first_chunk: int, after=None, walked: int = 0):
        self.store, self.pacer = store, ChunkPacer(first_chunk)
        self.after, self.walked, self.walked_here = after, walked, 0
        self.started = time.monotonic()
        self.finished = False

    def step(self) -> bool:
        """Handle the next chunk; False (and finished) when no row was left."""
        began = time.monotonic()
        chunk = self.store.next_chunk(self.after, self.pacer.size)
        if chunk is None:
            self.finished = True
            return False
        upper, rows = chunk
        self.handle(self.after, upper, rows)
        self.pacer.took(time.monotonic() - began, rows)
        self.after = upper
        self.walked += rows
        self.walked_here += rows
        return True

    def steps_for(self, budget: float, going_on: Callable[[], bool]) -> None:
        """Chunks for about `budget` seconds, to the end, or until `going_on()` says stop."""
        deadline = time.monotonic() + budget
        while going_on() and self.step() and time.monotonic() < deadline:
            pass

    def handle(self, after, upper, rows: int) -> None:
        """What the walk does to the `rows` rows with after < id <= upper."""
        raise NotImplementedError

    def rate(self) -> float:
        """Rows per second walked by this process."""
        seconds = time.monotonic() - self.started
        return self.walked_here / seconds if seconds > 0 else 0.0

    def chunk_sizes(self) -> str:
        p = self.pacer
        return f"{p.smallest}" if p.smallest == p.largest else f"{p.smallest} to {p.largest}"


class ResetWalk(TableWalk):
    """The walk that opens a batch, as the batch record says it opened (BatchOpening): a full batch sets
    every row back to pending (Move.RESET), or every row but the failed ones (RESET_KEEPING_FAILED, which
    counts those it leaves); a due one the rows whose revisit is due as of its opening (reset_due_chunk),
    counting those it leaves; a reparse the tasks it takes (reparse_opening.py), counting the rest; an
    incremental one moves nothing and counts the rows it finds settled, so that the batch's figures are its own.
    The cursor (and the opening, counts so far) is kept in the record after each chunk, in one statement, so
    that a master taking over goes on from there. `feeds`: the master that
    opened the batch claims the rows already walked as it goes (never a row not walked yet, whose state is
    still to count); one that took over finishes the walk before it claims anything."""

    def __init__(self, store: BatchStore, first_chunk: int, batch: BatchRecord, feeds: bool):
        after, walked = batch.reset_position
        super().__init__(store, first_chunk, after, walked)
        self.batch_id, self.feeds, self.moved = batch.id, feeds, 0
        self.opening = batch.how_opened
        if feeds and after is None and walked == 0:      # the batch opens: a reparse of one task takes it now
            self.moved += take_the_task(store, self.opening)

    def handle(self, after, upper, rows: int) -> None:
        opening = self.opening
        move = Move.RESET if opening.reset_failed else Move.RESET_KEEPING_FAILED
        if opening.is_default:         # the call a store of the user's own, older than batch modes, takes
            self.moved += self.store.reset_chunk(after, upper)
        elif opening.mode == "full":
            self.moved += self.store.reset_chunk(after, upper, move)
        elif opening.mode == "due":
            due_before = opening.due_before if opening.due_before is not None else time.time()
            self.moved += self.store.reset_due_chunk(after, upper, due_before, move)
        elif opening.is_reparse:
            self.moved += reset_reparse_chunk(self.store, after, upper, opening)
        if not self.opening.is_default:      # a batch that resets all leaves nothing settled: nothing to count
            _, done, failed = self.store.count_chunk(after, upper)
            self.opening = self.opening.counted(done, failed)
        self._record(upper, self.walked + rows)

    def finish(self) -> None:
        """The walk found no row left: it is over, and the rows walked less those it left settled are the
        batch's tasks."""
        self.opening = replace(self.opening, opened_with=self.walked - self.opening.kept)
        self._record(self.after, self.walked, finished=True)

    def _record(self, after, walked: int, finished: bool = False) -> None:
        # A store of the user's own written before batch modes (keeps_openings False) takes no opening: it
        # runs full batches resetting all only (the master checks), as batchd always called it.
        if self.store.keeps_openings:
            self.store.record_reset(self.batch_id, after, walked, finished, opening=self.opening)
        else:
            self.store.record_reset(self.batch_id, after, walked, finished)

    def may_claim(self) -> bool:
        """Claims run beside this walk (up to the last id it walked, `after`: past it rows are not walked yet)
        when it feeds, once a chunk is walked."""
        return self.feeds and self.after is not None


class CountWalk(TableWalk):
    """Rows, done and failed, counted chunk by chunk (a reconciliation: exact once nothing moves meanwhile)."""

    def __init__(self, store: BatchStore, first_chunk: int):
        super().__init__(store, first_chunk)
        self.rows = self.done = self.failed = 0

    def handle(self, after, upper, rows: int) -> None:
        counted, done, failed = self.store.count_chunk(after, upper)
        self.rows, self.done, self.failed = self.rows + counted, self.done + done, self.failed + failed
