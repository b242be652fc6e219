"""The supervisor: the one process that forks the master and the workers and keeps them going.

It runs no user code and no statement against the user's tables (with an SQLite store, its
snapshots and lease give-backs go to batchd's own tables in the file). The spider is loaded by a
throwaway probe child (its settings and namespace come back as JSON), then the supervisor allocates the shared
LedgerBlock and forks its children, then loops, one thread, never blocking for long:

    wait for a child's sentinel or a signal's wake-up byte (at most TICK)
    dispatch the signals the handlers recorded: TERM / INT warm stop (again: cold),
        QUIT cold stop, HUP reload and replace the children, TTIN / TTOU one worker more / fewer
    reap each child whose sentinel fired: one line with what it held in memory, its row
        cleared, a respawn planned (backoff; 78 after a few configuration failures in a row)
    escalate: a child silent past CHILD_TIMEOUT gets SIGABRT, then SIGKILL; a stopping one past
        STOP_TIMEOUT gets SIGQUIT (cold), then SIGKILL
    fill the seats: spawn what is missing, retire (warm) what is too many
    report: READY=1 once the children are up, WATCHDOG=1 while every child is fresh or being
        replaced, STATUS= and the snapshot on the status board every STATUS_INTERVAL, EXTEND_TIMEOUT_USEC
        while draining

A warm stop ends when every child has exited: each worker finishes its tasks, flushes and
writes back, so the ledger reaches 0; what a child still held when it ended is logged.
"""
import collections
import gc
import json
import logging
import multiprocessing
import os
import signal
import socket
import time
from multiprocessing.connection import wait
from typing import Optional

from .child import Child, ChildSpec, Plan, Seats, after_abort, child_main, describe_exit, probe
from ..config import Settings
from ..errors import ConfigError, ExitCode
from ..process.ledger import LedgerBlock, Phase
from ..process.lifecycle import Backoff
from .loader import SpiderSource
from ..master.patrol import ProgressRate
from .metrics import MetricsServer
from .snapshots import SettledSamples, SnapshotPublisher, status_line, supervisor_ports
from ..process.systemd import Notifier, set_log_namespace, set_process_role, set_process_title, watchdog_usec
from ..worker.worker import ledger_slots, worker_token_prefix

log = logging.getLogger("batchd.supervisor")

TICK = 0.25               # the loop's longest wait: every timer is checked this often
KILL_GRACE = 5.0          # after SIGABRT or SIGQUIT, this long before SIGKILL
STOP_MARGIN = 5.0         # a warm-stopping child has its own STOP_TIMEOUT deadline; this is on top
CONFIG_ATTEMPTS = 3       # configuration failures in a row before giving up with exit 78
STABLE_AFTER = 30.0       # a child that ran this long before it ended starts a fresh backoff
EXTEND_EVERY = 2.0        # while draining, EXTEND_TIMEOUT_USEC this often,
EXTEND_BY = 10.0          # each granting this much: a supervisor that hangs is not waited for long
GC_YOUNG_THRESHOLD = 10_000   # allocations between two young collections, in the supervisor and its children
SPARE_WORKER_ROWS = 8     # ledger rows beyond twice the wanted workers: TTIN, and a reload's overlap
MASTER_ROWS = 2           # the master and, during a reload, its successor
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
HANDLED_SIGNALS = STOP_SIGNALS + (signal.SIGQUIT, signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU)


def _count(n: int, role: str) -> str:
    return role if role == "master" else f"{n} {role}{'' if n == 1 else 's'}"


