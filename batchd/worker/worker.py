"""The worker: lease a task, run its requests through the spider, hand items and the
task's outcome to the pipeline.

Threads of one worker process, each started under the thread guard (batchd/threads.py):
- SPIDER_THREAD_COUNT fetch threads, each holding at most one task at a time;
- the lander (pipeline.py): flushes items and writes tasks back;
- the keeper: renews the leases of every task not yet written back.
The thread that called `run()` watches them: it beats the heart (only while every thread
makes progress), enforces TASK_TIMEOUT, and decides when the worker is finished.

TASK_TIMEOUT: a task still being processed after it is failed at once (a line names it), its
lease is no longer renewed, and its thread is interrupted with an asynchronous exception while
it runs the spider's code. A thread that has not come back TIMEOUT_GRACE later (stuck in C
code, say) is given up on: the worker stops warm and exits 70, so its supervisor replaces it.

Shutdown order (warm stop): the fetch threads stop leasing and finish the task they
hold; then the lander flushes what is buffered and writes back what is settled; the
keeper renews leases until the lander is done, then stops. A cold stop (second
signal, or STOP_TIMEOUT passed), or a stop during an outage, abandons what is left:
those tasks are not marked done, and their leases are given back to the master at once
when the queue can be reached (else they expire).
"""
import collections
import ctypes
import itertools
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from contextlib import contextmanager
from typing import Any, Callable, Optional

from ..settle import failures
from ..config import Settings
from ..errors import BackendUnavailable, BatchdError, ConfigError, ExitCode
from ..download.downloader import Downloader
from ..http import Request, RequestFailed
from .item_checks import BadItem
from ..download.chain import ChainContext, Counts, NoCounts, chain_from_settings
from ..process.ledger import LocalLedger
from ..process.lifecycle import Backoff, StopFlag
from ..process.outages import OutageWatch, retry_through_outages
from ..model import TaskLayout, task_key
from .prefetch import LeasePrefetch
from .pipeline import Pipeline, TaskRun, count_nothing
from ..backends.ports import (BatchCounters, BatchStore, BatchTally, HostRates, LeaseQueue, NamespaceRecord,
                              SeenFilter, WakeChannel, claim_namespace)
from ..schedule import is_due
from ..process.alerts import Alerts
from ..settle.stats import BatchStats, StatsFlusher
from ..process.systemd import set_thread_role, task_log_fields
from ..process.threads import Heart, check_in, guard, start_thread

log = logging.getLogger("batchd.worker")

SLOTS_PER_THREAD = 8         # tasks a thread may leave waiting for their items' flush, beyond a flush's worth
FLUSH_SLOTS_MOST = 2048      # slots for a flush's worth of tasks, at most (each is 80 bytes of shared memory)
IDLE_POLL_CAP = 0.1         # an idle thread looks for a task at least this often (prefetch.py: one round trip)
WATCH_EVERY = 0.2            # the watching thread's rhythm: heartbeat, timeouts, the end
EMPTY_WAKE_GAP = 5.0         # an idle worker reminds the master at most this often
ERRORS_REMEMBERED = 10000    # distinct (task, error) pairs whose traceback was logged


class TaskTimedOut(BaseException):
    """Raised inside a fetch thread running the spider's code past TASK_TIMEOUT. A BaseException, so
    that a spider's `except Exception` does not swallow it."""


class WorkerRecycled(BatchdError):
    """A task's thread would not come back after TASK_TIMEOUT, or a thread of the worker died."""

    exit_code = ExitCode.SOFTWARE


_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)


def _interrupt(run: TaskRun) -> bool:
    """Raise TaskTimedOut in the run's thread if it is inside the spider's code now."""
    with run.lock:
        if run.in_user_code:
            return _set_async_exc(run.thread_ident, ctypes.py_object(TaskTimedOut)) == 1
    return False


@contextmanager
def _user_code(run: TaskRun):
    """The spider's code runs inside this, where TASK_TIMEOUT may interrupt it. An interruption that
    arrives as the spider's code returns is cancelled on the way out and raised here instead, at a
    known place, so that it never lands in batchd's own code (holding a lock, say)."""
    try:
        if run.timed_out:
            raise TaskTimedOut()
        with run.lock:
            run.in_user_code = True
        yield
    finally:
        with run.lock:
            run.in_user_code = False
            _set_async_exc(run.thread_ident, ctypes.py_object())   # NULL: cancel a pending one
    if run.timed_out:
        raise TaskTimedOut()


