"""The master: the batch lifecycle of one namespace, one patrol at a time.

A patrol (every BATCH_MONITOR_INTERVAL s, sooner when a worker wakes the master, at once while a
walk of the table is under way):
1. open a new batch when due and the last one has finished: open its record, then reset every
   task in primary-key chunks (batchd/master/walks.py), a few chunks per patrol, claiming the rows
   already reset as it goes; a reset found unfinished is finished before anything else;
2. reclaim: expired leases back to pending; processing rows no queue knows, once stale;
3. refill: claim pending tasks (at most BATCH_PUSH_LIMIT in the queue) and push them;
4. progress: from the batch's tally (settled tasks, counted by their write-backs) and the queue,
   never by counting rows: refresh the batch record, log `批次进度 X/Y`;
5. close: once the queue runs dry and the state index shows no unsettled row, count the table
   chunk by chunk and write those exact figures, the batch's counters (batchd/settle/batch_stats.py), how it
   ended and its quality flags (batchd/quality/verdict.py), `is_done=1` and the `<ns>:batch_done` flag; log
   one WARNING line per flag and the counters in one line. A render="auto" host crawled plain whose data a
   flag says fell is learning again (batchd/hosts/render_choices.py).

Alerts (batchd/alerts/alerts.py): a stall and the failure ratio at each progress check, the failure ratio
again at the close and a flagged batch's quality, an overdue batch at the patrol that finds it.

Only the holder of the namespace's master lock patrols; the lock is renewed by a
thread of its own so that a long reset or a slow query never lets it lapse.

Outages are waited out (batchd/service/outages.py): for ever by a resident master; in once mode,
unreachable at start is final (exit 69), an outage later for up to OUTAGE_TIMEOUT.
"""
import logging
import os
import socket
import time
from dataclasses import replace
from typing import Callable, Optional

from ..settle import failures
from ..recrawl.revisits import check_bounds
from ..settle.settler import Settler
from ..alerts.alerts import Alerts
from ..archive.keeping import remove_old_batches
from ..config import DAY, Settings
from ..errors import BackendUnavailable, ConfigError, ExitCode, MasterLockHeld
from ..service.lifecycle import StopFlag
from ..model import BatchOpening, BatchRecord, Progress, SpiderPrint, TaskLayout
from ..service.outages import OutageWatch, retry_through_outages
from ..backends.ports import MasterPorts, claim_namespace
from ..hosts.render_choices import relearn_flagged
from ..quality.verdict import FAILED, FLAGGED, QualityJudge, outcome_of
from ..settle.batch_stats import report
from ..settle.progress_rate import ProgressRate
from ..sitemaps.sitemap_import import import_at_opening
from ..task import Move
from ..service.threads import Heart
from .lock_keeper import LockKeeper
from .timing import Timing
from .log_words import forced_close_words, idle_words, refetch_words, some_of, wall_time, what_opens
from .reparse_opening import opening_after, reparse_asked
from .walks import CHUNK_SECONDS, CountWalk, ResetWalk

log = logging.getLogger("batchd.master")

WAKE_GAP = 0.03         # seconds between two patrols triggered by wake-ups
FIRST_CLAIM = 256       # tasks claimed first into an empty queue (refill)
LOCK_POLL = 2.0
ORPHAN_SCAN_LIMIT = 10000
ANY_AGE = -DAY          # an age every task in processing is older than (stale_processing's bound)
WALK_BUDGET = 0.15      # seconds of a walk (the reset, a reconciliation) in one patrol
RESET_REPORT_EVERY = 10.0   # seconds between two lines on a reset under way
OPEN_HERE_BUDGET = 5.0      # seconds `batchd open-batch` walks a reset itself when no master runs (open_asked)


