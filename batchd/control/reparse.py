"""`batchd reparse`: the current spider over a batch's archive, with no network, as a batch of its own.

A reparse is a batch (master/reparse_opening.py): its record says it reparses batch N, its tasks are claimed,
leased, settled and judged as any batch's, and the workers serve its requests from batch N's archive
(worker/replays.py). So the command does what `batchd open-batch` does, with a reparse in the request:

- under the daemon (a master holds the namespace's lock), it leaves the request for that master and follows the
  batch to its close: the work is the workers', on as many processes and hosts as the daemon runs. The command
  may stop following (Ctrl-C): the reparse goes on there.
- with no master running, the command is the master, and one worker runs beside it in this process
  (SPIDER_THREAD_COUNT threads), as `start_monitor(once=True)` runs a batch of the memory store.

Either way it reports as it goes and at the end: tasks settled, responses replayed, items stored, requests not
archived (and fetched, with --fetch-missing), from the batch's tally and counters.
"""
import logging
import os
import time
from dataclasses import dataclass
from typing import Callable, Optional

from ..archive.files import batch_folder
from ..errors import BackendUnavailable, BatchdError, ConfigError, ExitCode, MasterLockHeld
from ..master.reparse_opening import reparse_request, what_reparses
from ..model import BatchOpening, BatchRecord
from ..quality.verdict import FAILED, FLAGGED, outcome_of
from ..service.lifecycle import StopFlag
from ..service.threads import check_in, start_thread
from ..worker.replays import FETCHED, NOT_ARCHIVED, REPLAYED
from .actions import BatchStillOpen, NoMasterAnswered, wake_master

log = logging.getLogger("batchd")

FOLLOW_EVERY = 0.5       # seconds between two looks at the reparse's figures
FOLLOW_SLACK = 60.0      # seconds a look may take (its store's timeouts) before the follower counts as wedged
OPEN_WAIT = 30.0         # seconds the daemon's master has to open the reparse


class NoSuchBatch(BatchdError):
    """`batchd reparse --batch N` of a batch never opened."""

    exit_code = ExitCode.FAILURE


@dataclass(frozen=True)
class ReparseFigures:
    """Where a reparse stands: its batch, the batch it reparses, its tasks and its counters so far."""

    batch_id: int
    reparse_of: int
    total: int
    done: int
    failed: int
    replayed: int
    stored: int
    not_archived: int
    fetched: int
    outcome: Optional[str] = None       # once closed (quality/verdict.py)

    @property
    def exit_code(self) -> ExitCode:
        """As a --once batch ends: 65 flagged, 1 some task failed, else 0."""
        return {FLAGGED: ExitCode.DATAERR, FAILED: ExitCode.FAILURE}.get(self.outcome or "", ExitCode.OK)


def reparse(runtime, batch_id: Optional[int] = None, host: Optional[str] = None, task: Optional[str] = None,
            fetch_missing: bool = False, stop: Optional[StopFlag] = None,
            on_progress: Callable[[ReparseFigures], None] = lambda figures: None) -> ReparseFigures:
    """Reparse batch `batch_id` (None: the last): its tasks, those of `host`, or the one `task`; here or under the
    daemon (the module's doc), followed to its close; its figures then. `on_progress` hears them as they go."""
    stop = stop or StopFlag()
    opening = reparse_request(replayed_batch(runtime, batch_id, host).id, host, task, fetch_missing)
    last = ask_reparse(runtime, opening)
    if runtime.store.runs_in_process or runtime.backend.locks.lock_holder() is None:
        try:
            return _reparse_here(runtime, last, stop, on_progress)
        except MasterLockHeld:         # a master started meanwhile: it takes the request
            log.info("a master took the namespace meanwhile; it opens the reparse, this command follows it")
    log.info("a master runs namespace %s (%s): the reparse is queued for its workers", runtime.namespace,
             runtime.backend.locks.lock_holder())
    batch = _wait_for_open(runtime, last, stop)
    return follow(runtime, batch.id, stop, on_progress) or figures(runtime, batch)


def replayed_batch(runtime, batch_id: Optional[int], host: Optional[str]) -> BatchRecord:
    """The batch whose archive the reparse reads: `batch_id` (None: the last), or the crawl it reparsed when it is
    a reparse (which fetches nothing: its pages are that crawl's). NoSuchBatch for a batch never opened;
    ConfigError for --host without BATCH_TASK_HOST_FIELD, or a batch with no archive folder."""
    store = runtime.store
    store.open(runtime.layout)
    if host and not runtime.layout.host_field:
        raise ConfigError("batchd reparse --host: set BATCH_TASK_HOST_FIELD (the column of each task's URL or host), "
                          "so that the tasks of a host are known")
    last = store.last_batch()
    if last is None:
        raise NoSuchBatch(f"no batch of {runtime.layout.table} was ever opened: there is no archive to reparse")
    batch_id = last.id if batch_id is None else batch_id

    def record_of(wanted: int) -> Optional[BatchRecord]:
        kept = store.recent_batches(last.id - wanted + 1) if wanted <= last.id else []
        return next((record for record in kept if record.id == wanted), None)

    record = record_of(batch_id)
    while record is not None and record.how_opened.reparse_of is not None:
        record = record_of(record.how_opened.reparse_of)
    if record is None:
        raise NoSuchBatch(f"batch {batch_id} of {runtime.layout.table} was never opened (batchd status --history "
                          "lists the batches)")
    folder = batch_folder(runtime.settings.archive_path(), runtime.namespace, record.id)
    if not os.path.isdir(folder):
        raise ConfigError(f"batch {record.id} has no archive: no folder {folder} (was ARCHIVE = \"warc\" on while it "
                          "ran? ARCHIVE_PATH must name the folder its workers wrote)")
    return record


