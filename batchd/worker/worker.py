"""The worker: lease a task, run it through the spider (task_run.py), hand items and the task's
outcome to the pipeline.

Threads of one worker process, each started under the thread guard (batchd/service/threads.py):
- SPIDER_THREAD_COUNT fetch threads, each holding at most one task at a time;
- the lander (pipeline.py): flushes items and writes tasks back;
- the keeper: renews the leases of every task not yet written back.
The thread that called `run()` watches them: it beats the heart (only while every thread
makes progress), enforces TASK_TIMEOUT (timeout.py), and decides when the worker is finished.

Shutdown order (warm stop): the fetch threads stop leasing and finish the task they
hold; then the lander flushes what is buffered and writes back what is settled; the
keeper renews leases until the lander is done, then stops. A cold stop (second
signal, or STOP_TIMEOUT passed), or a stop during an outage, abandons what is left:
those tasks are not marked done, and their leases are given back to the master at once
when the queue can be reached (else they expire).
"""
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..config import Settings
from ..errors import BackendUnavailable, BatchdError, ConfigError, ExitCode
from ..alerts.alerts import Alerts
from ..download.downloader import Downloader
from ..download.middlewares.stats import HostsInFlight
from ..hosts.claims import host_of
from ..hosts.crawl_hours import CrawlHours
from ..hosts.set_aside import SetAside
from ..hosts.terms import HostTerms
from ..service.lifecycle import Backoff, StopFlag
from ..service.outages import OutageWatch, retry_through_outages
from ..model import TaskLayout
from .prefetch import EMPTY_RECHECK, EMPTY_RECHECK_MOST, LeasePrefetch, LeaseTokens
from .pipeline import Pipeline
from .task_run import HeldTasks, TaskRun, TaskRunner
from .timeout import TaskTimeouts, timeout_grace
from ..backends.ports import LeaseQueue, WakeChannel, WorkerPorts, claim_namespace
from ..schedule import is_due
from ..settle.batch_stats import BatchStats, StatsFlusher
from ..service.systemd import counted, set_thread_role, task_log_fields
from ..service.threads import Heart, check_in, guard, start_thread

log = logging.getLogger("batchd.worker")

SLOTS_PER_THREAD = 8         # tasks a thread may leave waiting for their items' flush, beyond a flush's worth
FLUSH_SLOTS_MOST = 2048      # slots for a flush's worth of tasks, at most (each is 80 bytes of shared memory)
IDLE_POLL_CAP = 0.1         # an idle thread looks for a task at least this often (prefetch.py: one round trip)
WATCH_EVERY = 0.2            # the watching thread's rhythm: heartbeat, timeouts, the end
SHARE_EVERY = 1.0           # s: a worker finding the queue empty hands back its surplus of a busy host this often
SHORT_QUEUE = 128           # tasks left in the queue under which a worker leaves a busy host's next ones to others
SHARE_MOST = 30.0           # s: ... and, while the others take little of it, this often at least
ROOM_EVERY = 0.5            # s: a worker full of tasks set aside hands back a busy host's surplus this often
EMPTY_WAKE_GAP = 5.0         # an idle worker reminds the master at most this often


class WorkerRecycled(BatchdError):
    """A task's thread would not come back after TASK_TIMEOUT, or a thread of the worker died."""

    exit_code = ExitCode.SOFTWARE


def ledger_slots(settings: Settings) -> int:
    """Ledger slots of a worker: a task holds one from its lease until its items have landed. Enough for a
    whole flush's worth of tasks (ITEM_FLUSH_SIZE, one item each) besides what the threads have in hand,
    so threads do not stall for slots between two flushes, and one for each task it may hold set aside."""
    return (settings.SPIDER_THREAD_COUNT * SLOTS_PER_THREAD + settings.HOST_SET_ASIDE_MAX
            + min(settings.ITEM_FLUSH_SIZE, FLUSH_SLOTS_MOST))


@dataclass
class WorkerParts:
    """What a worker runs with, each part handed the others it needs: built by batchd/assembly.py."""
    ledger: Any
    tokens: LeaseTokens
    stats: BatchStats
    stats_flusher: StatsFlusher
    alerts: Alerts
    in_flight: HostsInFlight
    set_aside: SetAside
    prefetch: LeasePrefetch
    watch: OutageWatch
    downloader: Downloader
    pipeline: Pipeline
    runner: TaskRunner
    timeouts: TaskTimeouts