@contextmanager
def _outside_user_code(run: TaskRun):
    """batchd's code called from the spider's (update_task): no interruption lands in it."""
    with run.lock:
        inside, run.in_user_code = run.in_user_code, False
        _set_async_exc(run.thread_ident, ctypes.py_object())
    try:
        yield
    finally:
        with run.lock:
            run.in_user_code = inside


SPIDER_HOOKS = ("download_midware", "validate")     # what the downloader may call for each attempt


def overridden_hooks(spider) -> frozenset:
    """The SPIDER_HOOKS the spider's class overrides (BatchSpider marks its defaults `does_nothing`)."""
    return frozenset(name for name in SPIDER_HOOKS
                     if not getattr(getattr(type(spider), name, None), "does_nothing", False))


def downloader_for(settings: Settings, threads: int, sleep, host_rates=None, spider=None,
                   stats: Counts = NoCounts(), metrics=None) -> Downloader:
    """The Downloader the settings describe, with the DOWNLOADER_MIDDLEWARES chain; TLS_VERIFY off is said
    once, here."""
    if not settings.TLS_VERIFY:
        log.warning("TLS_VERIFY is off: the certificates of https sites are not checked")
    downloader = Downloader(timeout=settings.REQUEST_TIMEOUT, pool_size=threads,
                            download_timeout=settings.DOWNLOAD_TIMEOUT, maxsize=settings.DOWNLOAD_MAXSIZE,
                            headers=settings.DEFAULT_REQUEST_HEADERS, user_agents=settings.USER_AGENT,
                            max_redirects=settings.REDIRECT_MAX_TIMES, warnsize=settings.DOWNLOAD_WARNSIZE,
                            verify=settings.TLS_VERIFY)
    downloader.use(chain_from_settings(ChainContext(
        settings, spider=spider, stats=stats, sleep=sleep, download=downloader.download_once,
        host_rates=host_rates, threads=threads, metrics=metrics)))
    return downloader


def ledger_slots(settings: Settings) -> int:
    """Ledger slots of a worker: a task holds one from its lease until its items have landed. Enough for a
    whole flush's worth of tasks (ITEM_FLUSH_SIZE, one item each) besides what the threads have in hand,
    so threads do not stall for slots between two flushes."""
    return settings.SPIDER_THREAD_COUNT * SLOTS_PER_THREAD + min(settings.ITEM_FLUSH_SIZE, FLUSH_SLOTS_MOST)


