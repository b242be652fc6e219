"""The worker: lease a task, run its requests through the spider, hand items and the
task's outcome to the pipeline.

Threads of one worker process:
- SPIDER_THREAD_COUNT fetch threads, each holding at most one task at a time;
- the lander (pipeline.py): flushes items and writes tasks back;
- the keeper: renews the leases of every task not yet written back, and beats.

Shutdown order (warm stop): the fetch threads stop leasing and finish the task they
hold; then the lander flushes what is buffered and writes back what is settled; the
keeper renews leases until the lander is done, then stops. A cold stop (second
signal, or STOP_TIMEOUT passed) abandons what is left: those tasks stay in processing
and come back to another worker when their leases expire.
"""
import collections
import itertools
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Callable, Optional

from .errors import BackendUnavailable
from .http import Downloader, Request, RequestFailed
from .ledger import LocalLedger
from .lifecycle import Backoff, StopFlag, until_available
from .pipeline import Pipeline, TaskRun
from .schedule import is_due
from .systemd import set_thread_role

log = logging.getLogger("batchd.worker")

SLOTS_PER_THREAD = 8         # tasks a thread may leave waiting for their items' flush
IDLE_POLL_CAP = 1.0
KEEPER_BEAT = 1.0
EMPTY_WAKE_GAP = 5.0         # an idle worker reminds the master at most this often

_processing = threading.local()


def current_run() -> Optional[TaskRun]:
    """The task this thread is processing, if it is a worker's fetch thread inside a task."""
    return getattr(_processing, "run", None)


def settle_current_task(task_id, ok: bool) -> bool:
    """update_task() from inside the processing of that very task: hand it to the gate.
    False when this thread is not processing that task (the caller writes at once)."""
    run = current_run()
    if run is None or str(run.task_id) != str(task_id):
        return False
    _processing.pipeline.record_outcome(run, ok)
    return True


