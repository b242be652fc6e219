"""Items on their way to storage, and the write-back gate that waits for them.

One thread per worker process (the lander) does both jobs, in this order each turn:
1. flush the buffered items as one batch (ITEM_FLUSH_SIZE reached, ITEM_FLUSH_INTERVAL
   passed, or a thread short of ledger slots asked for it); a batch that still fails
   after FLUSH_ATTEMPTS is appended to FAILED_ITEMS_PATH, which counts as landed;
2. take the landed counts off the ledger;
3. write back every task that is settled: failed (at once), or done with its requests
   finished and nothing left unflushed. The lease is released first; a task whose lease
   was reclaimed meanwhile is not written (its new holder owns it now).
A write-back that meets a database outage is kept and tried again, never dropped.
"""
import logging
import threading
import time
from dataclasses import dataclass
from typing import Optional

from .config import IDENTIFIER
from .errors import BackendUnavailable
from .failed_items import FailedItemsFile
from .queue.base import Lease
from .store.base import COLUMNS_ITEM_KIND, ItemRow
from .task import TaskState, finish_move

log = logging.getLogger("batchd.pipeline")

FLUSH_ATTEMPTS = 3
RETRY_PAUSE = (0.5, 1.0, 2.0, 5.0, 10.0)


@dataclass(eq=False)
class TaskRun:
    """One leased task inside a worker, from lease to write-back."""

    lease: Lease
    slot: int
    outcome: Optional[TaskState] = None
    requests_finished: bool = False
    released: bool = False        # the lease is ended; only the database write is left
    lease_lost: bool = False      # reclaimed before the write-back: not ours to write
    settled: bool = False         # written back, or given up to the lease mechanism
    request_seq: int = 0
    last_failure: object = None   # the RequestFailed behind a failed_request() call

    @property
    def task_id(self):
        return self.lease.task_id

    def next_request_seq(self) -> int:
        seq, self.request_seq = self.request_seq, self.request_seq + 1
        return seq