def ask_reparse(runtime, opening: BatchOpening) -> Optional[int]:
    """Leave the reparse request and wake the master; the last batch's id. BatchStillOpen while a batch is open
    (a reparse waits for it: two batches never run at once) or the namespace is paused (nothing would be claimed)."""
    last = runtime.store.last_batch()
    if last is not None and not last.is_done:
        raise BatchStillOpen(f"batch {last.id} is still open (opened {last.batch_date:%Y-%m-%d %H:%M}); a reparse "
                             "opens once it is over (or `batchd open-batch --force` closes it as it stands)")
    if runtime.backend.leases.paused_since() is not None:
        raise BatchStillOpen(f"namespace {runtime.namespace} is paused: a reparse would claim nothing "
                             "(`batchd resume` first)")
    runtime.backend.leases.ask_open_batch(False, opening.to_json())
    wake_master(runtime)
    log.info("reparse of batch %d asked: %s, from its archive%s", opening.reparse_of, what_reparses(opening),
             "; what it lacks is fetched" if opening.fetch_missing else ", with no network")
    return last.id if last is not None else None


def _reparse_here(runtime, last: Optional[int], stop: StopFlag,
                  on_progress: Callable[[ReparseFigures], None]) -> ReparseFigures:
    """This process is the master (it takes the request at its first patrol) and runs a worker beside it; a
    guarded thread follows the figures meanwhile."""
    done = StopFlag()

    def follow_when_open() -> None:
        while not done.is_set():
            check_in(within=FOLLOW_SLACK)
            batch = _read(lambda: runtime.store.last_batch())
            if batch is not None and batch.id != last:
                follow(runtime, batch.id, done, on_progress)
                return
            done.wait(FOLLOW_EVERY)

    follower = start_thread(follow_when_open, "batchd-reparse-follow")
    try:
        runtime.run_in_process(stop, once=True)
    finally:
        done.request()
        follower.join()
    batch = runtime.store.last_batch()
    if batch is None or batch.id == last or not batch.how_opened.is_reparse:
        raise NoMasterAnswered("the reparse did not open (stopped before its first patrol?); its request stays "
                               "for the next master")
    last_figures = figures(runtime, batch)
    on_progress(last_figures)
    return last_figures


def _wait_for_open(runtime, last: Optional[int], stop: StopFlag) -> BatchRecord:
    deadline = time.monotonic() + max(OPEN_WAIT, 2 * runtime.settings.BATCH_MONITOR_INTERVAL)
    while time.monotonic() < deadline and not stop.is_set():
        batch = runtime.store.last_batch()
        if batch is not None and batch.id != last:
            return batch
        stop.wait(FOLLOW_EVERY)
    raise NoMasterAnswered(f"the master of namespace {runtime.namespace} ({runtime.backend.locks.lock_holder()}) did "
                           "not open the reparse in time: is it stalled? The request stays; it opens the reparse at "
                           "its next patrol")


def follow(runtime, batch_id: int, stop: StopFlag,
           on_progress: Callable[[ReparseFigures], None]) -> Optional[ReparseFigures]:
    """Tell `on_progress` the reparse's figures every FOLLOW_EVERY s until it closes, or `stop`; the last ones
    seen (None: none could be read before the stop)."""
    seen = None
    while True:
        check_in(within=FOLLOW_SLACK)
        batch = _read(lambda: next(b for b in runtime.store.recent_batches(3) if b.id == batch_id))
        now = _read(lambda: figures(runtime, batch)) if batch is not None else None
        if now is not None:
            seen = now
            on_progress(now)
            if now.outcome is not None:
                return now
        if stop.wait(FOLLOW_EVERY):
            return seen


def figures(runtime, batch: BatchRecord) -> ReparseFigures:
    """The reparse's figures: from its record once closed, else its tally and its counters so far."""
    if batch.is_done:
        done, failed, counters = batch.done_count, batch.fail_count, batch.counters
    else:
        done, failed = runtime.backend.tally.settled(batch.id) or (batch.done_count, batch.fail_count)
        counters = runtime.backend.counters.counts(batch.id)
    opening = batch.how_opened
    return ReparseFigures(batch.id, opening.reparse_of or 0, max(batch.total_count, done + failed), done, failed,
                          counters.get(REPLAYED, 0), counters.get("item/stored", 0), counters.get(NOT_ARCHIVED, 0),
                          counters.get(FETCHED, 0), (batch.outcome or outcome_of(0, failed)) if batch.is_done else None)


def _read(reading: Callable):
    """What `reading()` gives, or None while the backend is out of reach (a look missed, not the reparse)."""
    try:
        return reading()
    except (BackendUnavailable, StopIteration, OSError):
        return None