class Master:
    def __init__(self, settings: Settings, layout: TaskLayout, ports: MasterPorts, settler: Settler, alerts: Alerts,
                 owner: Optional[str] = None, spider: Optional[SpiderPrint] = None, refetch: bool = False,
                 judge: Optional[QualityJudge] = None):
        """`settler`: the one settle path (settle/settler.py); `alerts`: the master's (built by batchd/assembly.py);
        `spider`: the print of the spider this process runs (recrawl/spider_print.py), kept in each batch it opens;
        `refetch`: the next batch it opens trusts no validator, whatever the print says (`batchd run --refetch`);
        `judge`: the quality checks at a batch's close (None: QUALITY_CHECKS off)."""
        self.judge = judge
        self.outcome: Optional[str] = None     # how the last batch this master closed ended (quality/verdict.py)
        # Told each judged batch's id and metric figures (quality/metric_figures.py) at its close: under a supervisor with METRICS_PORT, its
        # /metrics (supervisor/child.py sets it); a failure here is logged and never fails the close.
        self.judged: Optional[Callable[[int, dict], None]] = None
        self.settings, self.layout, self.store, self.leases = settings, layout, ports.store, ports.leases
        self.spider, self.refetch = spider, refetch
        self.locks, self.wake, self.namespaces = ports.locks, ports.wake, ports.namespaces
        self.tally, self.counters, self.render_choices = ports.tally, ports.counters, ports.render_choices
        self.settler, self.alerts = settler, alerts
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self.rate = ProgressRate()
        self.timing = Timing(settings, self.store, layout.host_field)    # BATCH_SCHEDULE, CRAWL_HOURS
        self.last_progress: Optional[Progress] = None
        self.batch: Optional[BatchRecord] = None
        self._heartbeat: Callable = lambda: None
        self._idle_announced: Optional[int] = None
        self.watch = OutageWatch()
        self._give_up_after: Optional[float] = None
        self.served = False       # a patrol has run to its end (the supervisor respawns such a master at once)
        self.claims_in_doubt = True   # until the first sweep: a master before this one may have left orphans
        self.reset: Optional[ResetWalk] = None     # the reset under way
        self.count: Optional[CountWalk] = None     # the reconciliation under way
        self._reported = 0.0                       # when the reset under way was last reported
        self.paused_since: Optional[float] = None  # `batchd pause`: when (Unix time)
        self.queue_length = 0                      # tasks in the queue after the last refill (for metrics)
        self.opening = BatchOpening(mode=settings.BATCH_MODE, reset_failed=settings.BATCH_RESET_FAILED)
        if not self.opening.is_default and not self.store.keeps_openings:
            raise ConfigError(f"BATCH_MODE={settings.BATCH_MODE}, BATCH_RESET_FAILED={settings.BATCH_RESET_FAILED}: "
                              f"{self.store.describe()} keeps no record of how a batch opened; only a full batch "
                              "resetting every task runs on it")
        if settings.BATCH_MODE == "due":
            check_bounds(settings)
        if settings.BATCH_MODE == "due" and not self.store.keeps_pages:
            raise ConfigError(f'BATCH_MODE = "due": {self.store.describe()} keeps no revisits (BatchStore.'
                              "keeps_pages); use MySQL, SQLite or the memory store, or another mode")

    # -- the loop the supervisor (or start_monitor()) runs
    def run(self, stop: StopFlag, heartbeat: Callable = lambda: None, once: bool = False,
            on_outages: Callable[[list], None] = lambda outages: None) -> None:
        """`heartbeat` counts only while every thread makes progress; `on_outages` hears each change of
        the backends that are down (a supervised child puts them in its ledger row, for STATUS=)."""
        self._heartbeat = Heart(heartbeat, self.settings.CHILD_TIMEOUT / 2)
        self.watch = OutageWatch({self.store.backend_name: self.store.ping, self.leases.backend_name: self.leases.ping},
                                 listener=on_outages, beat=self._heartbeat)
        self._give_up_after = self.settings.OUTAGE_TIMEOUT if once else None
        try:
            if self._start(stop, once):
                self._patrol_while_master(stop, once)
        finally:
            self.alerts.close()

    def open_asked(self, stop: StopFlag, budget: float = OPEN_HERE_BUDGET) -> Optional[BatchRecord]:
        """`batchd open-batch` with no master running: take the master lock and patrol here as a master would,
        taking the request the command left (open_on_request: the record, the reset, the first claims into the
        queue), until the reset is walked or `budget` seconds passed (the next master goes on from the record's
        cursor); then let the lock go. The last batch after; None when a master holds the lock (it takes the
        request itself). An outage is final here (BackendUnavailable, 69), as in once mode."""
        self._start(stop, once=True)
        lock = self.locks.master_lock(self.owner, self.settings.MASTER_LOCK_TIMEOUT)
        if not lock.acquire():
            return None
        keeper = LockKeeper(lock, self.settings.MASTER_LOCK_TIMEOUT)
        keeper.start()
        try:
            deadline = time.monotonic() + budget
            self.patrol(stop, keeper)
            while self.walking and keeper.holds() and not stop.is_set() and time.monotonic() < deadline:
                self.patrol(stop, keeper)
            return self.batch
        finally:
            keeper.stop()
            self.alerts.close()

    def _patrol_while_master(self, stop: StopFlag, once: bool) -> None:
        while not stop.is_set():
            keeper = self._take_lock(stop, once)
            if keeper is None:
                return
            try:
                if self._patrol_while_locked(stop, keeper, once):
                    return
            finally:
                keeper.stop()

    def _start(self, stop: StopFlag, once: bool) -> bool:
        """Open the store and claim the namespace for it: in once mode an outage here is final (exit 69),
        a resident master waits it out; False if stopped meanwhile."""
        def start() -> bool:
            self.store.open(self.layout)
            claim_namespace(self.namespaces, self.store, self.layout, self.leases.namespace, "master")
            return True
        return start() if once else self._through_outages(start, stop) is not None

    def _take_lock(self, stop: StopFlag, once: bool) -> Optional[LockKeeper]:
        ttl = self.settings.MASTER_LOCK_TIMEOUT
        lock = self.locks.master_lock(self.owner, ttl)
        logged = False
        while not stop.is_set():
            if self._through_outages(lock.acquire, stop):
                log.info("master of namespace %r (%s, lock TTL %.0f s)", self.leases.namespace,
                         self.owner, ttl)
                keeper = LockKeeper(lock, ttl)
                keeper.start()
                return keeper
            holder = self._through_outages(self.locks.lock_holder, stop)
            if once:
                raise MasterLockHeld(f"another master holds namespace {self.leases.namespace!r} ({holder})")
            if not logged:
                log.info("waiting: %s is master of namespace %r", holder, self.leases.namespace)
                logged = True
            self._heartbeat()
            stop.wait(LOCK_POLL)
        return None

    def _patrol_while_locked(self, stop: StopFlag, keeper: LockKeeper, once: bool) -> bool:
        """Patrol until stopped, lock lost (False: take the lock again) or, in once mode, batch over."""
        interval = self.settings.BATCH_MONITOR_INTERVAL
        next_full = 0.0
        while not stop.is_set() and keeper.holds():
            self._heartbeat()
            full = time.monotonic() >= next_full
            if full:
                next_full = time.monotonic() + interval
            # (Checked again at each try: an outage waited out may have outlasted the lock.)
            finished = self._through_outages(lambda: keeper.holds() and self.patrol(stop, keeper, full), stop)
            self.served = self.served or finished is not None
            if once and finished:
                return True
            if not self.walking:
                self._wait_for_next_patrol(stop, next_full)
        if not stop.is_set() and not keeper.lost.is_set():
            log.error("the master lock was not renewed within half its TTL (Redis slow, down or failing over); "
                      "patrols stop until it is held again")
        return stop.is_set()

    def _through_outages(self, action: Callable, stop: StopFlag):
        def noting_outages():
            try:
                return action()
            except BackendUnavailable:
                self.claims_in_doubt = True       # a claim may have committed without its answer or its push
                raise
        return retry_through_outages(noting_outages, self.watch, stop, self._give_up_after)

    def _wait_for_next_patrol(self, stop: StopFlag, next_full: float) -> None:
        started = time.monotonic()
        while not stop.is_set():
            left = next_full - time.monotonic()
            if left <= 0:
                return
            try:
                woken = self.wake.wait_for_wake(min(left, 1.0))
            except BackendUnavailable as e:
                self.watch.failed(e)          # the patrol itself retries with backoff
                woken = stop.wait(min(left, 1.0))
            self._heartbeat()
            if woken:      # a patrol now, but never two within WAKE_GAP: a burst of wake-ups is one
                stop.wait(max(0.0, WAKE_GAP - (time.monotonic() - started)))
                return

    # -- one patrol
    def patrol(self, stop: StopFlag, keeper: Optional[LockKeeper] = None, full: bool = True) -> bool:
        """One patrol; True when the current batch has finished and no new one is due. While a walk of the
        table is under way (a reset, a reconciliation) a patrol takes it WALK_BUDGET seconds further."""
        batch = self.store.last_batch()
        now = self.store.now()
        self._note_pause(self.leases.paused_since())
        asked = self.leases.take_open_request()
        if asked is not None:
            batch = self.open_on_request(batch, asked)
        elif batch is None or (batch.is_done and self.timing.is_due(batch, now) and self.paused_since is None):
            batch = self.open_batch(batch)
        elif self.timing.is_due(batch, now) and not batch.is_done and full:
            self.timing.note_overlap(batch)
            self.alerts.overdue(batch.id, self.timing.next_due(batch))
        self.batch = batch
        self._drop_stale_walks(batch)
        if batch.is_done:
            self._announce_idle(batch)
            return True
        going_on = _keep_going(stop, keeper)
        if batch.resetting and not self.go_on_resetting(batch, going_on, full):
            return False
        self.reclaim()
        claimed = self.refill(batch) if self.paused_since is None else 0
        if self.count is not None or (self._queue_dry(claimed) and self.timing.may_close(full)):
            if self.go_on_reconciling(batch, claimed, going_on):
                return True
        if full:
            self.check_progress(batch)
        return False

    def _note_pause(self, since: Optional[float]) -> None:
        """`batchd pause` / `resume`, said once each way: while paused nothing is claimed nor leased."""
        if since == self.paused_since:
            return
        if since is not None:
            log.warning("namespace %r paused since %s (batchd pause): no task is claimed or leased; what the "
                        "workers hold is finished and written back", self.leases.namespace, wall_time(since))
        else:
            log.info("namespace %r resumed (batchd resume)", self.leases.namespace)
        self.paused_since = since

    def open_on_request(self, batch: Optional[BatchRecord], asked: str) -> BatchRecord:
        """`batchd open-batch`: the next batch now, whatever the calendar says; with --force ("force") the
        open one is closed first, as it stands. `batchd reparse`: a reparse batch (reparse_opening.py)."""
        verb = "batchd reparse" if (reparse := reparse_asked(asked)) else "batchd open-batch"
        if batch is not None and not batch.is_done:
            if asked != "force":
                log.warning("%s: batch %d is still open; nothing done", verb, batch.id)
                return batch
            self.close_as_it_stands(batch)
        log.info("%s: the next batch opens now, whatever the calendar says", verb)
        return self.open_batch(batch, opening_after(reparse, batch) if reparse else None)

    def close_as_it_stands(self, batch: BatchRecord) -> None:
        """Close an open batch with its tally's figures; the tasks not settled are crawled in the next."""
        done, failed = self._settled(batch)
        total = max(batch.total_count, done + failed)
        progress = Progress(total=total, done=done, failed=failed, pending=total - done - failed, processing=0)
        self.store.update_batch(batch.id, progress, is_done=True)
        self.reset = self.count = None
        batch.is_done, batch.done_count, batch.fail_count = True, done, failed
        log.warning(forced_close_words(batch.id, total, done, failed))

    def _drop_stale_walks(self, batch: BatchRecord) -> None:
        """Walks another master ended while this one had lost the lock are over here too."""
        if self.reset is not None and not (batch.resetting and batch.id == self.reset.batch_id):
            self.reset = None
        if batch.is_done:
            self.count = None

    @property
    def walking(self) -> bool:
        """A walk of the table is under way: the next patrol comes at once."""
        return self.reset is not None or self.count is not None

    def next_due_text(self) -> str:
        """When the next batch is due, on the store's clock ("" before the first batch)."""
        return self.timing.due_text(self.batch) if self.batch is not None else ""

    def _announce_idle(self, batch: BatchRecord) -> None:
        if self.last_progress is None:      # a master that starts idle: the record has the last batch's figures
            self.last_progress = Progress(total=batch.total_count, done=batch.done_count, failed=batch.fail_count,
                                          pending=0, processing=0)
        if self._idle_announced != batch.id:
            self._idle_announced = batch.id
            log.info(idle_words(batch.id, self.timing.due_text(batch)))

    # -- opening a batch: the reset
    def open_batch(self, last: Optional[BatchRecord], opening: Optional[BatchOpening] = None) -> BatchRecord:
        """Clear the queue, open the record (its reset still to walk), start the reset (`opening`: a reparse's). The
        record keeps the reset's cursor: a master that dies mid-way leaves a batch whose reset the next one finishes."""
        opening = opening or self.opening
        log.info("opening a new batch %s", what_opens(opening, self.layout.table))
        self.leases.clear_batch()
        if not opening.is_reparse:      # (a reparse parses the tasks its archive has: no import, no prune)
            import_at_opening(self.settings, self.store, self.layout, self._heartbeat)    # SITEMAPS: new tasks first
        if opening.mode == "due":      # what is due is judged once, at the opening: a takeover judges alike
            opening = self.opening = replace(opening, due_before=time.time())
        expected = last.total_count if last is not None else 0
        batch = self.store.insert_batch(self.settings.BATCH_INTERVAL, self.settings.BATCH_INTERVAL_UNIT, expected)
        self._record_spider(batch, last)
        if self.store.keeps_openings:
            self.store.record_reset(batch.id, None, 0, opening=opening)
            batch.opening = opening.to_json()
        if not opening.is_reparse:
            remove_old_batches(self.settings, self.leases.namespace, batch.id)     # ARCHIVE_KEEP
        self.tally.set_settled(batch.id, 0, 0)
        self.rate.clear()
        self.reset = ResetWalk(self.store, self.settings.BATCH_RESET_CHUNK, batch, feeds=True)
        self._reported = time.monotonic()
        log.info("batch %d opened at %s: the reset walks `%s` in chunks of about %.0f ms; the queue is fed "
                 "from the rows already walked", batch.id, batch.batch_date, self.layout.table, CHUNK_SECONDS * 1000)
        return batch

    def _record_spider(self, batch: BatchRecord, before: Optional[BatchRecord]) -> None:
        """Keep in the record, before any of its tasks is claimed, the spider the batch opens with, judged
        against the batch before's: a changed one (or --refetch) makes the workers trust no validator in it."""
        if self.spider is None:
            return
        spider = self.spider.against(before.spider if before is not None else None, self.refetch)
        self.store.record_spider(batch.id, spider)
        batch.spider_print, self.refetch = spider.to_json(), False
        if spider.refetches:      # (a link dropped as made before would never meet the new spider either)
            self.leases.forget_earlier_requests()
            log.info(refetch_words(batch.id, spider, before, self.settings.REQUEST_FILTER_ACROSS_BATCHES))

    def go_on_resetting(self, batch: BatchRecord, going_on: Callable[[], bool], full: bool) -> bool:
        """Take the reset of `batch` WALK_BUDGET seconds further; True once it is over. A reset this master
        began feeds the queue as it goes; one it found unfinished (the master that began it stopped) is
        finished before anything else."""
        walk = self.reset
        if walk is None or walk.batch_id != batch.id or walk.after != batch.reset_position[0]:
            if batch.spider_print is None:       # the master that opened it stopped before it kept its spider
                self._record_spider(batch, next((b for b in self.store.recent_batches(2) if b.id < batch.id), None))
            walk = self.reset = ResetWalk(self.store, self.settings.BATCH_RESET_CHUNK, batch, feeds=False)
            self._reported = time.monotonic()
            log.info("batch %d: going on with its reset after id %r (%d rows walked by the master that began it); "
                     "nothing is claimed until it is over", batch.id, walk.after, walk.walked)
        walk.steps_for(WALK_BUDGET, going_on)
        self._heartbeat()
        if walk.finished:
            self._finish_reset(batch, walk)
            return True
        if not going_on():
            log.info("batch %d: reset stopped after %d rows; the next master goes on from id %r",
                     batch.id, walk.walked, walk.after)
            return False
        self._report_reset(batch, walk)
        if walk.may_claim() and self.paused_since is None:
            self.reclaim()
            self.refill(batch, upto=walk.after)
            if full:
                self.check_progress(batch, total=max(batch.total_count, walk.walked - walk.opening.kept))
        return False

    def _finish_reset(self, batch: BatchRecord, walk: ResetWalk) -> None:
        walk.finish()
        opened = walk.opening
        batch.total_count, batch.reset_cursor = walk.walked - opened.kept, None
        if self.store.keeps_openings:
            batch.opening = opened.to_json()
        self.reset = None
        seconds = time.monotonic() - walk.started
        left = f"; {opened.kept_done} done and {opened.kept_failed} failed left as they were" if opened.kept else ""
        log.info("batch %d reset: %d rows walked, %d set back to pending, in %.1f s (%.0f rows/s, chunks of %s "
                 "rows); %d tasks in the batch%s", batch.id, walk.walked_here, walk.moved, seconds, walk.rate(),
                 walk.chunk_sizes(), batch.total_count, left)

    def _report_reset(self, batch: BatchRecord, walk: ResetWalk) -> None:
        if time.monotonic() - self._reported >= RESET_REPORT_EVERY:
            self._reported = time.monotonic()
            log.info("batch %d resetting: %d rows walked (%.0f rows/s, chunks of %d rows)", batch.id, walk.walked,
                     walk.rate(), walk.pacer.size)

    # -- the batch under way
    def reclaim(self) -> None:
        expired = self.leases.reclaim_expired(ORPHAN_SCAN_LIMIT)
        if expired:
            moved = self.settler.settle(Move.REQUEUE, None, expired)
            log.warning("reclaimed %d tasks whose lease expired (holder gone or stalled): %s",
                        moved, some_of(expired))
        forgotten = self.leases.forget_if_memory_changed()
        # Orphans are tasks in processing that neither the queue nor a lease holds. Only this thread claims
        # and pushes, so right after an outage (a claim whose answer or push was lost) or a change of the
        # queue's server (its last writes lost) every one of any age is an orphan; otherwise one is waited
        # for until BATCH_LOST_TASK_STALE, in case its holder is merely slow to be seen.
        in_doubt, self.claims_in_doubt = forgotten or self.claims_in_doubt, False
        older_than = ANY_AGE if in_doubt else self.settings.BATCH_LOST_TASK_STALE
        moved = self._requeue_orphans(older_than)
        if forgotten and moved:      # (a new namespace, or a server emptied with nothing in processing: no news)
            log.warning("the queue's server in %s is not the one the last patrol saw (a restart or a failover: "
                        "its last writes may be lost): its queue and leases rebuilt from the task table, %d tasks "
                        "in processing set back to pending (a write-back of theirs is refused; they are crawled "
                        "again)", self.leases.backend_name, moved)
        elif moved:
            log.warning("reset %d tasks in processing that no queue holds (%s)", moved,
                        "their claim's answer or push lost to an outage" if in_doubt else "lost before their lease")

    def _requeue_orphans(self, older_than: float) -> int:
        moved = 0
        while stale := self.store.stale_processing(older_than, ORPHAN_SCAN_LIMIT):
            known = self.leases.known([str(task_id) for task_id in stale])
            orphans = [task_id for task_id in stale if str(task_id) not in known]
            # Some may have been written back since they were read: the move skips those.
            moved += self.settler.settle(Move.REQUEUE, None, orphans, older_than=older_than) if orphans else 0
            if len(stale) < ORPHAN_SCAN_LIMIT or len(orphans) < len(stale):
                return moved          # (a full page of orphans: there may be more behind it)
        return moved

    def refill(self, batch: BatchRecord, upto=None) -> int:
        """Claim what the queue has room for (none past id `upto` while the reset goes on); how many. An empty
        queue (a batch opening) is fed FIRST_CLAIM tasks first: the workers start on them while the rest is
        claimed (about 10 us a task: 50 ms for 5,000)."""
        self.queue_length = self.leases.pending_count()
        room = self.settings.BATCH_PUSH_LIMIT - self.queue_length
        hours = self.timing.hold_claims(sends=not batch.how_opened.is_reparse)    # CRAWL_HOURS: waiting hosts wait
        if room <= 0 or (hours is not None and not hours.claims):
            return 0
        if self.queue_length == 0 and room > FIRST_CLAIM:
            first = self._claim_and_push(batch, FIRST_CLAIM, upto)
            claimed = first if first < FIRST_CLAIM else first + self._claim_and_push(batch, room - first, upto)
        else:
            claimed = self._claim_and_push(batch, room, upto)
        self.timing.claimed(hours, claimed, resetting=upto is not None)
        return claimed

    def _claim_and_push(self, batch: BatchRecord, room: int, upto) -> int:
        rows = self.store.claim(room, upto)
        if not rows:
            return 0
        id_field = self.layout.id_field
        attempts = self.leases.count_attempts([row[id_field] for row in rows])
        limit = self.settings.BATCH_TASK_MAX_ATTEMPTS
        worn = [row[id_field] for row, n in zip(rows, attempts) if n > limit]
        for task_id in worn:
            log.error("task %s failed: leased %d times in batch %d without a write-back "
                      "(BATCH_TASK_MAX_ATTEMPTS=%d)", task_id, limit, batch.id, limit)
        if worn:
            self.settler.settle(Move.FINISH_FAILED, batch.id, worn, failures=[failures.failure(
                task_id, batch.id, f"leased {limit} times without a write-back (BATCH_TASK_MAX_ATTEMPTS={limit})",
                attempts=limit) for task_id in worn])
        fresh = [row for row, n in zip(rows, attempts) if n <= limit]
        self.leases.push(batch.id, fresh, id_field)
        self.queue_length += len(fresh)
        return len(rows)

    def _queue_dry(self, claimed: int) -> bool:
        """Nothing was left to claim and no task waits in the queue or under a lease."""
        return claimed == 0 and self.leases.queue_counts() == (0, 0)

    def check_progress(self, batch: BatchRecord, total: Optional[int] = None) -> Progress:
        """The batch's figures from the tally and the queue (no row is counted), into the record and the log.
        The tally is read first: a worker releases its leases before it adds its tasks to the tally
        (settle/settler.py), so no task is counted both settled and in flight, and only rows added
        mid-batch raise the total."""
        done, failed = self._settled(batch)
        in_flight = sum(self.leases.queue_counts())
        progress = Progress.from_counters(batch.total_count if total is None else total, done, failed, in_flight)
        self.store.update_batch(batch.id, progress, is_done=False)
        self._log_progress(batch, progress)
        waiting = self.timing.tasks_wait() and not progress.processing      # (waiting for hours is no stall)
        self.alerts.progress_checked(batch.id, progress, paused=self.paused_since is not None or waiting,
                                     rate=self.rate.per_second(), now=self.store.now(), due=self.timing.next_due(batch))
        return progress

    def _log_progress(self, batch: BatchRecord, progress: Progress) -> None:
        self.rate.add(progress.settled)
        self.last_progress = progress
        paused = f"; paused since {wall_time(self.paused_since)}" if self.paused_since is not None else ""
        log.info("批次进度 %d/%d  batch %d: done %d, failed %d, processing %d, pending %d; %.1f tasks/s, ETA %s%s",
                 progress.settled, progress.total, batch.id, progress.done, progress.failed, progress.processing,
                 progress.pending, self.rate.per_second(),
                 self.timing.eta_text(progress.total - progress.settled, self.rate.per_second()), paused)

    def _settled(self, batch: BatchRecord) -> tuple:
        """(done, failed) of the batch from its tally; a tally lost with Redis is restored from the record."""
        settled = self.tally.settled(batch.id)
        if settled is None:
            self.tally.restore_settled(batch.id, batch.done_count, batch.fail_count)
            log.warning("batch %d: its tally of settled tasks was lost (Redis restarted empty?); restored from the "
                        "batch record (%d done, %d failed) and reconciled with the table when the batch closes",
                        batch.id, batch.done_count, batch.fail_count)
            settled = self.tally.settled(batch.id) or (batch.done_count, batch.fail_count)
        return settled

    # -- closing a batch: the reconciliation
    def go_on_reconciling(self, batch: BatchRecord, claimed: int, going_on: Callable[[], bool]) -> bool:
        """The queue ran dry: when no row is left unsettled (the state index tells at once), count the table
        chunk by chunk and close the batch with those exact figures; True once closed."""
        if claimed:        # tasks came back (or were added): the batch is not over
            self.count = None
            return False
        if self.count is None:
            if self.store.unsettled_count():
                return False
            self.count = CountWalk(self.store, self.settings.BATCH_RESET_CHUNK)
        self.count.steps_for(WALK_BUDGET, going_on)
        self._heartbeat()
        if not self.count.finished:
            return False
        counted, self.count = self.count, None
        opened = batch.how_opened     # the rows its opening left settled are not the batch's
        return self.close(batch, counted.rows - opened.kept, counted.done - opened.kept_done,
                          counted.failed - opened.kept_failed)

    def close(self, batch: BatchRecord, total: int, done: int, failed: int) -> bool:
        """Close the batch with the rows counted, unless some are not settled after all."""
        if done + failed < total:
            log.info("batch %d: %d tasks came back while it was counted; it goes on", batch.id, total - done - failed)
            return False
        tallied = self._settled(batch)
        if tallied != (done, failed):
            log.info("batch %d: the tally said %d done, %d failed; the table holds %d and %d (write-backs by "
                     "holders that stopped before counting them)", batch.id, *tallied, done, failed)
        progress = Progress(total=total, done=done, failed=failed, pending=0, processing=0)
        # Every count of the batch's tasks was flushed before their write-back: the totals are complete now.
        # Kept before is_done, so that a close an outage interrupts writes them on its next try.
        counters = dict(sorted(self.counters.counts(batch.id).items()))
        self.store.record_stats(batch.id, counters)
        quality = self.judge.judge(batch, failed) if self.judge is not None else None
        outcome = quality.outcome if quality is not None else outcome_of(0, failed)
        if quality is not None:     # (before is_done: a close an outage interrupts does it again)
            relearn_flagged(self.render_choices, quality.flags, batch.id, time.time())
        self.store.record_outcome(batch.id, outcome, None if quality is None else quality.record)
        self.store.update_batch(batch.id, progress, is_done=True)
        self.tally.set_settled(batch.id, done, failed)
        self._log_progress(batch, progress)
        batch.is_done, batch.total_count, batch.done_count, batch.fail_count = True, total, done, failed
        self.leases.set_done(batch.id)
        self._idle_announced = batch.id
        log.info("batch %d finished: %d done, %d failed of %d; the next is due at %s", batch.id, done, failed, total,
                 self.timing.due_text(batch))
        for flag in quality.flags if quality is not None else ():
            log.warning("batch %d quality: %s", batch.id, flag.message)
        log.info("%s", report(batch.id, counters, 0 if quality is None else len(quality.flags)))
        self.alerts.check_failures(batch.id, done, failed)
        if quality is not None:
            self._tell_judged(batch.id, quality.figures)
        if quality is not None and quality.flags:
            self.alerts.quality_flagged(batch.id, [flag.to_json() for flag in quality.flags])
        self.outcome = outcome
        return True

    def _tell_judged(self, batch_id: int, figures: dict) -> None:
        if self.judged is None:
            return
        try:
            self.judged(batch_id, figures)
        except Exception as e:    # the metrics are told what they can; the batch is closed whatever they say
            log.warning("batch %d: its quality could not be handed to /metrics: %s: %s", batch_id, type(e).__name__, e)

    def once_exit_code(self) -> ExitCode:
        """What a once-mode run ends with (docs/architecture.md, Exit codes): 65 when the batch it closed was
        flagged, 3 when (unflagged) some of its tasks failed (the command then ends with 1), else 0 (clean, or nothing was due)."""
        return {FLAGGED: ExitCode.DATAERR, FAILED: ExitCode.TASKS_FAILED}.get(self.outcome or "", ExitCode.OK)


def _keep_going(stop: StopFlag, keeper: Optional[LockKeeper]) -> Callable[[], bool]:
    """Whether a walk may take another chunk: not stopped, and the master lock still ours."""
    return lambda: not stop.is_set() and (keeper is None or keeper.holds())