class Supervisor:
    def __init__(self, plan: Plan, source: SpiderSource, notifier: Optional[Notifier] = None):
        self.plan, self.source = plan, source
        self.notifier = notifier or Notifier()
        self.context = multiprocessing.get_context("fork")
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.children: list = []
        self.seats: dict = {}
        self.settings: Optional[Settings] = None          # these three once the spider is loaded (_begin)
        self.namespace: Optional[str] = None
        self.block: Optional[LedgerBlock] = None
        self.publisher: Optional[SnapshotPublisher] = None
        self.metrics: Optional[MetricsServer] = None      # METRICS_PORT: /metrics, served from a thread
        self.restarts: dict = {}                 # role -> children that ended unasked (for the metrics)
        self.exit_code = ExitCode.OK
        self.stopping = False
        self.announce_ready = True
        self.rate = ProgressRate()
        self.ended: collections.Counter[str] = collections.Counter()   # the children gone: totals, what they left
        self.master_figures: dict = {}           # the batch as this host's master last wrote it in its row
        self.settled_samples = SettledSamples()  # and its tally at each snapshot (its rate, its ETA)
        self._signals: collections.deque = collections.deque()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._due = {"watchdog": 0.0, "status": 0.0, "extend": 0.0}

    # The loop and all it calls run once the spider is loaded: the settings and the ledger are there.
    @property
    def _loaded_settings(self) -> Settings:
        if self.settings is None:
            raise RuntimeError("the supervisor has no settings before the spider is loaded")
        return self.settings

    @property
    def _ledger(self) -> LedgerBlock:
        if self.block is None:
            raise RuntimeError("the supervisor has no ledger before the spider is loaded")
        return self.block

    # -- the whole life
    def run(self) -> int:
        set_process_role(self.plan.named("supervisor"))
        set_process_title("batchd: supervisor (loading the spider)")
        self._install_signal_handlers()
        try:
            loaded = self._load_spider()
            if loaded is not None:
                self._begin(*loaded)
                # What the supervisor holds now (its modules above all) lives as long as it does: out of the
                # collector's reach, a child's collections do not write to (and copy) those shared pages, and
                # the exit does not walk them (0.1 s of a 0.4 s `batchd run --once` of a small batch).
                gc.freeze()
                # A worker keeps each task's objects (its run, lease, item) until the flush lands them, a
                # second or so: at the default 700 it collected every 11 tasks, 28-53 us of CPU per task,
                # where the bare loop spends 2-6 (docs/performance.md). The children inherit this.
                gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
                self._fill_seats(time.monotonic())     # the children start now, not after the loop's first TICK
                while self.children or not self.stopping:
                    self._turn()
        except ConfigError as e:
            log.error("%s", e)
            self.exit_code = ExitCode.CONFIG
        finally:
            self._shut_down()
        return int(self.exit_code)

    def _load_spider(self) -> Optional[tuple]:
        """(settings, namespace) from a probe child, tried a few times; None if stopped meanwhile."""
        backoff, attempt = Backoff(), 1
        while True:      # the last attempt returns or raises
            try:
                return probe(self.context, self.source, self._forget_in_child, self._pet_watchdog)
            except ConfigError as e:
                if attempt == CONFIG_ATTEMPTS:
                    raise ConfigError(f"{e} (gave up after {attempt} attempts)") from None
                delay = backoff.next_delay()
                log.error("%s; attempt %d of %d, again in %.1f s", e, attempt, CONFIG_ATTEMPTS, delay)
                if self._pause(delay):
                    log.info("stopped before the spider could be loaded")
                    return None
            attempt += 1

    def _begin(self, settings, namespace: str) -> None:
        self._apply(settings, namespace)
        workers = self.seats["worker"].wanted if "worker" in self.seats else None
        self.block = LedgerBlock(MASTER_ROWS if "master" in self.seats else 0,
                                 0 if workers is None else 2 * workers + SPARE_WORKER_ROWS,
                                 ledger_slots(settings))
        log.info("supervising %s for namespace %r: %s; ledger of %d bytes (%d slots per worker)",
                 self.source.path, namespace, " + ".join(_count(s.wanted, r) for r, s in self.seats.items()),
                 self.block.size, self.block.slots_per_worker)
        self._warn_short_watchdog()
        if settings.METRICS_PORT:      # before the first fork: the children count into its directory
            self.metrics = MetricsServer(settings.METRICS_ADDRESS, settings.METRICS_PORT, self.plan.instance_key,
                                         self.metric_figures)

    def _apply(self, settings, namespace: str) -> None:
        """Adopt resolved settings (at start and after a reload)."""
        if self.settings is not None and ((settings.METRICS_PORT, settings.METRICS_ADDRESS)
                                          != (self.settings.METRICS_PORT, self.settings.METRICS_ADDRESS)):
            log.warning("METRICS_PORT and METRICS_ADDRESS take effect at a restart, not at a reload")
        self.settings, self.namespace = settings, namespace
        set_log_namespace(namespace)
        logging.getLogger("batchd").setLevel(settings.LOG_LEVEL.upper())
        set_process_title(f"batchd: supervisor {self._where()}")
        for role in self.plan.roles:
            wanted = 1 if role == "master" else self._wanted_workers(settings)
            if role in self.seats:
                self.seats[role].wanted, self.seats[role].next_spawn = wanted, 0.0
            else:
                self.seats[role] = Seats(wanted=wanted)
                self.restarts[role] = 0     # every key there before a scrape reads them from another thread
        self._close_publisher()      # the namespace or the store may have changed with a reload
        ports = supervisor_ports(settings, namespace)
        if ports is not None:
            self.publisher = SnapshotPublisher(ports, self.host, self.plan.named(self.plan.verb),
                                               settings.STATUS_INTERVAL)

    def _wanted_workers(self, settings) -> int:
        wanted = settings.WORKERS if settings.WORKERS is not None else (os.cpu_count() or 1)
        if self.block is None:
            return wanted
        slots = ledger_slots(settings)
        if slots > self.block.slots_per_worker:
            log.warning("SPIDER_THREAD_COUNT=%d and ITEM_FLUSH_SIZE=%d want %d ledger slots per worker; the ledger "
                        "made at start has %d (restart to grow it)", settings.SPIDER_THREAD_COUNT,
                        settings.ITEM_FLUSH_SIZE, slots, self.block.slots_per_worker)
        room = self.block.worker_rows // 2
        if wanted > room:
            log.warning("WORKERS=%d does not fit the ledger made at start; running %d (restart to grow it)",
                        wanted, room)
        return min(wanted, room)

    def _where(self) -> str:
        return f"{self.namespace}@{self.plan.instance}" if self.plan.instance else f"{self.namespace}"

    # -- one turn of the loop
    def _turn(self) -> None:
        sentinels = {child.process.sentinel: child for child in self.children}
        ready = wait(list(sentinels) + [self._wake_r], TICK)
        self._drain_wake_pipe()
        self._dispatch_signals()
        now = time.monotonic()
        for handle in ready:
            if handle in sentinels:
                self._reap(sentinels[handle], now)
        self._escalate(now)
        if not self.stopping:
            self._fill_seats(now)
        self._report(now)

    # -- signals: the handlers only record
    def _install_signal_handlers(self) -> None:
        for sig in HANDLED_SIGNALS:
            signal.signal(sig, self._record_signal)
        signal.set_wakeup_fd(self._wake_w)     # and the C handler wakes the loop's wait() at once

    def _record_signal(self, signum, frame) -> None:
        self._signals.append(signum)

    def _drain_wake_pipe(self) -> None:
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def _pause(self, seconds: float) -> bool:
        """Sleep, awake to signals; True if one of them asks to stop."""
        wait([self._wake_r], seconds)
        self._drain_wake_pipe()
        return any(sig in STOP_SIGNALS or sig == signal.SIGQUIT for sig in self._signals)

    def _dispatch_signals(self) -> None:
        handlers = {signal.SIGTERM: self._on_stop_signal, signal.SIGINT: self._on_stop_signal,
                    signal.SIGQUIT: self._on_quit, signal.SIGHUP: self._on_hup,
                    signal.SIGTTIN: self._on_ttin, signal.SIGTTOU: self._on_ttou}
        while self._signals:
            sig = self._signals.popleft()
            handlers[sig](signal.Signals(sig).name)

    def _on_stop_signal(self, name: str) -> None:
        if self.stopping:
            self._cold_stop(f"{name} again")
        else:
            self._begin_stop(ExitCode.OK, name)

    def _on_quit(self, name: str) -> None:
        self._cold_stop(name)

    def _on_hup(self, name: str) -> None:
        if self.stopping:
            log.info("%s ignored: stopping", name)
            return
        self.notifier.reloading()
        log.info("%s: reloading the configuration and the spider", name)
        try:
            self._apply(*probe(self.context, self.source, self._forget_in_child, self._pet_watchdog))
        except ConfigError as e:
            log.error("reload failed, the running children carry on: %s", e)
            self.notifier.ready(self._status_text())
            return
        now = time.monotonic()
        current = [child for child in self.children if child.retiring_since is None]
        for child in current:
            self._retire(child, now)
        self.announce_ready = True
        log.info("reloaded: %d children replaced gracefully (new ones start, old ones finish their tasks)",
                 len(current))

    def _on_ttin(self, name: str) -> None:
        self._resize(name, +1)

    def _on_ttou(self, name: str) -> None:
        self._resize(name, -1)

    def _resize(self, name: str, step: int) -> None:
        seats = self.seats.get("worker")
        if seats is None or self.stopping:
            log.info("%s ignored: %s", name, "stopping" if self.stopping else "this supervisor runs no workers")
            return
        wanted = max(1, min(self._ledger.worker_rows, seats.wanted + step))
        if wanted == seats.wanted:
            log.info("%s: staying at %d workers (%s)", name, wanted, "the least" if step < 0 else "ledger full")
            return
        log.info("%s: workers %d -> %d", name, seats.wanted, wanted)
        seats.wanted = wanted

    # -- stopping
    def _begin_stop(self, exit_code: ExitCode, reason: str) -> None:
        if self.stopping:
            return
        self.stopping, self.exit_code = True, exit_code
        now = time.monotonic()
        log.info("%s: warm stop: the children finish their tasks, flush and write back (STOP_TIMEOUT %g s); "
                 "a second signal stops cold", reason, self._loaded_settings.STOP_TIMEOUT)
        for child in self.children:
            if child.retiring_since is None:
                self._retire(child, now)
        self.notifier.stopping(self._status_text())
        self._due["extend"] = now

    def _cold_stop(self, reason: str) -> None:
        if not self.stopping:
            self.stopping = True
            self.notifier.stopping(self._status_text())
        now = time.monotonic()
        log.warning("%s: cold stop: in-flight tasks are abandoned and come back through their leases", reason)
        for child in self.children:
            if child.cold_since is None and child.killed_since is None:
                self._go_cold(child, now)

    def _retire(self, child: Child, now: float) -> None:
        child.retiring_since = now
        self._signal(child, signal.SIGTERM)

    def _go_cold(self, child: Child, now: float) -> None:
        child.retiring_since = child.retiring_since or now
        child.cold_since = now
        self._signal(child, signal.SIGQUIT)

    def _signal(self, child: Child, sig: int) -> None:
        # exitcode polls waitpid(pid): a pid already reaped might belong to someone else by now.
        if child.process.exitcode is None:
            try:
                os.kill(child.pid, sig)
            except ProcessLookupError:
                pass

    # -- the children's lives
    def _fill_seats(self, now: float) -> None:
        for role, seats in self.seats.items():
            active = [c for c in self.children if c.spec.role == role and c.retiring_since is None]
            for child in sorted(active, key=lambda c: c.spawned_at)[seats.wanted:]:
                log.info("%s retires: %d %ss wanted", child.label, seats.wanted, role)
                self._retire(child, now)
            for _ in range(seats.wanted - len(active)):
                row = self._free_row(role)
                if now < seats.next_spawn or row is None:
                    break
                self._spawn(role, row, now)

    def _free_row(self, role: str) -> Optional[int]:
        rows = self._ledger.master_row_numbers() if role == "master" else self._ledger.worker_row_numbers()
        used = {child.spec.row for child in self.children}
        return next((row for row in rows if row not in used), None)

    def _spawn(self, role: str, row: int, now: float) -> None:
        numbers = {c.spec.number for c in self.children if c.spec.role == role and c.retiring_since is None}
        number = 0 if role == "master" else next(n for n in range(1, len(numbers) + 2) if n not in numbers)
        base = "master" if role == "master" else f"worker {number}"
        spec = ChildSpec(role=role, number=number, row=row, once=self.plan.once,
                         keep_alive=not (self.plan.once and self.plan.verb == "worker"),
                         metered=self.metrics is not None,
                         name=self.plan.named(base), title=f"batchd: {base} {self._where()}")
        self._ledger.prepare(row)
        process = self.context.Process(target=child_main, name=f"batchd-{base.replace(' ', '-')}",
                                       args=(spec, self.source, self.block, self.pid, self._forget_in_child))
        process.start()
        self.children.append(Child(spec=spec, process=process, spawned_at=now))
        log.info("%s started (pid %d)", spec.name, process.pid)

    def _forget_in_child(self) -> None:
        """Run in every forked child: the supervisor's pipe and notify socket are not its own."""
        os.close(self._wake_r)
        os.close(self._wake_w)
        self.notifier.close()
        if self.metrics is not None:
            self.metrics.forget_in_child()

    def _reap(self, child: Child, now: float) -> None:
        code = child.process.exitcode
        if code is None:
            return          # the sentinel fired a moment before the exit status is there
        self.children.remove(child)
        if self.metrics is not None:        # before its restart is counted: a scrape sees both, or neither
            self.metrics.child_ended(child.pid)     # its live gauge goes; its counters stay in the sums
        lost, row = self._ledger.lost(child.spec.row), self._ledger.row(child.spec.row)
        self.ended.update(done=row.done, failed=row.failed, items=row.items,
                          left_items=lost.items, left_tasks=len(lost.task_keys))
        if lost.task_keys:
            self._give_back_leases_of(child)
        next_step, stop = self._after_end(child, code, now, served=bool(row.served))
        held = (f"; {lost.items} items of {len(lost.task_keys)} tasks lost from memory (tasks "
                f"{', '.join(lost.task_keys)}): those tasks are not done, they come back through their leases"
                if lost.task_keys else "")
        level = logging.INFO if (code == 0 and not lost.task_keys) else logging.WARNING
        log.log(level, "%s %s%s%s%s", child.label, describe_exit(code), after_abort(child, code), held, next_step)
        self._ledger.clear(child.spec.row)
        child.process.close()
        if stop is not None:
            self._begin_stop(*stop)

    def _give_back_leases_of(self, child: Child) -> None:
        """A dead worker's leases are due at once: the master requeues its tasks at its next patrol
        instead of when their leases would have expired."""
        if self.publisher is None:
            return
        given = self.publisher.give_back_leases_of(worker_token_prefix(child.pid))
        if given:
            log.info("gave back the %d leases %s held: the master requeues them now", given, child.label)

    def _after_end(self, child: Child, code: int, now: float, served: bool = False) -> tuple:
        """What follows a child's end: (the tail of its log line, None or the stop it calls for). A child
        that had served (leased a task, finished a patrol) is replaced at once; backoff (capped at
        RESPAWN_CAP) is for children that die before serving, a crash loop."""
        if child.retiring_since is not None:
            return "", None
        role, seats = child.spec.role, self.seats[child.spec.role]
        if self.plan.once and role == "master" and code in (ExitCode.OK, ExitCode.UNAVAILABLE, ExitCode.TEMPFAIL):
            return "", (ExitCode(code), "the batch is over (--once)" if code == 0 else f"--once ends with {code}")
        if self.plan.once and code == ExitCode.UNAVAILABLE:     # a once-mode worker gave up on an outage
            return "", (ExitCode.UNAVAILABLE, "--once ends with 69: a worker could not reach its backends")
        if self.plan.once and self.plan.verb == "worker" and code == 0:    # keep_alive=False: its batch is done
            seats.wanted -= 1
            return "", (ExitCode.OK, "every worker is done (--once)") if seats.wanted == 0 else None
        self.restarts[role] += 1
        if now - child.spawned_at >= STABLE_AFTER:
            seats.backoff.reset()
            seats.config_failures = 0
        if code == ExitCode.CONFIG:
            return self._config_failure(child, seats, now)
        seats.config_failures = 0
        if served:
            seats.backoff.reset()
            return f"; a new {role} now (it had served)", None
        delay = seats.backoff.next_delay()
        seats.next_spawn = max(seats.next_spawn, now + delay)
        return f"; a new {role} in {delay:.1f} s", None

    def _config_failure(self, child: Child, seats: Seats, now: float) -> tuple:
        if child.spawned_at > seats.last_config_failure:    # its siblings of the same attempt count once
            seats.config_failures += 1
            seats.last_config_failure = now
        if seats.config_failures >= CONFIG_ATTEMPTS:
            return "", (ExitCode.CONFIG, f"the {child.spec.role} failed on its configuration "
                                         f"{seats.config_failures} times in a row; giving up (exit 78)")
        delay = seats.backoff.next_delay()
        seats.next_spawn = max(seats.next_spawn, now + delay)
        return (f"; configuration error {seats.config_failures} of {CONFIG_ATTEMPTS}, "
                f"trying again in {delay:.1f} s"), None

    def _escalate(self, now: float) -> None:
        for child in self.children:
            if child.killed_since is not None:
                self._note_stuck(child, now)
            elif child.aborted_since is not None or child.cold_since is not None:
                if now - max(child.aborted_since or 0, child.cold_since or 0) >= KILL_GRACE:
                    log.error("%s still there %g s after SIG%s: SIGKILL", child.label, KILL_GRACE,
                              "ABRT" if child.aborted_since else "QUIT")
                    child.killed_since = now
                    self._signal(child, signal.SIGKILL)
            elif self._ledger.silence(child.spec.row, now) > self._loaded_settings.CHILD_TIMEOUT:
                self._abort(child, now)
            elif (child.retiring_since is not None
                  and now - child.retiring_since > self._loaded_settings.STOP_TIMEOUT + STOP_MARGIN):
                lost = self._ledger.lost(child.spec.row)
                log.warning("%s: STOP_TIMEOUT passed with %d items of %d tasks still in memory (tasks %s): "
                            "cold stop", child.label, lost.items, len(lost.task_keys),
                            ", ".join(lost.task_keys) or "none")
                self._go_cold(child, now)

    def _abort(self, child: Child, now: float) -> None:
        log.error("%s silent for %.1f s (CHILD_TIMEOUT %g s): SIGABRT (its threads' stacks follow), SIGKILL "
                  "in %g s if it lingers; it will be replaced", child.label,
                  self._ledger.silence(child.spec.row, now), self._loaded_settings.CHILD_TIMEOUT, KILL_GRACE)
        child.aborted_since = now
        self._signal(child, signal.SIGABRT)
        self._signal(child, signal.SIGCONT)     # a stopped process acts on SIGABRT only once continued

    def _note_stuck(self, child: Child, now: float) -> None:
        if child.killed_since is not None and now - child.killed_since > KILL_GRACE and not child.stuck_logged:
            child.stuck_logged = True
            log.critical("%s has not died %g s after SIGKILL (stuck in the kernel?); the watchdog stops "
                         "until it does", child.label, KILL_GRACE)

    # -- telling systemd and Redis
    def _report(self, now: float) -> None:
        if self.announce_ready and not self.stopping and self._seats_filled():
            self.announce_ready = False
            text = self._publish_status(now)
            self.notifier.ready(text)
            log.info("ready: %s", text)
        self._pet_watchdog()
        if now >= self._due["status"]:
            self._due["status"] = now + self._loaded_settings.STATUS_INTERVAL
            self._publish_status(now)
        if self.stopping and now >= self._due["extend"]:
            self._due["extend"] = now + EXTEND_EVERY
            self.notifier.extend_timeout(EXTEND_BY)

    def _seats_filled(self) -> bool:
        for role, seats in self.seats.items():
            running = [c for c in self.children if c.spec.role == role and c.retiring_since is None
                       and self._ledger.row(c.spec.row).phase == Phase.RUNNING]
            if len(running) < seats.wanted:
                return False
        return True

    def _pet_watchdog(self) -> None:
        now = time.monotonic()
        if self.notifier.watchdog_interval and now >= self._due["watchdog"] and self.healthy(now):
            self._due["watchdog"] = now + self.notifier.watchdog_interval
            self.notifier.watchdog()

    def healthy(self, now: float) -> bool:
        """Every child beats within CHILD_TIMEOUT or is being replaced; a SIGKILL that did not end its
        child within KILL_GRACE means this supervisor can no longer replace it."""
        for child in self.children:
            if child.killed_since is not None:
                if now - child.killed_since > KILL_GRACE:
                    return False
            elif (child.aborted_since is None
                  and self._ledger.silence(child.spec.row, now) > self._loaded_settings.CHILD_TIMEOUT):
                return False
        return True

    def _warn_short_watchdog(self) -> None:
        seconds, needed = watchdog_usec() / 1e6, 2 * (self._loaded_settings.CHILD_TIMEOUT + KILL_GRACE)
        if seconds and seconds < needed:
            log.warning("WatchdogSec=%gs is below 2 x (CHILD_TIMEOUT %g s + kill grace %g s) = %g s: replacing "
                        "a hung child could cost the service its watchdog; raise WatchdogSec= or lower "
                        "CHILD_TIMEOUT", seconds, self._loaded_settings.CHILD_TIMEOUT, KILL_GRACE, needed)

    def _snapshot(self) -> dict:
        workers = [c for c in self.children if c.spec.role == "worker"]
        totals = self._ledger.totals(c.spec.row for c in workers)
        done, failed = totals["done"] + self.ended["done"], totals["failed"] + self.ended["failed"]
        self.rate.add(done + failed)
        snapshot = {"role": self.plan.verb, "host": self.host, "instance": self.plan.instance_key,
                    "pid": self.pid, "updated": round(time.time(), 3),
                    "workers_alive": sum(1 for c in workers if c.retiring_since is None),
                    "workers_wanted": self.seats["worker"].wanted if "worker" in self.seats else 0,
                    "master_alive": int(any(c.spec.role == "master" and c.retiring_since is None
                                            for c in self.children)),
                    "done": done, "failed": failed, "items": totals["items"] + self.ended["items"],
                    "unflushed": totals["unflushed"], "in_flight": totals["in_flight"],
                    "rate": round(self.rate.per_second(), 3),
                    "workers": json.dumps([self._worker_line(c) for c in workers])}
        rows = [self._ledger.row(c.spec.row) for c in self.children if c.spec.role == "master"]
        row = max((r for r in rows if r.batch_id > 0), key=lambda r: r.heartbeat, default=None)
        if row is not None:
            self.master_figures = {"batch_id": row.batch_id, "batch_settled": row.settled,
                                   "batch_total": row.total, "batch_is_done": row.is_done,
                                   "batch_done": row.done_count, "batch_failed": row.fail_count,
                                   "batch_next_due": row.next_due.decode("ascii", "replace"),
                                   "batch_paused_since": row.paused_since, **self._sample_tally(row)}
        # The last figures of a master that stopped still describe the batch (a reload, the end of a stop).
        return {**snapshot, **self.master_figures, **self._outage()}

    def _sample_tally(self, row) -> dict:
        """The open batch's tally now, added to its samples: the batch_samples and batch_life fields; once it is
        over, its life alone, ending at its close (as long as this supervisor saw it run)."""
        if row.is_done:
            if self.settled_samples.batch_id != row.batch_id:
                return {}
            self.settled_samples.close(time.time(), row.done_count + row.fail_count)
            return {"batch_life": self.settled_samples.life_field()}
        settled = self.publisher.settled(row.batch_id) if self.publisher is not None else None
        if settled is not None:
            self.settled_samples.add(row.batch_id, time.time(), settled)
        if self.settled_samples.batch_id != row.batch_id:
            return {}
        return {"batch_samples": self.settled_samples.field(), "batch_life": self.settled_samples.life_field()}

    def _outage(self) -> dict:
        """The longest-running outage any child waits out, as snapshot fields (none: no fields)."""
        outages = [o for o in (self._ledger.outage(c.spec.row) for c in self.children) if o is not None]
        if not outages:
            return {}
        backend, since, reason = min(outages, key=lambda o: o[1])
        return {"outage_backend": backend, "outage_since": round(since, 3), "outage_reason": reason}

    def metric_figures(self) -> dict:
        """The supervisor's gauges for a /metrics scrape. Called from the metrics thread: it reads the ledger
        (shared memory, whose rows say which children run) and plain values, never the list of children
        the loop changes meanwhile."""
        block = self._ledger
        running = [n for n in (*block.master_row_numbers(), *block.worker_row_numbers())
                   if block.row(n).phase != Phase.EMPTY]
        workers = [n for n in running if n >= block.master_rows]
        totals = block.totals(workers)
        down = {name for outage in map(block.outage, running) if outage is not None
                for name in outage[0].split("+")}
        figures = {"namespace": self.namespace, "workers_alive": len(workers), "unflushed": totals["unflushed"],
                   "in_flight": totals["in_flight"], "restarts": dict(self.restarts), "outages": down}
        rows = [block.row(n) for n in running if n < block.master_rows]
        row = max((r for r in rows if r.batch_id > 0), key=lambda r: r.heartbeat, default=None)
        if row is not None:
            figures["batch"] = {"id": row.batch_id, "total": row.total, "done": row.done_count,
                                "failed": row.fail_count, "queued": row.queued}
            publisher, settings = self.publisher, self.settings      # (a reload may replace them meanwhile)
            hosts = (publisher.hosts(row.batch_id, settings.HOST_STATS_TOP)
                     if publisher is not None and settings is not None else None)
            if hosts is not None:
                figures["hosts"] = hosts
        return figures

    def _worker_line(self, child: Child) -> dict:
        """One worker as `batchd status` lists it."""
        return {"name": child.spec.name, "pid": child.process.pid, **self._ledger.view(child.spec.row)}

    def _publish_status(self, now: float) -> str:
        snapshot = self._snapshot()
        if self.publisher is not None:
            self.publisher.publish(snapshot)
        batch = snapshot if "batch_id" in snapshot else None
        if batch is None and self.publisher is not None and "master" not in self.seats:
            batch = self.publisher.master_view()
        text = status_line(f"{self.plan.verb} {self._where()}", snapshot, batch)
        self.notifier.status(text)
        return text

    def _status_text(self) -> str:
        snapshot = self._snapshot()
        return status_line(f"{self.plan.verb} {self._where()}", snapshot,
                           snapshot if "batch_id" in snapshot else None)

    # -- the end
    def _shut_down(self) -> None:
        _step("kill the children left", self._kill_leftovers)
        _step("remove the status snapshot", self._close_publisher)
        _step("stop serving metrics", self._close_metrics)
        _step("restore the signal handlers", self._restore_signals)
        if self.block is None:
            return          # no child ever ran: the reason was the one line already logged
        left_items, left_tasks = self.ended["left_items"], self.ended["left_tasks"]
        log.info("exit %d: %d tasks done, %d failed, %d items stored by this host's workers; %s", self.exit_code,
                 self.ended["done"], self.ended["failed"], self.ended["items"],
                 f"{left_items} items of {left_tasks} tasks were left in memory (their leases bring them back)"
                 if left_tasks else "the ledger is at 0")

    def _kill_leftovers(self) -> None:
        for child in self.children:
            self._signal(child, signal.SIGKILL)
            child.process.join(KILL_GRACE)

    def _close_publisher(self) -> None:
        publisher, self.publisher = self.publisher, None
        if publisher is not None:
            try:
                publisher.withdraw()
            finally:
                publisher.close()

    def _close_metrics(self) -> None:
        metrics, self.metrics = self.metrics, None
        if metrics is not None:
            metrics.close()

    def _restore_signals(self) -> None:
        signal.set_wakeup_fd(-1)
        for sig in HANDLED_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        os.close(self._wake_r)
        os.close(self._wake_w)


def _step(what: str, action) -> None:
    """One teardown step: its failure is logged and skips no other step."""
    try:
        action()
    except Exception as e:   # teardown goes on whatever one step met
        log.error("while exiting, could not %s: %s: %s", what, type(e).__name__, e)
