"""The supervisor: the one process that forks the master and the workers and keeps them going.

It runs no user code and no statement against the user's tables (with an SQLite store, its
snapshots and lease give-backs go to batchd's own tables in the file). The spider is loaded by a
throwaway probe child (its settings and namespace come back as JSON), then the supervisor allocates the shared
LedgerBlock and forks its children, then loops, one thread, never blocking for long:

    wait for a child's sentinel or a signal's wake-up byte (at most TICK; a child whose sentinel fired
        before its exit status was there is polled instead, EXIT_POLL and more apart)
    dispatch the signals the handlers recorded (signal_inbox.py): TERM / INT warm stop (again: cold),
        QUIT cold stop, HUP reload and replace the children, TTIN / TTOU one worker more / fewer
    reap each child whose sentinel fired: one line with what it held in memory, its row
        cleared, what follows (respawn.py: now, after a backoff, or the supervisor's stop)
    escalate (escalation.py): a child silent past CHILD_TIMEOUT gets SIGABRT, then SIGKILL; a stopping
        one past STOP_TIMEOUT gets SIGQUIT (cold), then SIGKILL
    fill the seats: spawn what is missing, retire (warm) what is too many
    tell systemd: READY=1 once the children are up, WATCHDOG=1 while every child is fresh or being
        replaced, STATUS= every STATUS_INTERVAL, EXTEND_TIMEOUT_USEC while draining

What it reports (the snapshot on the status board, the STATUS= text, /metrics) its report makes
(reporting/supervisor_report.py): at each report tick the supervisor hands it what it knows, and
works out no figure itself.

A warm stop ends when every child has exited: each worker finishes its tasks, flushes and
writes back, so the ledger reaches 0; what a child still held when it ended is logged.
"""
import collections
import gc
import logging
import multiprocessing
import os
import signal
import socket
import time
from typing import Optional

from .child import Child, ChildSpec, Plan, Seats, after_abort, child_main, describe_exit, probe, start_child
from .escalation import KILL_GRACE, escalate, healthy, warn_short_watchdog
from .respawn import after_end
from .signal_inbox import SignalInbox
from ..backends.ports import SupervisorPorts
from ..config import Settings
from ..errors import BackendUnavailable, ConfigError, ExitCode
from ..settle.ledger import LedgerBlock, Phase
from .loader import SpiderSource
from ..reporting.snapshots import supervisor_ports
from ..reporting.supervisor_report import Reporter, Supervised, SupervisedChild, SupervisorReport
from ..service.systemd import Notifier, counted, set_log_namespace, set_process_role, set_process_title
from ..worker.prefetch import worker_token_prefix
from ..worker.worker import ledger_slots

log = logging.getLogger("batchd.supervisor")

