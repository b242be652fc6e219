"""An operator's word to a namespace, through its queue backend (`batchd pause`, `resume`, `open-batch`).

Pausing sets a flag in the queue backend: the master stops claiming and opening batches, and the
lease script takes nothing while the flag is set (in the same atomic step, so no worker takes a task
after the pause is said), while what the workers hold is finished and written back. `open-batch`
leaves a request the master takes at its next patrol (it is woken at once) and waits to see the new
batch's record.
"""
import time
from typing import Optional

from ..errors import BackendUnavailable, BatchdError, ExitCode
from ..model import BatchRecord
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


def open_batch(runtime, force: bool) -> str:
    """Ask for the next batch now and wait until its record exists; BatchStillOpen while one is open
    (unless `force`), NoMasterAnswered when no master opened it in time (the request stays)."""
    store = runtime.store
    last_id, was_open = ask_open_batch(runtime, force)
    wait = max(OPEN_WAIT_LEAST, 2 * runtime.settings.BATCH_MONITOR_INTERVAL)
    opened = _wait_for_batch_after(store, last_id, wait)
    if opened is None:
        raise NoMasterAnswered(f"no master of namespace {runtime.namespace} opened the batch within {wait:g} s: is "
                               "batchd-master running? The request stays; the master opens the batch at its next "
                               "patrol")
    closed = f"batch {last_id} closed as it stood; " if was_open else ""
    return f"{closed}batch {opened.id} opened at {opened.batch_date:%Y-%m-%d %H:%M:%S}"


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