class Worker:
    def __init__(self, spider, settings: Settings, layout: TaskLayout, store: BatchStore, leases: LeaseQueue,
                 wake: WakeChannel, seen: SeenFilter, namespaces: NamespaceRecord, tally: BatchTally,
                 counters: BatchCounters, ledger=None, name: str = "worker", keep_alive: bool = True,
                 host_rates: Optional[HostRates] = None, count: Callable[[str, int, Any], None] = count_nothing,
                 metrics=None):
        self.spider, self.settings, self.layout, self.store = spider, settings, layout, store
        self.host_rates = host_rates
        self.leases, self.wake, self.seen, self.namespaces, self.tally = leases, wake, seen, namespaces, tally
        self.name, self.keep_alive, self.count = name, keep_alive, count
        self.thread_count = settings.SPIDER_THREAD_COUNT
        self.ledger = ledger or LocalLedger(ledger_slots(settings))
        self.lease_seconds = settings.BATCH_LOST_TASK_STALE
        # Unique per worker (several may share a process), found by its process's prefix.
        self.token_prefix = f"{worker_token_prefix(os.getpid())}{uuid.uuid4().hex[:8]}:"
        self._lease_numbers = itertools.count(1)
        # The batch counters: what the threads count (stats.inc), flushed by the lander under this worker's name;
        # with METRICS_PORT (a WorkerMetrics), the same calls count for Prometheus too.
        self.metrics = metrics
        self.stats = BatchStats() if metrics is None else metrics.batch_stats()
        self.stats_flusher = StatsFlusher(self.stats, counters, self.token_prefix, settings.STATS_FLUSH_INTERVAL)
        self._overridden_hooks = overridden_hooks(spider)
        self.alerts = Alerts(settings, leases.namespace)       # items dumped, from the lander
        self.prefetch = LeasePrefetch(leases, self.lease_seconds, self._next_token, self.ledger.free_slots)
        # The master is woken to refill once half the queue is leased: its refill of that half (about 10 us
        # a task) is done before workers lease the other half unless they outrun the master itself. At a
        # quarter, the refill of three quarters had to beat the last quarter: workers waited past about a
        # third of the master's rate.
        self._low_water = max(1, settings.BATCH_PUSH_LIMIT // 2)
        self._last_empty_wake = 0.0
        self._leasing = threading.Event()
        self._in_hand: dict = {}                # fetch thread ident -> the TaskRun it is processing
        self._given_up_threads: set = set()     # idents of fetch threads stuck past TASK_TIMEOUT
        self._failure: Optional[tuple] = None  # (reason, exit code) that ends this worker
        self.pipeline: Optional[Pipeline] = None
        self.downloader: Optional[Downloader] = None
        self.heart: Callable = lambda: None
        self.watch = OutageWatch()

    # The pipeline and the downloader exist while the worker serves (_serve makes them); every thread that
    # uses them runs only then.
    @property
    def _pipeline(self) -> Pipeline:
        if self.pipeline is None:
            raise RuntimeError(f"{self.name} has no pipeline before it serves")
        return self.pipeline

    @property
    def _downloader(self) -> Downloader:
        if self.downloader is None:
            raise RuntimeError(f"{self.name} has no downloader before it serves")
        return self.downloader

    # -- the loop the supervisor (or start()) runs
    def run(self, stop: StopFlag, heartbeat: Callable = lambda: None) -> None:
        """Serve until stopped (keep_alive) or until the batch is done. A worker that is not kept
        alive is a once-mode run: a store it cannot reach at start is final (exit 69), an outage
        later is waited out for up to OUTAGE_TIMEOUT."""
        self.heart = Heart(heartbeat, self.settings.CHILD_TIMEOUT / 2)
        self.watch = OutageWatch({self.store.backend_name: self.store.ping, self.leases.backend_name: self.leases.ping},
                                 listener=self.ledger.set_outages, beat=self.heart)
        if not self._open(stop):
            return
        remove_hook = guard.on_fatal(lambda reason, code: self._fail(stop, reason, code))
        try:
            self._serve(stop)
        finally:
            remove_hook()
        if self._failure is not None:
            reason, code = self._failure
            raise (ConfigError(reason) if code == ExitCode.CONFIG else WorkerRecycled(reason))

    def _open(self, stop: StopFlag) -> bool:
        """Open the store and claim the namespace for it: in once mode an outage here is final (exit 69),
        a resident worker waits it out; False if stopped meanwhile."""
        def start() -> bool:
            self.store.open(self.layout)
            claim_namespace(self.namespaces, self.store, self.layout, self.leases.namespace, self.name)
            return True
        return start() if not self.keep_alive else retry_through_outages(start, self.watch, stop) is not None

    def _serve(self, stop: StopFlag) -> None:
        self.downloader = downloader_for(self.settings, self.thread_count, stop.wait_cold, self.host_rates,
                                         self.spider, self.stats, self.metrics)
        table, kind = self.layout.item_destination
        self.pipeline = Pipeline(self.store, self.leases, self.tally, self.ledger, self.settings, table, kind,
                                 self.watch, on_written=self._after_write_back, count=self._count,
                                 stats_flusher=self.stats_flusher, alerts=self.alerts)
        self._pipeline.start()
        keeper_stop = threading.Event()
        keeper = start_thread(self._keep_leases, "batchd-keeper", keeper_stop)
        self._leasing.set()
        fetchers = [start_thread(self._fetch_loop, f"batchd-fetch-{n}", stop, n)
                    for n in range(1, self.thread_count + 1)]
        log.info("%s started: %d threads, %s, %s", self.name, self.thread_count, self.store.describe(),
                 self.leases.describe())
        try:
            self._watch_until_finished(stop, fetchers)
        finally:
            self._shut_down(stop, fetchers, keeper, keeper_stop)

    def _count(self, name: str, n: int, batch_id) -> None:
        """The pipeline's figures: into the batch's counters, and to whoever made this worker (`count`)."""
        self.stats.inc(name, n, batch_id)
        self.count(name, n, batch_id)

    def _fail(self, stop: StopFlag, reason: str, code: int) -> None:
        """A thread of this worker died (the guard's hook, in-process): stop cold, report `code`."""
        self._failure = self._failure or (reason, code)
        stop.request_cold()

    def _watch_until_finished(self, stop: StopFlag, fetchers: list) -> None:
        """The watching thread: heartbeat, TASK_TIMEOUT, and the end of the worker."""
        while not stop.wait(WATCH_EVERY):
            check_in()          # (only where this loop runs in a guarded thread: an in-process worker)
            self.heart()
            self._enforce_task_timeout(stop)
            if not any(t.is_alive() for t in fetchers):
                log.error("%s: every fetch thread has ended; stopping", self.name)
                return
            if not self.keep_alive and self._once_run_over():
                log.info("%s: the queue is empty and the batch is done; exiting (keep_alive=False)", self.name)
                return

    def _once_run_over(self) -> bool:
        """A once-mode worker ends when its batch is done, or gives up on an outage (whichever of its threads
        meets it) that outlasts OUTAGE_TIMEOUT: BackendUnavailable, exit 69."""
        limit = self.settings.OUTAGE_TIMEOUT
        for outage in self.watch.outages():
            if time.monotonic() - outage.since > limit:
                raise BackendUnavailable(f"{outage.reason} (down for more than OUTAGE_TIMEOUT={limit:g} s)",
                                         outage.backend)
        try:
            return self._nothing_left()
        except BackendUnavailable as e:
            self.watch.failed(e)
            return False

    def _nothing_left(self) -> bool:
        """Nothing in hand, nothing queued, and the batch done with no new one due (a due batch the
        master has not opened yet still has work for us, whatever the last batch's done flag says)."""
        if self._pipeline.in_flight() or self.leases.pending_count() or not self.leases.is_done():
            return False
        return not is_due(self.store.last_batch(), self.store.now(), self.settings)

    def _shut_down(self, stop: StopFlag, fetchers: list, keeper, keeper_stop) -> None:
        deadline = time.monotonic() + self.settings.STOP_TIMEOUT
        self._leasing.clear()
        for thread in fetchers:
            while (thread.is_alive() and thread.ident not in self._given_up_threads and not stop.cold
                   and time.monotonic() < deadline):
                check_in()
                self.heart()
                self._enforce_task_timeout(stop)
                thread.join(WATCH_EVERY)
        abandon = stop.cold or time.monotonic() >= deadline
        try:
            with guard.waiting(self.settings.STOP_TIMEOUT + 10):
                landed = self._pipeline.stop(max(0.0, deadline - time.monotonic()), abandon=abandon)
        finally:
            keeper_stop.set()
            keeper.join(5)
            self._downloader.close()
        self._give_back_leases()
        self._flush_stats_at_stop()
        self.alerts.close()
        if landed and not abandon:
            totals = self.ledger.totals()
            log.info("%s stopped: %d tasks done, %d failed, %d items stored", self.name,
                     totals["done"], totals["failed"], totals["items"])

    def _give_back_leases(self) -> None:
        """Tasks this worker will not write back: the master requeues them at its next patrol."""
        leases = self._pipeline.unwritten_leases() + self.prefetch.drain()
        if not leases:
            return
        try:
            given = self.leases.give_back(leases)
        except (BackendUnavailable, ConfigError) as e:
            log.warning("could not give back %d leases (%s): their tasks come back when the leases expire",
                        len(leases), e)
            return
        log.info("gave back %d leases: the master requeues their tasks (not marked done) at its next patrol",
                 given)
        self._wake_master()

    def _flush_stats_at_stop(self) -> None:
        """The last counts (of tasks given back, say) leave with the worker; a backend down now loses them,
        and says how many."""
        try:
            self.stats_flusher.flush()
        except (BackendUnavailable, ConfigError) as e:
            for batch_id, counts in sorted(self.stats_flusher.unsent().items()):
                log.warning("batch %d: counters not flushed at stop (%s), lost: %s", batch_id, e,
                            ", ".join(f"{name} {n}" for name, n in sorted(counts.items())))

    # -- update_task() and failed_request() of the spider, for the task this worker holds
    def settle(self, task_id, ok: bool) -> bool:
        """update_task() for a task one of this worker's threads is processing: hand it to the gate (done
        waits for the task's items to land). False when this worker does not hold the task."""
        run = self._holding(task_id)
        if run is None:
            return False
        with _outside_user_code(run):
            self._pipeline.record_outcome(run, ok, None if ok else self._failure_at_hand(run))
        return True

    @staticmethod
    def _failure_at_hand(run: TaskRun):
        """Why update_task(ok=False) fails the task: the request whose failed_request() or errback is
        running, else the spider's own word."""
        failed = run.last_failure
        if failed is None:
            return failures.marked(run.task_id, run.lease.batch_id)
        return failures.of_request(run.task_id, run.lease.batch_id, failed)

    def failure_reason(self, task_id, response_or_exception) -> Optional[str]:
        """The downloader's reason for the failure failed_request() was given for a task held here."""
        run = self._holding(task_id)
        failure = run.last_failure if run is not None else None
        if failure is not None and failure.response_or_exception is response_or_exception:
            return failure.reason
        return None

    def _holding(self, task_id) -> Optional[TaskRun]:
        key = task_key(task_id)
        return next((run for run in list(self._in_hand.values()) if run.lease.key == key), None)

    # -- TASK_TIMEOUT
    def _enforce_task_timeout(self, stop: StopFlag) -> None:
        limit = self.settings.TASK_TIMEOUT
        if not limit:
            return
        now = time.monotonic()
        for run in list(self._in_hand.values()):
            overdue = now - run.started - limit
            if overdue > 0 and not run.timed_out:
                self._time_out(run, limit)
            elif run.timed_out and overdue > timeout_grace(limit) and run.thread_ident not in self._given_up_threads:
                self._give_up_thread(run, limit, stop)

    def _time_out(self, run: TaskRun, limit: float) -> None:
        log.error("task %s failed: still being processed after TASK_TIMEOUT=%g s; its thread is interrupted",
                  run.task_id, limit)
        run.timed_out = True
        self._pipeline.record_outcome(run, ok=False, failure=failures.failure(
            run.task_id, run.lease.batch_id, f"still being processed after TASK_TIMEOUT={limit:g} s", url=run.url,
            error_class=TaskTimedOut.__name__))
        _interrupt(run)

    def _give_up_thread(self, run: TaskRun, limit: float, stop: StopFlag) -> None:
        log.critical("%s: the thread of task %s has not come back %g s after TASK_TIMEOUT=%g s (stuck outside "
                     "Python code?); this worker stops warm and exits %d to be replaced", self.name, run.task_id,
                     timeout_grace(limit), limit, ExitCode.SOFTWARE)
        self._given_up_threads.add(run.thread_ident)
        guard.forget(run.thread_ident)
        self._failure = self._failure or (f"a task's thread did not come back after TASK_TIMEOUT={limit:g} s",
                                          ExitCode.SOFTWARE)
        stop.request()

    # -- the keeper thread
    def _keep_leases(self, keeper_stop: threading.Event) -> None:
        renew_every = max(0.2, self.lease_seconds / 4)
        while True:
            check_in(within=renew_every + 1)
            if keeper_stop.wait(renew_every):
                return
            try:
                self.leases.renew(self._pipeline.held_leases() + self.prefetch.waiting(), self.lease_seconds)
            except BackendUnavailable as e:
                self.watch.failed(e)      # the next renewal is the retry: a lease outlives a short outage
                continue
            self.watch.ok(self.leases.backend_name)

    # -- a fetch thread
    def _fetch_loop(self, stop: StopFlag, number: int) -> None:
        set_thread_role(f"{self.name}.{number}" if self.thread_count > 1 else self.name)
        idle, outage = Backoff(base=0.05, cap=IDLE_POLL_CAP), Backoff()
        while self._leasing.is_set() and not stop.is_set():
            check_in(within=IDLE_POLL_CAP + 1)
            slot = self.ledger.acquire_slot()
            if slot is None:
                self._pipeline.ask_flush()     # slots are held by tasks waiting for their items
                stop.wait(0.05)
                continue
            try:
                lease = self.prefetch.take()
            except BackendUnavailable as e:
                self.ledger.release_slot(slot)
                self.watch.failed(e)
                self.watch.wait(outage.next_delay(), e.backend, stop)
                continue
            outage.reset()
            self.watch.ok(self.leases.backend_name)
            if lease is None:
                self.ledger.release_slot(slot)
                if not self._in_hand:        # nothing left to wait for: the last items need not wait either
                    self._pipeline.flush_when_idle()
                self._wake_master_when_empty()
                stop.wait(idle.next_delay())
                continue
            idle.reset()
            self._serve_lease(lease, slot, stop)

    def _serve_lease(self, lease, slot: int, stop: StopFlag) -> None:
        if lease.queue_left == self._low_water:
            self._wake_master()
        self.ledger.label(slot, lease.key)
        self.ledger.note_served()
        if self.stats.working_on(lease.batch_id):
            self.stats_flusher.due_now()      # what is left of the last batch's counts goes at once
            self._downloader.batch_started(lease.batch_id)     # the middlewares start afresh (robots.txt...)
        run = TaskRun(lease=lease, slot=slot, thread_ident=threading.get_ident())
        self._pipeline.track(run)
        limit = self.settings.TASK_TIMEOUT
        # The task may take up to its timeout and the grace: a wait by design, not a stall.
        check_in(within=limit + timeout_grace(limit) + 1 if limit else float("inf"))
        self._in_hand[run.thread_ident] = run
        try:
            with task_log_fields(self.leases.namespace, lease.batch_id, run.task_id):
                self.process(run, stop)
        finally:
            del self._in_hand[run.thread_ident]

    def _next_token(self) -> str:
        return f"{self.token_prefix}{next(self._lease_numbers)}"

    def _wake_master_when_empty(self) -> None:
        if time.monotonic() - self._last_empty_wake > EMPTY_WAKE_GAP:
            self._last_empty_wake = time.monotonic()
            self._wake_master()

    def _wake_master(self) -> None:
        try:
            self.wake.wake_master()
        except BackendUnavailable:
            pass    # the master patrols on its own timer anyway

    def _after_write_back(self, runs: list) -> None:
        """The last write-backs of a batch may finish it: let the master see it now."""
        try:
            if self.leases.pending_count() == 0:
                self._wake_master()
        except BackendUnavailable:
            pass

    # -- one task
    def process(self, run: TaskRun, stop: StopFlag) -> None:
        task = run.lease.task
        self._downloader.forget_cookies()
        try:
            with _user_code(run):
                produced = self._as_requests(self.spider.task_requests(task), "task_requests")
            pending = collections.deque(produced)
            while pending and not stop.cold:
                pending.extend(self._run_request(run, pending.popleft(), task))
        except TaskTimedOut:
            pass                      # failed and logged by the watching thread already
        except BadItem as e:
            log.error("task %s failed: %s", run.task_id, e)
            self._fail_with(run, e)
        except ConfigError as e:     # an Item class its table cannot take: no task of it could succeed
            log.critical("%s: %s; this worker stops (task %s is given back)", self.name, e, run.task_id)
            self._fail(stop, str(e), ExitCode.CONFIG)
        except Exception as e:   # the user's code failed: this task fails, the worker carries on
            log.error("task %s failed: %s: %s", run.task_id, type(e).__name__, e,
                      exc_info=_first_time((self.leases.namespace, run.lease.batch_id, str(run.task_id)), e))
            self._fail_with(run, e)
        finally:
            if stop.cold:
                log.info("task %s abandoned at a cold stop; its lease is given back", run.task_id)
            self._pipeline.finish_requests(run)

    def _fail_with(self, run: TaskRun, error: Exception) -> None:
        self._pipeline.record_outcome(run, ok=False, failure=failures.of_exception(
            run.task_id, run.lease.batch_id, error, url=run.url))

    def _run_request(self, run: TaskRun, request: Request, task: dict) -> list:
        """Download one request and run its callback (its errback if it failed); returns the follow-ups."""
        if self._is_duplicate(run, request):
            return []
        request_seq = run.next_request_seq()
        run.url = request.url
        try:
            response = self._downloader.fetch(request, *self._spider_hooks(run))
        except RequestFailed as failure:
            run.last_failure = failure
            try:
                return self._run_errback(run, request, request_seq, failure, task)
            finally:
                run.last_failure = None
        callback = self._spider_method(request.callback or self.spider.parse)
        with _user_code(run):
            produced = callback(request, response, task, **request.cb_kwargs)
        return self._take(run, request_seq, callback, produced)

    def _run_errback(self, run: TaskRun, request: Request, request_seq: int, failure: RequestFailed,
                     task: dict) -> list:
        """The request's errback, else the spider's failed_request: with the failure at hand, so that an
        update_task(ok=False) they call records it."""
        if request.errback is None:
            with _user_code(run):
                self.spider.failed_request(request, failure.response_or_exception, task)
            return []
        errback = self._spider_method(request.errback)
        with _user_code(run):
            produced = errback(request, failure.response_or_exception, task)
        return self._take(run, request_seq, errback, produced)

    def _spider_hooks(self, run: TaskRun) -> tuple:
        """The spider's download_midware and validate for the downloader, run as the spider's code; None
        for one it does not override (nothing to call for each attempt)."""
        def as_spider_code(method):
            def call(*args):
                with _user_code(run):
                    return method(*args)
            return call

        return tuple(as_spider_code(getattr(self.spider, name)) if name in self._overridden_hooks else None
                     for name in SPIDER_HOOKS)

    def _take(self, run: TaskRun, request_seq: int, callback, produced) -> list:
        """What a callback or errback produced: its items to the pipeline, its Requests returned."""
        follow_ups, item_seq = [], 0
        for result in self._each(run, produced):
            if isinstance(result, Request):
                follow_ups.append(result)
            elif isinstance(result, Mapping):      # a dict, or a batchd.Item
                self._pipeline.add_item(run, request_seq, item_seq, result)
                item_seq += 1
            elif result is not None:
                raise TypeError(f"{getattr(callback, '__name__', callback)} yielded a {type(result).__name__}; "
                                "yield dicts or batchd.Items (items) or Requests")
        return follow_ups

    @staticmethod
    def _each(run: TaskRun, produced):
        """What a callback produced, one by one, each step of its generator run as the spider's code."""
        if produced is None:
            return
        iterator = iter(produced)
        while True:
            with _user_code(run):
                try:
                    result = next(iterator)
                except StopIteration:
                    return
            yield result

    def _spider_method(self, callback):
        """A callback or errback given as the name of a method of the spider, or as a callable."""
        return getattr(self.spider, callback) if isinstance(callback, str) else callback

    def _is_duplicate(self, run: TaskRun, request: Request) -> bool:
        if not self.settings.REQUEST_FILTER_ENABLE or request.dont_filter:
            return False
        if self.seen.first_seen(run.lease.batch_id, request.fingerprint()):
            return False
        log.debug("task %s: %s dropped as a duplicate", run.task_id, request)
        return True

    @staticmethod
    def _as_requests(produced, where: str) -> list:
        if produced is None:
            return []
        if isinstance(produced, Request):
            return [produced]
        requests = list(produced)
        for request in requests:
            if not isinstance(request, Request):
                raise TypeError(f"{where} produced a {type(request).__name__}; it must yield Requests")
        return requests


_logged_errors: set = set()
_logged_errors_lock = threading.Lock()


def _first_time(task: tuple, error: Exception) -> bool:
    """Whether this task (namespace, batch, id) has not failed with this error before in this process:
    its traceback is logged once, not at every attempt."""
    key = task + (type(error).__name__, str(error))
    with _logged_errors_lock:
        if key in _logged_errors:
            return False
        if len(_logged_errors) >= ERRORS_REMEMBERED:
            _logged_errors.clear()
        _logged_errors.add(key)
        return True


def timeout_grace(limit: float) -> float:
    """How long a thread interrupted by TASK_TIMEOUT may take to come back before the worker is
    recycled: a tenth of the timeout, between 2 and 30 s."""
    return max(2.0, min(30.0, limit / 10))


def worker_token_prefix(pid: int) -> str:
    """The start of every lease token of a worker process: its supervisor gives back a dead worker's
    leases by it (`expire_leases_of`)."""
    return f"{socket.gethostname()}:{pid}:"