class Worker:
    def __init__(self, spider, settings, store, queue, ledger=None, name: str = "worker",
                 keep_alive: bool = True):
        self.spider, self.settings, self.store, self.queue = spider, settings, store, queue
        self.name, self.keep_alive = name, keep_alive
        self.thread_count = settings.SPIDER_THREAD_COUNT
        self.ledger = ledger or LocalLedger(self.thread_count * SLOTS_PER_THREAD)
        self.lease_seconds = settings.BATCH_LOST_TASK_STALE
        self.token_prefix = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._lease_numbers = itertools.count(1)
        self._low_water = max(1, settings.BATCH_PUSH_LIMIT // 4)
        self._last_empty_wake = 0.0
        self._leasing = threading.Event()
        self._outage_lock = threading.Lock()
        self._outage_since: Optional[float] = None
        self.pipeline: Optional[Pipeline] = None
        self.downloader: Optional[Downloader] = None

    # -- the loop the supervisor (or start()) runs
    def run(self, stop: StopFlag, heartbeat: Callable = lambda: None) -> None:
        """Serve until stopped (keep_alive) or until the batch is done. A worker that is not kept
        alive is a once-mode run: a store it cannot reach at start is final (exit 69)."""
        if until_available(lambda: self.store.open(self.spider.layout) or True, stop, heartbeat,
                           once=not self.keep_alive, what=self.store.describe()) is None:
            return
        self.downloader = Downloader(max_retry_times=self.settings.SPIDER_MAX_RETRY_TIMES,
                                     timeout=self.settings.REQUEST_TIMEOUT, pool_size=self.thread_count,
                                     sleep=stop.wait_cold)
        table, kind = self.spider.layout.item_destination
        self.pipeline = Pipeline(self.store, self.queue, self.ledger, self.settings, table, kind,
                                 on_written=self._after_write_back)
        self.pipeline.start()
        keeper_stop = threading.Event()
        keeper = self._start_thread(self._keep_leases, "batchd-keeper", keeper_stop, heartbeat)
        self._leasing.set()
        fetchers = [self._start_thread(self._fetch_loop, f"batchd-fetch-{n}", stop, n)
                    for n in range(1, self.thread_count + 1)]
        log.info("%s started: %d threads, %s, %s", self.name, self.thread_count, self.store.describe(),
                 getattr(self.queue, "describe", lambda: "in-process queue")())
        try:
            self._wait_until_finished(stop, fetchers)
        finally:
            self._shut_down(stop, fetchers, keeper, keeper_stop)

    def _start_thread(self, target, name, *args) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        return thread

    def _wait_until_finished(self, stop: StopFlag, fetchers: list) -> None:
        while not stop.wait(0.2):
            if not any(t.is_alive() for t in fetchers):
                log.error("%s: every fetch thread has ended; stopping", self.name)
                return
            if not self.keep_alive and self._nothing_left():
                log.info("%s: the queue is empty and the batch is done; exiting (keep_alive=False)", self.name)
                return

    def _nothing_left(self) -> bool:
        """Nothing in hand, nothing queued, and the batch done with no new one due (a due batch the
        master has not opened yet still has work for us, whatever the last batch's done flag says)."""
        try:
            if self.pipeline.in_flight() or self.queue.pending_count() or not self.queue.is_done():
                return False
            return not is_due(self.store.last_batch(), self.store.now(), self.settings)
        except BackendUnavailable:
            return False

    def _shut_down(self, stop: StopFlag, fetchers: list, keeper, keeper_stop) -> None:
        deadline = time.monotonic() + self.settings.STOP_TIMEOUT
        self._leasing.clear()
        for thread in fetchers:
            while thread.is_alive() and not stop.cold and time.monotonic() < deadline:
                thread.join(0.2)
        abandon = stop.cold or time.monotonic() >= deadline
        try:
            landed = self.pipeline.stop(max(0.0, deadline - time.monotonic()), abandon=abandon)
        finally:
            keeper_stop.set()
            keeper.join(5)
            self.downloader.close()
        if landed and not abandon:
            totals = self.ledger.totals()
            log.info("%s stopped: %d tasks done, %d failed, %d items stored", self.name,
                     totals["done"], totals["failed"], totals["items"])

    # -- the keeper thread
    def _keep_leases(self, keeper_stop: threading.Event, heartbeat: Callable) -> None:
        renew_every = max(0.2, self.lease_seconds / 4)
        last_renew = time.monotonic()
        while not keeper_stop.wait(min(KEEPER_BEAT, renew_every)):
            heartbeat()
            self.ledger.beat()
            if time.monotonic() - last_renew >= renew_every:
                last_renew = time.monotonic()
                try:
                    self.queue.renew(self.pipeline.held_leases(), self.lease_seconds)
                except BackendUnavailable as e:
                    log.warning("lease renewal failed: %s", e)

    # -- a fetch thread
    def _fetch_loop(self, stop: StopFlag, number: int) -> None:
        set_thread_role(f"{self.name}.{number}" if self.thread_count > 1 else self.name)
        idle, outage = Backoff(base=0.05, cap=IDLE_POLL_CAP), Backoff()
        while self._leasing.is_set() and not stop.is_set():
            slot = self.ledger.acquire_slot()
            if slot is None:
                self.pipeline.ask_flush()     # slots are held by tasks waiting for their items
                stop.wait(0.05)
                continue
            try:
                lease = self.queue.lease(self._next_token(), self.lease_seconds)
            except BackendUnavailable as e:
                self.ledger.release_slot(slot)
                self._lease_outage(e)
                stop.wait(outage.next_delay())
                continue
            outage.reset()
            self._lease_outage(None)
            if lease is None:
                self.ledger.release_slot(slot)
                self._wake_master_when_empty()
                stop.wait(idle.next_delay())
                continue
            idle.reset()
            if lease.queue_left == self._low_water:
                self._wake_master()
            self.ledger.label(slot, lease.key)
            run = TaskRun(lease=lease, slot=slot)
            self.pipeline.track(run)
            self.process(run, stop)

    def _lease_outage(self, error: Optional[BackendUnavailable]) -> None:
        """One line when leasing starts failing and one when it works again, for all the threads."""
        with self._outage_lock:
            if error is not None and self._outage_since is None:
                self._outage_since = time.monotonic()
                log.warning("cannot lease tasks: %s; every thread retries with backoff", error)
            elif error is None and self._outage_since is not None:
                log.info("leasing works again after %.0f s", time.monotonic() - self._outage_since)
                self._outage_since = None

    def _next_token(self) -> str:
        return f"{self.token_prefix}:{next(self._lease_numbers)}"

    def _wake_master_when_empty(self) -> None:
        if time.monotonic() - self._last_empty_wake > EMPTY_WAKE_GAP:
            self._last_empty_wake = time.monotonic()
            self._wake_master()

    def _wake_master(self) -> None:
        try:
            self.queue.wake_master()
        except BackendUnavailable:
            pass    # the master patrols on its own timer anyway

    def _after_write_back(self, runs: list) -> None:
        """The last write-backs of a batch may finish it: let the master see it now."""
        try:
            if self.queue.pending_count() == 0:
                self._wake_master()
        except BackendUnavailable:
            pass

    # -- one task
    def process(self, run: TaskRun, stop: StopFlag) -> None:
        task = run.lease.task
        _processing.run, _processing.pipeline = run, self.pipeline
        try:
            pending = collections.deque(self._as_requests(self.spider.task_requests(task), "task_requests"))
            while pending and not stop.cold:
                pending.extend(self._run_request(run, pending.popleft(), task))
        except Exception as e:   # the user's code failed: this task fails, the worker carries on
            log.error("task %s failed: %s: %s", run.task_id, type(e).__name__, e)
            log.debug("task %s traceback", run.task_id, exc_info=True)
            self.pipeline.record_outcome(run, ok=False)
        finally:
            _processing.run = _processing.pipeline = None
            if stop.cold:
                log.info("task %s abandoned at a cold stop; its lease will expire", run.task_id)
            self.pipeline.finish_requests(run)

    def _run_request(self, run: TaskRun, request: Request, task: dict) -> list:
        """Download one request and run its callback; returns the follow-up requests."""
        if self._is_duplicate(run, request):
            return []
        request_seq = run.next_request_seq()
        try:
            response = self.downloader.fetch(request)
        except RequestFailed as failure:
            run.last_failure = failure
            self.spider.failed_request(request, failure.response_or_exception, task)
            return []
        callback = self._callback(request)
        follow_ups, item_seq = [], 0
        for result in callback(request, response, task) or ():
            if isinstance(result, Request):
                follow_ups.append(result)
            elif isinstance(result, Mapping):
                self.pipeline.add_item(run, request_seq, item_seq, dict(result))
                item_seq += 1
            elif result is not None:
                raise TypeError(f"{getattr(callback, '__name__', callback)} yielded a {type(result).__name__}; "
                                "yield dicts (items) or Requests")
        return follow_ups

    def _callback(self, request: Request):
        callback = request.callback or self.spider.parse
        return getattr(self.spider, callback) if isinstance(callback, str) else callback

    def _is_duplicate(self, run: TaskRun, request: Request) -> bool:
        if not self.settings.REQUEST_FILTER_ENABLE or request.dont_filter:
            return False
        if self.queue.first_seen(run.lease.batch_id, request.fingerprint()):
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
