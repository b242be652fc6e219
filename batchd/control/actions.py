"""An operator's word to a namespace, through its queue backend (`batchd pause`, `resume`, `open-batch`).

Pausing sets a flag in the queue backend: the master stops claiming and opening batches, and the
lease script takes nothing while the flag is set (in the same atomic step, so no worker takes a task
after the pause is said), while what the workers hold is finished and written back. `open-batch`
leaves a request the master takes at its next patrol: when a master holds the namespace's lock, it is woken
at once and the command waits to see the new batch's record; when none does, the command is the master for
a moment (master/patrol.py `Master.open_asked`: the lock, the request taken, the record, the reset, the first
claims) and answers at once.
"""
import time
from typing import Optional

from ..errors import BackendUnavailable, BatchdError, ExitCode
from ..model import BatchRecord
from ..service.lifecycle import StopFlag
from ..reporting.snapshots import paused_text

OPEN_WAIT_LEAST = 30.0       # seconds `open-batch` waits for the master to open the batch, at least


class BatchStillOpen(BatchdError):
    """`batchd open-batch` without --force while a batch is open."""

    exit_code = ExitCode.FAILURE


class NoMasterAnswered(BatchdError):
    """`batchd open-batch`: the request is left, but no master took it in time."""

    exit_code = ExitCode.UNAVAILABLE


def pause(runtime) -> str:
    leases = runtime.backend.leases
    since = leases.paused_since()
    if since is not None:
        return f"namespace {runtime.namespace} was already paused, since {paused_text(since)}"
    leases.set_paused(time.time())
    wake_master(runtime)
    return (f"namespace {runtime.namespace} paused: no task is claimed or leased from now on; the workers finish "
            "and write back what they hold (batchd resume to go on)")


def resume(runtime) -> str:
    leases = runtime.backend.leases
    since = leases.paused_since()
    if since is None:
        return f"namespace {runtime.namespace} was not paused"
    leases.set_paused(None)
    wake_master(runtime)
    return f"namespace {runtime.namespace} resumed (paused since {paused_text(since)})"


def open_batch(runtime, force: bool, stop: Optional[StopFlag] = None) -> str:
    """Ask for the next batch now and see it opened: by the master holding the namespace's lock (the command
    waits for its record), else here, as that master would (`Master.open_asked`). BatchStillOpen while one is
    open (unless `force`); NoMasterAnswered when the lock's holder did not open it in time (the request stays)."""
    last_id, was_open = ask_open_batch(runtime, force)
    closed = f"batch {last_id} closed as it stood; " if was_open else ""
    opened = runtime.master().open_asked(stop or StopFlag())
    if opened is not None and (last_id is None or opened.id > last_id):
        return f"{closed}batch {opened.id} opened at {opened.batch_date:%Y-%m-%d %H:%M:%S}{_left_to(opened)}"
    wait = max(OPEN_WAIT_LEAST, 2 * runtime.settings.BATCH_MONITOR_INTERVAL)
    opened = _wait_for_batch_after(runtime.store, last_id, wait)
    if opened is None:
        raise NoMasterAnswered(f"the master of namespace {runtime.namespace} ({runtime.backend.locks.lock_holder()}) "
                               f"did not open the batch within {wait:g} s: is it stalled? The request stays; a "
                               "master opens the batch at its next patrol")
    return f"{closed}batch {opened.id} opened at {opened.batch_date:%Y-%m-%d %H:%M:%S}"


def _left_to(opened: BatchRecord) -> str:
    """What a batch this command opened leaves to the master and the workers."""
    if opened.resetting:
        return " (no master is running; the next master finishes its reset, then claims its tasks)"
    return " (no master is running: its first tasks wait in the queue for the workers, the rest for a master)"


def ask_open_batch(runtime, force: bool) -> tuple:
    """Leave the request for the next batch and wake the master: (the last batch's id, whether it was open);
    BatchStillOpen while one is open, unless `force`."""
    store = runtime.store
    store.open(runtime.layout)
    last = store.last_batch()
    was_open = last is not None and not last.is_done     # (read now: a store in memory hands out its live record)
    if was_open and not force:
        raise BatchStillOpen(f"batch {last.id} is still open (opened {last.batch_date:%Y-%m-%d %H:%M}); "
                             "`batchd open-batch --force` closes it as it stands and opens the next")
    runtime.backend.leases.ask_open_batch(force)
    wake_master(runtime)
    return (last.id if last is not None else None), was_open


def _wait_for_batch_after(store, last_id: Optional[int], seconds: float) -> Optional[BatchRecord]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        batch = store.last_batch()
        if batch is not None and (last_id is None or batch.id > last_id):
            return batch
        time.sleep(0.2)
    return None


def wake_master(runtime) -> None:
    try:
        runtime.backend.wake.wake_master()
    except BackendUnavailable:
        pass       # the master patrols on its own timer anyway