class Pipeline:
    def __init__(self, store, queue, ledger, settings, item_table: str, item_kind: str,
                 on_written=lambda runs: None):
        self.store, self.queue, self.ledger = store, queue, ledger
        self.flush_size = settings.ITEM_FLUSH_SIZE
        self.flush_interval = settings.ITEM_FLUSH_INTERVAL
        self.failed_items = FailedItemsFile(settings.failed_items_path())
        self.item_table, self.item_kind = item_table, item_kind
        self.on_written = on_written
        self._cond = threading.Condition()
        self._buffer: list = []            # (run, ItemRow)
        self._writebacks: list = []        # runs ready to write
        self._runs: set = set()            # runs not yet settled, for lease renewal
        self._flush_now = False
        self._stopping = False
        self._abandon = False
        self._thread: Optional[threading.Thread] = None
        self._columns = store.item_columns(item_table) if item_kind == COLUMNS_ITEM_KIND else None

    # -- called by the fetch threads
    def track(self, run: TaskRun) -> None:
        with self._cond:
            self._runs.add(run)

    def add_item(self, run: TaskRun, request_seq: int, item_seq: int, data: dict) -> None:
        row = ItemRow(batch_id=run.lease.batch_id, task_id=run.task_id, request_seq=request_seq,
                      item_seq=item_seq, data=data)
        self.ledger.add(run.slot, 1)
        with self._cond:
            self._buffer.append((run, row))
            if len(self._buffer) >= self.flush_size:
                self._cond.notify_all()

    def record_outcome(self, run: TaskRun, ok: bool) -> None:
        """update_task() during processing: failure is written at once, done waits for the gate."""
        with self._cond:
            if run.outcome == TaskState.FAILED or run.settled:
                return
            run.outcome = TaskState.DONE if ok else TaskState.FAILED
            if not ok:
                self._queue_writeback(run)

    def finish_requests(self, run: TaskRun) -> None:
        """The task's last request has ended; settle it now if nothing holds it back."""
        with self._cond:
            run.requests_finished = True
            if run.outcome is None:
                log.warning("task %s: its requests ended without update_task(); it stays in processing "
                            "and comes back when its lease expires", run.task_id)
                self._runs.discard(run)       # stop renewing: let the lease expire
                run.settled = True
            elif run.outcome == TaskState.DONE:
                self._settle_if_landed(run)
            self._free_slot_if_empty(run)

    def ask_flush(self) -> None:
        with self._cond:
            self._flush_now = True
            self._cond.notify_all()

    def held_leases(self) -> list:
        with self._cond:
            return [run.lease for run in self._runs if not run.released]

    def in_flight(self) -> int:
        with self._cond:
            return len(self._runs) + len(self._buffer)

    # -- the lander thread
    def start(self) -> None:
        self._thread = threading.Thread(target=self._land_loop, name="batchd-lander", daemon=True)
        self._thread.start()

    def stop(self, timeout: float, abandon: bool = False) -> bool:
        """Flush and write back what is left (warm), or leave it to the leases (abandon = cold).
        True when everything landed and was written in time."""
        with self._cond:
            self._stopping, self._abandon = True, abandon
            self._cond.notify_all()
        if self._thread:
            self._thread.join(timeout)
            if self._thread.is_alive():
                with self._cond:
                    self._abandon = True
                    self._cond.notify_all()
                self._thread.join(5)
        with self._cond:
            left = len(self._buffer) + len(self._writebacks)
        if left:
            log.warning("stopped with %d items / write-backs not landed; their tasks stay in processing "
                        "and come back through their leases", left)
        return left == 0

    def _land_loop(self) -> None:
        last_flush, failures = time.monotonic(), 0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._has_work(last_flush), timeout=self._wait_time(last_flush, failures))
                if self._abandon or (self._stopping and not self._buffer and not self._writebacks):
                    return
                take_items = self._buffer and (self._flush_now or self._stopping or len(self._buffer) >= self.flush_size
                                               or time.monotonic() - last_flush >= self.flush_interval)
                batch = self._buffer[:self.flush_size] if take_items else []
                del self._buffer[:len(batch)]
                self._flush_now = self._flush_now and bool(self._buffer)
            if take_items:
                last_flush = time.monotonic()
            if batch:
                self._land(batch)
            failures = 0 if self._write_ready() else failures + 1

    def _has_work(self, last_flush: float) -> bool:
        return bool(self._abandon or self._stopping or self._writebacks or self._flush_now
                    or len(self._buffer) >= self.flush_size
                    or (self._buffer and time.monotonic() - last_flush >= self.flush_interval))

    def _wait_time(self, last_flush: float, failures: int) -> float:
        if failures and self._writebacks:
            return RETRY_PAUSE[min(failures, len(RETRY_PAUSE)) - 1]
        return max(0.01, self.flush_interval - (time.monotonic() - last_flush))

    def _land(self, batch: list) -> None:
        """Store a batch (or dump it); only what landed is taken off the ledger."""
        good, bad = self._split_bad_items(batch)
        landed = []
        if bad and self._dump(bad, "item keys are not columns of the item table"):
            landed += bad
        if good:
            error = self._save_with_retries([row for _, row in good])
            if error is None or self._dump(good, error):
                landed += good
        per_run: dict = {}
        for run, _ in landed:
            per_run[run] = per_run.get(run, 0) + 1
        with self._cond:
            for run, n in per_run.items():
                self.ledger.sub(run.slot, n)
                self.ledger.count(items=n)
                if run.outcome == TaskState.DONE and run.requests_finished:
                    self._settle_if_landed(run)
                self._free_slot_if_empty(run)

    def _split_bad_items(self, batch: list) -> tuple:
        if self._columns is None:
            return batch, []
        good, bad = [], []
        for run, row in batch:
            unknown = [k for k in row.data if k not in self._columns or not IDENTIFIER.match(k)]
            if unknown:
                log.error("task %s: item key %r is not a column of item table `%s`; the item goes to %s "
                          "(add the column, then run: batchd retry --items)", run.task_id, unknown[0],
                          self.item_table, self.failed_items.path)
                bad.append((run, row))
            else:
                good.append((run, row))
        return good, bad

    def _save_with_retries(self, rows: list) -> Optional[str]:
        """None when stored; otherwise the last error, in one line."""
        error = None
        for attempt in range(FLUSH_ATTEMPTS):
            try:
                self.store.save_items(self.item_table, self.item_kind, rows)
                return None
            except Exception as e:   # any failure: the rows must land somewhere, never vanish
                error = f"{type(e).__name__}: {e}"
                log.warning("flush of %d items to `%s` failed (attempt %d of %d): %s", len(rows),
                            self.item_table, attempt + 1, FLUSH_ATTEMPTS, error)
                if attempt + 1 < FLUSH_ATTEMPTS:
                    time.sleep(RETRY_PAUSE[attempt])
        return error

    def _dump(self, batch: list, error: str) -> bool:
        """Append the items to FAILED_ITEMS_PATH, retrying while the disk refuses; False only when a
        cold stop gives up on them (their tasks then stay unwritten and come back through their leases)."""
        records = [FailedItemsFile.record(self.item_table, self.item_kind, row, error) for _, row in batch]
        while True:
            try:
                self.failed_items.append(records)
                log.error("%d items written to %s instead (%s); replay them with: batchd retry --items",
                          len(records), self.failed_items.path, error)
                return True
            except OSError as e:
                log.error("cannot append to %s: %s; retrying", self.failed_items.path, e)
                if self._wait_abandon(RETRY_PAUSE[-1]):
                    return False

    def _wait_abandon(self, seconds: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._abandon, seconds)

    # -- the gate (called with self._cond held)
    def _settle_if_landed(self, run: TaskRun) -> None:
        if not run.settled and self.ledger.unflushed(run.slot) == 0:
            self._queue_writeback(run)

    def _queue_writeback(self, run: TaskRun) -> None:
        run.settled = True
        self._writebacks.append(run)
        self._cond.notify_all()

    def _free_slot_if_empty(self, run: TaskRun) -> None:
        """A slot is freed once nothing of its task can still change: requests over, written back
        (or abandoned), every item landed."""
        if (run.slot >= 0 and run.requests_finished and run.settled and run not in self._writebacks
                and self.ledger.unflushed(run.slot) == 0):
            self.ledger.release_slot(run.slot)
            run.slot = -1

    def _write_ready(self) -> bool:
        """Write back the runs waiting; False when the backend failed (they are kept for the next turn)."""
        with self._cond:
            runs = list(self._writebacks)
        if not runs:
            return True
        try:
            self._release_leases([r for r in runs if not r.released])
            for state in (TaskState.DONE, TaskState.FAILED):
                owned = [r for r in runs if r.outcome == state and not r.lease_lost]
                if owned:
                    self.store.move(finish_move(state == TaskState.DONE), [r.task_id for r in owned])
        except BackendUnavailable as e:
            log.warning("write-back of %d tasks postponed: %s", len(runs), e)
            return False
        except Exception as e:    # a write-back is never dropped: keep it and try again
            log.error("write-back of %d tasks failed, will retry: %s: %s", len(runs), type(e).__name__, e)
            return False
        self._forget(runs)
        return True

    def _release_leases(self, runs: list) -> None:
        owned = set(map(id, self.queue.release([r.lease for r in runs])))
        for run in runs:
            run.released = True
            if id(run.lease) not in owned:
                log.info("task %s: its lease was reclaimed before the write-back; the new holder owns it",
                         run.task_id)
                run.lease_lost = True

    def _forget(self, runs: list) -> None:
        with self._cond:
            for run in runs:
                self._writebacks.remove(run)
                self._runs.discard(run)
                self._free_slot_if_empty(run)
                if not run.lease_lost:
                    self.ledger.count(done=int(run.outcome == TaskState.DONE),
                                      failed=int(run.outcome == TaskState.FAILED))
        self.on_written(runs)