TICK = 0.25               # the loop's longest wait: every timer is checked this often
EXIT_POLL = 0.002         # the first wait for the exit status of a child whose sentinel fired; it doubles
EXTEND_EVERY = 2.0        # while draining, EXTEND_TIMEOUT_USEC this often,
EXTEND_BY = 10.0          # each granting this much: a supervisor that hangs is not waited for long
GC_YOUNG_THRESHOLD = 10_000   # allocations between two young collections, in the supervisor and its children
SPARE_WORKER_ROWS = 8     # ledger rows beyond twice the wanted workers: TTIN, and a reload's overlap
MASTER_ROWS = 2           # the master and, during a reload, its successor


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
        self.settings: Optional[Settings] = None          # these once the spider is loaded (_begin)
        self.namespace: Optional[str] = None
        self.items_in = ""                                 # where the spider's items go (Runtime.items_place)
        self.block: Optional[LedgerBlock] = None
        self.ports: Optional[SupervisorPorts] = None     # the board, and the leases of a dead worker to give back
        # Everything it reports (the snapshot, STATUS=, /metrics) comes from its report, handed what it knows.
        self.report = SupervisorReport(Reporter(role=plan.verb, host=self.host, instance=plan.instance_key,
                                                seat=plan.named(plan.verb), pid=self.pid))
        self.restarts: dict = {}                 # role -> children that ended unasked (for the metrics)
        self.exit_code = ExitCode.OK
        self.stopping = False
        self.announce_ready = True
        self.ended: collections.Counter[str] = collections.Counter()   # the children gone: totals, what they left
        self.signals = SignalInbox()
        # --refetch goes to the first master only: one respawned, or started by a reload, opens batches as usual.
        self.refetch_asked = plan.refetch
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
        self.signals.install()
        try:
            # A spider that does not load (a syntax error, an import of its own that fails, no such class, a bad
            # setting) is a ConfigError at once: no retry mends it.
            self._begin(*probe(self.context, self.source, self._forget_in_child, self._pet_watchdog))
            # What the supervisor holds now (its modules above all) lives as long as it does: out of the
            # collector's reach, a child's collections do not write to (and copy) those shared pages, and
            # the exit does not walk them (0.1 s of a 0.4 s `batchd run --once` of a small batch).
            gc.freeze()
            # A worker keeps each task's objects (its run, lease, item) until the flush lands them, a
            # second or so: at the default 700 it collected every 11 tasks, 28-53 us of CPU per task,
            # where the bare loop spends 2-6 (docs/performance.md). The children inherit this.
            gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
            self._fill_seats(time.monotonic())     # the children start now, not after the loop's first TICK
            self._report(time.monotonic())         # and their first figures are there before a first scrape
            while self.children or not self.stopping:
                self._turn()
        except (ConfigError, BackendUnavailable) as e:      # 78, or 69 when a backend is down as it starts
            log.error("%s", e)
            self.exit_code = e.exit_code
        finally:
            self._shut_down()
        return int(self.exit_code)

    def _begin(self, settings, namespace: str, items_in: str) -> None:
        self._apply(settings, namespace, items_in)
        workers = self.seats["worker"].wanted if "worker" in self.seats else None
        self.block = LedgerBlock(MASTER_ROWS if "master" in self.seats else 0,
                                 0 if workers is None else 2 * workers + SPARE_WORKER_ROWS,
                                 ledger_slots(settings))
        log.info("supervising %s for namespace %r: %s; ledger of %d bytes (%d slots per worker)",
                 self.source.path, namespace, " + ".join(_count(s.wanted, r) for r, s in self.seats.items()),
                 self.block.size, self.block.slots_per_worker)
        warn_short_watchdog(settings.CHILD_TIMEOUT)
        if settings.METRICS_PORT:      # before the first fork: the children count into its directory
            self.report.serve_metrics(settings.METRICS_ADDRESS, settings.METRICS_PORT)

    def _apply(self, settings, namespace: str, items_in: str) -> None:
        """Adopt resolved settings (at start and after a reload); `items_in`: where the spider's items go."""
        self.settings, self.namespace, self.items_in = settings, namespace, items_in
        set_log_namespace(namespace)
        logging.getLogger("batchd").setLevel(settings.LOG_LEVEL.upper())
        set_process_title(f"batchd: supervisor {self._where()}")
        for role in self.plan.roles:
            wanted = 1 if role == "master" else self._wanted_workers(settings)
            if role in self.seats:
                self.seats[role].wanted, self.seats[role].next_spawn = wanted, 0.0
            else:
                self.seats[role] = Seats(wanted=wanted)
                self.restarts[role] = 0     # /metrics shows each role's count, 0 until one ends
        self._close_ports()      # the namespace or the store may have changed with a reload
        self.ports = supervisor_ports(settings, namespace)
        self.report.adopt(settings, namespace, self._where(), self.ports)

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
        # A child's sentinel (its end of a pipe) fires as its process closes its files, a moment before the
        # kernel has its exit status (milliseconds, for a worker with many threads). Waited on again, the
        # sentinel would answer at once, hundreds of turns in a row: such a child is polled instead.
        exiting = [child for child in self.children if child.exiting_since is not None]
        sentinels = {child.process.sentinel: child for child in self.children if child.exiting_since is None}
        ready = self.signals.wait(list(sentinels), self._exit_poll(exiting) if exiting else TICK)
        self._dispatch_signals()
        now = time.monotonic()
        for child in exiting + [sentinels[handle] for handle in ready if handle in sentinels]:
            self._reap(child, now)
        escalate(self.children, self._ledger, self._loaded_settings, now)
        if not self.stopping:
            self._fill_seats(now)
        self._report(now)

    @staticmethod
    def _exit_poll(exiting: list) -> float:
        """The wait before looking again for the exit status of children whose sentinel fired: EXIT_POLL, and
        as long again as the longest has been waited for (a child that shut its end of the pipe and lives on
        costs a turn per TICK, not a busy loop)."""
        waited = time.monotonic() - min(child.exiting_since for child in exiting)
        return min(TICK, max(EXIT_POLL, waited))

    # -- signals: the handlers only record them (signal_inbox.py), the loop acts
    def _pause(self, seconds: float) -> bool:
        """Sleep, awake to signals; True if one of them asks to stop."""
        self.signals.wait([], seconds)
        return self.signals.asks_to_stop()

    def _dispatch_signals(self) -> None:
        handlers = {signal.SIGTERM: self._on_stop_signal, signal.SIGINT: self._on_stop_signal,
                    signal.SIGQUIT: self._on_quit, signal.SIGHUP: self._on_hup,
                    signal.SIGTTIN: self._on_ttin, signal.SIGTTOU: self._on_ttou}
        for sig in self.signals.take():
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
        except (ConfigError, BackendUnavailable) as e:
            log.error("reload failed, the running children carry on: %s", e)
            self.notifier.ready(self._report_tick())
            return
        now = time.monotonic()
        current = [child for child in self.children if child.retiring_since is None]
        for child in current:
            child.retire(now)
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
                child.retire(now)
        self.notifier.stopping(self._report_tick())
        self._due["extend"] = now

    def _cold_stop(self, reason: str) -> None:
        if not self.stopping:
            self.stopping = True
            self.notifier.stopping(self._report_tick())
        now = time.monotonic()
        log.warning("%s: cold stop: in-flight tasks are abandoned and come back through their leases", reason)
        for child in self.children:
            if child.cold_since is None and child.killed_since is None:
                child.go_cold(now)

    # -- the children's lives
    def _fill_seats(self, now: float) -> None:
        for role, seats in self.seats.items():
            active = [c for c in self.children if c.spec.role == role and c.retiring_since is None]
            for child in sorted(active, key=lambda c: c.spawned_at)[seats.wanted:]:
                log.info("%s retires: %d %ss wanted", child.label, seats.wanted, role)
                child.retire(now)
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
        refetch = role == "master" and self.refetch_asked
        spec = ChildSpec(role=role, number=number, row=row, once=self.plan.once,
                         keep_alive=not (self.plan.once and self.plan.verb == "worker"),
                         metered=self.report.metrics is not None, refetch=refetch,
                         name=self.plan.named(base), title=f"batchd: {base} {self._where()}")
        if refetch:
            self.refetch_asked = False
        self._ledger.prepare(row)
        process = self.context.Process(target=child_main, name=f"batchd-{base.replace(' ', '-')}",
                                       args=(spec, self.source, self.block, self.pid, self._forget_in_child))
        start_child(process)
        self.children.append(Child(spec=spec, process=process, spawned_at=now))
        log.info("%s started (pid %d)%s", spec.name, process.pid,
                 "; --refetch: the next batch it opens fetches every page whole and runs every callback"
                 if refetch else "")

    def _forget_in_child(self) -> None:
        """Run in every forked child: the supervisor's pipe and notify socket are not its own."""
        self.signals.close()
        self.notifier.close()
        self.report.forget_in_child()

    def _reap(self, child: Child, now: float) -> None:
        code = child.process.exitcode
        if code is None:      # the sentinel fired a moment before the exit status is there: polled (_turn)
            child.exiting_since = child.exiting_since or now
            return
        self.children.remove(child)
        self.report.child_ended(child.pid)      # its live gauge goes from /metrics; its counters stay in the sums
        lost, row = self._ledger.lost(child.spec.row), self._ledger.row(child.spec.row)
        self.ended.update(done=row.done, failed=row.failed, items=row.items,
                          left_items=lost.items, left_tasks=len(lost.task_keys))
        if lost.task_keys:
            self._give_back_leases_of(child)
        after = after_end(self.plan, self.seats[child.spec.role], child, code, now, served=bool(row.served))
        if after.restart:
            self.restarts[child.spec.role] += 1
        held = (f"; {lost.items} items of {len(lost.task_keys)} tasks lost from memory (tasks "
                f"{', '.join(lost.task_keys)}): those tasks are not done, they come back through their leases"
                if lost.task_keys else "")
        # A once-mode master's 3 or 65 is how its batch ended, not a fault of the child: its close said why.
        level = logging.INFO if (code in (ExitCode.OK, ExitCode.TASKS_FAILED, ExitCode.DATAERR)
                                 and not lost.task_keys) else logging.WARNING
        log.log(level, "%s %s%s%s%s", child.label, describe_exit(code), after_abort(child, code), held, after.tail)
        self._ledger.clear(child.spec.row)
        child.process.close()
        if after.stop is not None:
            self._begin_stop(*after.stop)

    def _give_back_leases_of(self, child: Child) -> None:
        """A dead worker's leases are due at once: the master requeues its tasks at its next patrol
        instead of when their leases would have expired."""
        if self.ports is None:
            return
        try:
            given = self.ports.leases.expire_leases_of(worker_token_prefix(child.pid))
            if given:
                self.ports.wake.wake_master()
        except Exception as e:   # they come back all the same, once their leases expire
            log.warning("cannot give back the leases %s held: %s (they come back when they expire)", child.label, e)
            return
        if given:
            log.info("gave back the %d leases %s held: the master requeues them now", given, child.label)

    # -- telling systemd, and the report
    def _report(self, now: float) -> None:
        if self.announce_ready and not self.stopping and self._seats_filled():
            self.announce_ready = False
            text = self._report_tick()
            self.notifier.ready(text)
            log.info("ready: %s", text)
        self._pet_watchdog()
        if now >= self._due["status"]:
            self._due["status"] = now + self._loaded_settings.STATUS_INTERVAL
            self.notifier.status(self._report_tick())
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
        """The rule behind WATCHDOG=1 (escalation.py): every child fresh or being replaced."""
        return healthy(self.children, self._ledger, self._loaded_settings.CHILD_TIMEOUT, now)

    def _report_tick(self) -> str:
        """The report's figures made from what this supervisor knows now; the STATUS= text back."""
        children = tuple(SupervisedChild(role=c.spec.role, name=c.spec.name, pid=c.pid, row=c.spec.row,
                                         serving=c.retiring_since is None, number=c.spec.number)
                         for c in self.children)
        wanted = self.seats["worker"].wanted if "worker" in self.seats else 0
        return self.report.tick(Supervised(self._ledger, children, wanted, self.ended, self.restarts))

    # -- the end
    def _shut_down(self) -> None:
        _step("kill the children left", self._kill_leftovers)
        _step("remove the status snapshot", self._close_ports)
        _step("stop serving metrics", self.report.stop_serving_metrics)
        _step("stop measuring the workers' memory", self.report.stop_measuring)
        _step("restore the signal handlers", self.signals.restore)
        if self.block is None:
            return          # no child ever ran: the reason was the one line already logged
        left_items, left_tasks = self.ended["left_items"], self.ended["left_tasks"]
        log.info("exit %d: %s done, %d failed, %s stored by this host's workers (in %s); %s",
                 self.exit_code, counted(self.ended["done"], "task"), self.ended["failed"],
                 counted(self.ended["items"], "item"), self.items_in,
                 f"{counted(left_items, 'item')} of {counted(left_tasks, 'task')} were left in memory (their leases "
                 "bring them back)"
                 if left_tasks else "the ledger is at 0")

    def _kill_leftovers(self) -> None:
        for child in self.children:
            child.send(signal.SIGKILL)
            child.process.join(KILL_GRACE)

    def _close_ports(self) -> None:
        """The snapshot off the board while its ports are open, then the ports."""
        ports, self.ports = self.ports, None
        try:
            self.report.withdraw()
        finally:
            if ports is not None:
                ports.close()


def _step(what: str, action) -> None:
    """One teardown step: its failure is logged and skips no other step."""
    try:
        action()
    except Exception as e:   # teardown goes on whatever one step met
        log.error("while exiting, could not %s: %s: %s", what, type(e).__name__, e)