class Worker:
    """`held`: the index of this process's tasks in hand that update_task() looks in (the Runtime's)."""

    def __init__(self, settings: Settings, layout: TaskLayout, ports: WorkerPorts, held: HeldTasks,
                 parts: WorkerParts, name: str = "worker", keep_alive: bool = True):
        self.settings, self.layout, self.ports, self.held = settings, layout, ports, held
        self.store, self.leases, self.wake = ports.store, ports.leases, ports.wake
        self.name, self.keep_alive = name, keep_alive
        self.thread_count = settings.SPIDER_THREAD_COUNT
        self.lease_seconds = settings.BATCH_LOST_TASK_STALE
        self.ledger, self.stats, self.stats_flusher = parts.ledger, parts.stats, parts.stats_flusher
        self.alerts, self.in_flight, self.set_aside = parts.alerts, parts.in_flight, parts.set_aside
        self.prefetch, self.watch, self.timeouts = parts.prefetch, parts.watch, parts.timeouts
        self.downloader, self.pipeline, self.runner = parts.downloader, parts.pipeline, parts.runner
        self._last_empty_wake = 0.0
        self._next_share, self._share_gap = 0.0, SHARE_EVERY
        self._surplus_mark = 2 * settings.CONCURRENT_REQUESTS_PER_DOMAIN    # tasks of a host kept waiting for a place
        self._last_handed = self._leased_since_share = 0     # the last share, and the leases since
        self._next_room, self._room_gap = 0.0, ROOM_EVERY
        self._fresh_ran = self._fresh_aside = 0     # tasks leased since the last room made: ran on, set aside
        self._leasing = threading.Event()
        self._in_hand: dict = {}                # fetch thread ident -> the TaskRun it is processing
        self._failure: Optional[tuple] = None  # (reason, exit code) that ends this worker
        self.heart: Callable = lambda: None
        self.hours = CrawlHours(HostTerms.from_settings(settings), settings)
        self._told_waiting: set = set()         # (host, when its hours open) given back tasks were logged for

    # -- the loop the supervisor (or start()) runs
    def run(self, stop: StopFlag, heartbeat: Callable = lambda: None) -> None:
        """Serve until stopped (keep_alive) or until the batch is done. A worker that is not kept
        alive is a once-mode run: a store it cannot reach at start is final (exit 69), an outage
        later is waited out for up to OUTAGE_TIMEOUT."""
        self.heart = Heart(heartbeat, self.settings.CHILD_TIMEOUT / 2)
        self.watch.keep_beating(self.heart)
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
            claim_namespace(self.ports.namespaces, self.store, self.layout, self.leases.namespace, self.name)
            return True
        return start() if not self.keep_alive else retry_through_outages(start, self.watch, stop) is not None

    def _serve(self, stop: StopFlag) -> None:
        self.pipeline.start()
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
        if self.pipeline.in_flight() or self.leases.pending_count() or not self.leases.is_done():
            return False
        return not is_due(self.store.last_batch(), self.store.now(), self.settings, self.store)

    def _shut_down(self, stop: StopFlag, fetchers: list, keeper, keeper_stop) -> None:
        deadline = time.monotonic() + self.settings.STOP_TIMEOUT
        self._leasing.clear()
        self.set_aside.close()
        for thread in fetchers:
            while (thread.is_alive() and thread.ident not in self.timeouts.given_up_threads and not stop.cold
                   and time.monotonic() < deadline):
                check_in()
                self.heart()
                self._enforce_task_timeout(stop)
                thread.join(WATCH_EVERY)
        abandon = stop.cold or time.monotonic() >= deadline
        try:
            with guard.waiting(self.settings.STOP_TIMEOUT + 10):
                landed = self.pipeline.stop(max(0.0, deadline - time.monotonic()), abandon=abandon)
        finally:
            keeper_stop.set()
            keeper.join(5)
            self.downloader.close()
            if self.runner.replays is not None:
                self.runner.replays.close()
        for run in self.set_aside.drain():      # (their leases go back with the others not written back)
            self.held.release(run)
        self._give_back_leases()
        self._flush_stats_at_stop()
        self.alerts.close()
        if landed and not abandon:
            totals = self.ledger.totals()
            log.info("%s stopped: %s done, %d failed, %s stored", self.name, counted(totals["done"], "task"),
                     totals["failed"], counted(totals["items"], "item"))

    def _give_back_leases(self) -> None:
        """Tasks this worker will not write back: the master requeues them at its next patrol."""
        leases = self.pipeline.unwritten_leases() + self.prefetch.drain()
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
            self.stats_flusher.forget_gauges()
        except (BackendUnavailable, ConfigError) as e:
            for batch_id, counts in sorted(self.stats_flusher.unsent().items()):
                log.warning("batch %d: counters not flushed at stop (%s), lost: %s", batch_id, e,
                            ", ".join(f"{name} {n}" for name, n in sorted(counts.items())))

    # -- TASK_TIMEOUT (timeout.py)
    def _enforce_task_timeout(self, stop: StopFlag) -> None:
        stuck = self.timeouts.enforce(list(self._in_hand.values()))
        if stuck is not None:
            self._failure = self._failure or (stuck, ExitCode.SOFTWARE)
            stop.request()

    # -- the keeper thread
    def _keep_leases(self, keeper_stop: threading.Event) -> None:
        renew_every = max(0.2, self.lease_seconds / 4)
        while True:
            check_in(within=renew_every + 1)
            if keeper_stop.wait(renew_every):
                return
            try:
                self.leases.renew(self.pipeline.held_leases() + self.prefetch.waiting(), self.lease_seconds)
            except BackendUnavailable as e:
                self.watch.failed(e)      # the next renewal is the retry: a lease outlives a short outage
                continue
            self.watch.ok(self.leases.backend_name)

    # -- a fetch thread
    def _fetch_loop(self, stop: StopFlag, number: int) -> None:
        set_thread_role(f"{self.name}.{number}" if self.thread_count > 1 else self.name)
        idle, outage = Backoff(base=EMPTY_RECHECK, cap=IDLE_POLL_CAP), Backoff()
        while self._leasing.is_set() and not stop.is_set():
            check_in(within=IDLE_POLL_CAP + 1)
            run = self.set_aside.take()
            if run is not None:
                self._serve_run(run, stop)
                continue
            if self.set_aside.full():
                self._make_room()
                if self.set_aside.full():
                    self.set_aside.wait(IDLE_POLL_CAP)
                    continue
            slot = self.ledger.acquire_slot()
            if slot is None:
                self.pipeline.ask_flush()     # slots are held by tasks waiting for their items
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
                # The queue is empty. With no task in hand, or tasks set aside for their hosts' turns (a wait
                # that may be long), nothing soon will come to batch the buffered items with. And the tasks of
                # a busy host this worker holds beyond what it can start soon may go to another worker.
                if not self._in_hand or len(self.set_aside):
                    self.pipeline.flush_when_idle()
                self._share_surplus()
                self._wake_master_when_empty()
                self.set_aside.wait(idle.next_delay())     # (woken by a task set aside coming due)
                continue
            idle.reset()
            if self._outside_hours(lease):
                self.ledger.release_slot(slot)
                continue
            self._serve_lease(lease, slot, stop)

    def _outside_hours(self, lease) -> bool:
        """A task of a host whose crawl hours closed after the master claimed it: given back unstarted (the master
        requeues it, and claims it again once they open: hosts/crawl_hours.py). Without the host column only the
        global CRAWL_HOURS apply."""
        if not self.hours.any:
            return False
        host = host_of(lease.task.get(self.layout.host_field)) if self.layout.host_field else ""
        hours = self.hours.now()
        if not hours.held(host):
            return False
        self.leases.give_back([lease])
        self._wake_master()
        told = (host, hours.held_hosts[host])     # one line per host and closing (the queue may hold many)
        if told not in self._told_waiting:
            if len(self._told_waiting) >= 1000:     # months of closings: memory stays flat, a line may repeat
                self._told_waiting.clear()
            self._told_waiting.add(told)
            log.info("%s: task %s given back unstarted, and any other of %s leased before %s: its crawl hours are "
                     "closed", self.name, lease.task_id, repr(host) if host else "every host", told[1])
        return True

    def _serve_lease(self, lease, slot: int, stop: StopFlag) -> None:
        if lease.queue_left == self.settings.refill_mark:
            self._wake_master()
        self.ledger.label(slot, lease.key)
        self.ledger.note_served()
        self._leased_since_share += 1
        if self.stats.working_on(lease.batch_id):
            self.stats_flusher.due_now()      # what is left of the last batch's counts goes at once
            self.downloader.batch_started(lease.batch_id)     # the middlewares start afresh (robots.txt...)
        run = TaskRun(lease=lease, slot=slot)
        self.pipeline.track(run)
        self.held.hold(run, self.pipeline)
        if self._serve_run(run, stop):
            self._fresh_aside += 1
        else:
            self._fresh_ran += 1

    def _serve_run(self, run: TaskRun, stop: StopFlag) -> bool:
        """Run the task in this thread until it is over or must wait (then it is set aside: True)."""
        run.thread_ident = threading.get_ident()
        if run.aside_since is not None:       # TASK_TIMEOUT counts the time in a thread, not set aside
            run.started += time.monotonic() - run.aside_since
            run.aside_since = None
        limit = self.settings.TASK_TIMEOUT
        # The task may take up to its timeout and the grace: a wait by design, not a stall.
        check_in(within=limit + timeout_grace(limit) + 1 if limit else float("inf"))
        self._in_hand[run.thread_ident] = run
        wait = None
        try:
            with task_log_fields(self.leases.namespace, run.lease.batch_id, run.task_id):
                wait = self.runner.process(run, stop)
        except ConfigError as e:     # an Item class its table cannot take: no task of it could succeed
            self._fail(stop, str(e), ExitCode.CONFIG)
        finally:
            del self._in_hand[run.thread_ident]
            if wait is None:
                self.held.release(run)
        if wait is not None:
            run.aside_since = time.monotonic()
            self.set_aside.put(run, wait.host, wait.after)
            if wait.after == math.inf and run.lease.queue_left < SHORT_QUEUE and self._is_surplus(wait.host):
                # What is left in the queue is mostly of busy hosts: leave the next of it to the other
                # workers for a while rather than take it all in a few milliseconds (set_aside.py).
                self.prefetch.hold_off(EMPTY_RECHECK_MOST)
        return wait is not None

    def _is_surplus(self, host: str) -> bool:
        return self.set_aside.by_host().get(host, 0) > self._surplus_mark

    def _share_surplus(self) -> None:
        """With the queue empty, hand back to it the tasks set aside for a place at a host beyond what this
        worker may start soon there (set_aside.py says why), at most once every SHARE_EVERY."""
        now = time.monotonic()
        if now < self._next_share:
            return
        if self._last_handed:       # did the other workers take a real part of the last share?
            others_took = self._leased_since_share < 0.8 * self._last_handed
            self._share_gap = SHARE_EVERY if others_took else min(SHARE_MOST, self._share_gap * 2)
        self._next_share = now + self._share_gap
        self._leased_since_share = 0
        self._last_handed = self._hand_back_surplus()

    def _make_room(self) -> None:
        """HOST_SET_ASIDE_MAX reached: hand back a busy host's surplus to the queue's tail, so that the other
        hosts' tasks behind it in the queue can be leased (set_aside.py). Every ROOM_EVERY while most tasks
        leased since ran on without being set aside (there was other work); less and less often, up to
        SHARE_MOST, while most are set aside again (the queue holds busy hosts' tasks only)."""
        now = time.monotonic()
        if now < self._next_room:
            return
        other_work = self._fresh_ran >= self._fresh_aside
        self._room_gap = ROOM_EVERY if other_work else min(SHARE_MOST, self._room_gap * 2)
        self._next_room, self._fresh_ran, self._fresh_aside = now + self._room_gap, 0, 0
        self._hand_back_surplus()

    def _hand_back_surplus(self) -> int:
        """The surplus of the busy hosts set aside, handed back to the queue's tail: how many went."""
        runs = self.set_aside.surplus(self._surplus_mark, self._may_start_elsewhere)
        if not runs:
            return 0
        try:
            handed = {id(lease) for lease in self.leases.hand_back([run.lease for run, _ in runs])}
        except BackendUnavailable:
            handed = set()
        for run, host in runs:
            if id(run.lease) in handed:
                self.held.release(run)
                self.pipeline.forget(run)
            else:       # the queue out of reach, or the lease lost: the task waits here as it did
                self.set_aside.put(run, host, float("inf"))
        log.debug("handed back %d tasks of busy hosts to the queue for other workers", len(handed))
        return len(handed)

    def _may_start_elsewhere(self, run: TaskRun) -> bool:
        """A task that sent nothing: its first request is its own (task_requests'), which REQUEST_FILTER_ENABLE's
        filter never drops, so it starts elsewhere as it would here."""
        return run.sent_nothing()

    def _wake_master_when_empty(self) -> None:
        if time.monotonic() - self._last_empty_wake > EMPTY_WAKE_GAP:
            self._last_empty_wake = time.monotonic()
            self._wake_master()

    def _wake_master(self) -> None:
        wake_master(self.wake)


def wake_master(wake: WakeChannel) -> None:
    try:
        wake.wake_master()
    except BackendUnavailable:
        pass    # the master patrols on its own timer anyway


def wake_master_when_drained(leases: LeaseQueue, wake: WakeChannel) -> None:
    """After a write-back: the last write-backs of a batch may finish it, so let the master see it now."""
    try:
        if leases.pending_count() == 0:
            wake_master(wake)
    except BackendUnavailable:
        pass
