"""The supervisor's children: what runs in a process it forks (the master's loop, a worker's loop, or
the probe), and its account of each child (Plan, Child, Seats, how an end is described).

The supervisor forks with its signals blocked (`start_child`): the new child inherits the mask, so a
signal sent to it before it has its own handlers waits instead of reaching the supervisor's handlers copied
into it, where it was lost (a `--once` run's warm stop coming as a worker was forked: that worker never
stopped, and the run lasted until STOP_TIMEOUT's cold stop). First thing after the fork, before any user
code (`enter_child`):
1. drop the supervisor's signal handlers and wake-up fd (inherited through the fork) and
   ask the kernel for SIGTERM when the supervisor dies (PR_SET_PDEATHSIG): a SIGKILLed
   supervisor leaves no orphans; a parent already gone before the prctl is checked for;
2. TERM = warm stop (a repeated TERM stays warm: systemd's KillMode=control-group and the
   supervisor may both send one), QUIT = cold stop; INT, HUP, TTIN, TTOU are the
   supervisor's business (a terminal's Ctrl-C reaches the whole process group); then the
   signals are unblocked, and one sent meanwhile is acted on now;
3. let go of the supervisor's notify socket and NOTIFY_SOCKET: children never notify;
4. faulthandler on, so the SIGABRT a silent child gets prints where every thread was;
5. a thread that dies ends the child at once (the thread guard's fatal hook), with 78 for a
   configuration error met mid-run and 70 otherwise: the supervisor replaces it, and its
   tasks come back through their leases.

Exit codes tell the supervisor what happened: 0 a finished loop, 78 a configuration error
(`ExitCode.CONFIG`: it stops retrying after a few), 69 / 75 the once-mode results of the
master, anything else a crash (respawned at once if the child had served, else with backoff).

The probe is a short-lived child that imports the spider and sends back its resolved
settings and namespace, so that the supervisor sizes the ledger and names its Redis keys
without ever importing user code itself.
"""
import ctypes
import dataclasses
import faulthandler
import json
import logging
import math
import multiprocessing
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..config import Settings, settings_from_plain
from ..errors import BatchdError, ConfigError, ExitCode
from ..service.lifecycle import Backoff, StopFlag
from .loader import SpiderSource, build_runtime
from ..reporting.metrics import MULTIPROC_ENV, keep_quality
from ..worker.worker_metrics import MeteredLedger, WorkerMetrics
from ..service.systemd import set_log_namespace, set_process_role, set_process_title, setup_logging
from ..service.threads import guard
from ..worker.worker import ledger_slots

log = logging.getLogger("batchd.child")

PR_SET_PDEATHSIG = 1
SUPERVISOR_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP,
                      signal.SIGTTIN, signal.SIGTTOU)
LEFT_TO_THE_SUPERVISOR = (signal.SIGINT, signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU)
NOTIFY_VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
PROBE_TIMEOUT = 60.0
RESPAWN_CAP = 10.0        # the longest wait before replacing a child that died before it served


@dataclass(frozen=True)
class ChildSpec:
    role: str            # "master" or "worker"
    number: int          # the worker's number (1, 2 ...); 0 for the master
    row: int             # its row in the LedgerBlock
    once: bool           # the master runs the current batch to completion, then exits
    keep_alive: bool     # a worker waits for work (False: exits once the batch is done)
    name: str            # "worker 2" (with "@instance" when named): logs
    title: str           # "batchd: worker 2 <ns>": the process title
    metered: bool = False  # METRICS_PORT: a worker counts into its supervisor's metrics directory
    refetch: bool = False  # --refetch: the next batch the master opens trusts no validator


def enter_child(supervisor_pid: int, forget: Callable[[], None]) -> StopFlag:
    """The hygiene of every forked child; returns the StopFlag its signals drive."""
    signal.set_wakeup_fd(-1)
    for sig in SUPERVISOR_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    _die_with_parent(supervisor_pid)
    stop = StopFlag()
    signal.signal(signal.SIGTERM, lambda signum, frame: _warm(stop))
    signal.signal(signal.SIGQUIT, lambda signum, frame: stop.request_cold())
    for sig in LEFT_TO_THE_SUPERVISOR:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SUPERVISOR_SIGNALS)    # (blocked by start_child: one sent
    forget()                                                           # meanwhile reaches its handler now)
    for name in NOTIFY_VARIABLES:
        os.environ.pop(name, None)
    faulthandler.enable(all_threads=True)
    guard.on_fatal(_exit_now)
    return stop


def start_child(process: multiprocessing.process.BaseProcess) -> None:
    """Fork `process` with the supervisor's signals blocked in the forking thread, so in the child until
    enter_child has its handlers; the supervisor's own signals wait the moment a fork takes."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, SUPERVISOR_SIGNALS)
    try:
        process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _exit_now(reason: str, exit_code: int) -> None:
    """A thread of this child died (already logged CRITICAL): no half-alive child, exit at once."""
    logging.shutdown()
    os._exit(exit_code)


def _warm(stop: StopFlag) -> None:
    if not stop.is_set():
        stop.request()


def _die_with_parent(supervisor_pid: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_PDEATHSIG) failed (errno %d): this child outlives a killed supervisor",
                    ctypes.get_errno())
    if os.getppid() != supervisor_pid:     # the supervisor died before the prctl took effect
        os._exit(int(ExitCode.OK))


def child_main(spec: ChildSpec, source: SpiderSource, block, supervisor_pid: int,
               forget: Callable[[], None]) -> None:
    """The target of a supervised child's Process: its exit code is its report."""
    stop = enter_child(supervisor_pid, forget)
    set_process_role(spec.name)
    set_process_title(spec.title)
    sys.exit(_exit_code_of(lambda: _run_role(spec, source, block, stop)))


def _exit_code_of(body: Callable[[], Optional[int]]) -> int:
    """The body's own code (a once-mode master's outcome), else 0; an error's code."""
    try:
        code = body()
    except BatchdError as e:
        log.error("%s", e)
        return int(e.exit_code)
    except Exception:   # a crash of this child: logged whole, the supervisor respawns it
        log.exception("crashed")
        return int(ExitCode.FAILURE)
    return int(code or ExitCode.OK)


def _run_role(spec: ChildSpec, source: SpiderSource, block, stop: StopFlag) -> Optional[int]:
    runtime = build_runtime(source, keep_alive=spec.keep_alive)
    setup_logging(runtime.settings.LOG_LEVEL)
    set_log_namespace(runtime.namespace)
    if spec.role == "master":
        master = runtime.master(refetch=spec.refetch)
        if spec.metered:       # its supervisor's /metrics shows each batch it judges
            directory = os.environ[MULTIPROC_ENV]
            master.judged = lambda batch_id, figures: keep_quality(directory, figures)
        block.mark_running(spec.row)
        master.run(stop, lambda: block.master_beat(spec.row, master), once=spec.once,
                   on_outages=lambda outages: block.set_outages(spec.row, outages))
        return master.once_exit_code() if spec.once else None
    slots = ledger_slots(runtime.settings)
    metrics = WorkerMetrics(runtime.namespace) if spec.metered else None
    ledger = block.worker_ledger(spec.row, slots) if metrics is None else MeteredLedger(block, spec.row, slots, metrics)
    worker = runtime.worker(ledger=ledger, name=spec.name, keep_alive=spec.keep_alive, metrics=metrics)
    block.mark_running(spec.row)
    worker.run(stop, ledger.beat)
    return None


# -- the probe

def probe_main(source: SpiderSource, writer, supervisor_pid: int, forget: Callable[[], None]) -> None:
    enter_child(supervisor_pid, forget)
    set_process_title("batchd: probe")
    try:
        runtime = build_runtime(source)
        message = {"settings": dataclasses.asdict(runtime.settings), "namespace": runtime.namespace,
                   "items_in": runtime.items_place()}
    except ConfigError as e:
        message = {"error": str(e)}
    writer.send_bytes(json.dumps(message).encode())
    writer.close()


def probe(context, source: SpiderSource, forget: Callable[[], None],
          tick: Callable[[], None]) -> tuple[Settings, str, str]:
    """(Settings, namespace, where its items go) of the spider, resolved in a throwaway child; ConfigError if it
    does not load (a load connects to no backend: nothing of it is worth a retry). `tick` runs while waiting (the
    supervisor keeps its watchdog going through a reload)."""
    reader, writer = context.Pipe(duplex=False)
    process = context.Process(target=probe_main, args=(source, writer, os.getpid(), forget),
                              name="batchd-probe", daemon=True)
    start_child(process)
    writer.close()
    try:
        message = _probe_answer(reader, process, tick)
    finally:
        reader.close()
        process.join(5)
    if "error" in message:
        raise ConfigError(message["error"])
    return settings_from_plain(message["settings"], "the probe's answer"), message["namespace"], message["items_in"]


def _probe_answer(reader, process, tick: Callable[[], None]) -> dict:
    waited = 0.0
    while not reader.poll(0.2):
        tick()
        waited += 0.2
        if not process.is_alive() and not reader.poll(0):
            raise ConfigError(f"loading the spider killed its process (exit code {process.exitcode})")
        if waited > PROBE_TIMEOUT:
            process.kill()
            raise ConfigError(f"loading the spider took more than {PROBE_TIMEOUT:.0f} s")
    try:
        return json.loads(reader.recv_bytes())
    except EOFError:
        raise ConfigError(f"loading the spider ended its process (exit code {process.exitcode})") from None


# -- the supervisor's account of its children

@dataclass(frozen=True)
class Plan:
    verb: str                          # "run", "master" or "worker": what this supervisor runs
    once: bool = False                 # the current batch to completion, then exit
    instance: Optional[str] = None     # --instance NAME
    refetch: bool = False              # --refetch: the next batch the (first) master opens trusts no validator

    @property
    def roles(self) -> tuple:
        return {"run": ("master", "worker"), "master": ("master",), "worker": ("worker",)}[self.verb]

    @property
    def instance_key(self) -> str:
        return self.instance or self.verb

    def named(self, base: str) -> str:
        return f"{base}@{self.instance}" if self.instance else base


@dataclass(eq=False)
class Child:
    spec: ChildSpec
    process: multiprocessing.process.BaseProcess
    spawned_at: float
    retiring_since: Optional[float] = None    # SIGTERM sent: warm stop
    cold_since: Optional[float] = None        # SIGQUIT sent: cold stop
    aborted_since: Optional[float] = None     # SIGABRT sent: it went silent
    killed_since: Optional[float] = None      # SIGKILL sent
    exiting_since: Optional[float] = None     # its sentinel fired before its exit status was there
    stuck_logged: bool = False

    @property
    def label(self) -> str:
        return f"{self.spec.name} (pid {self.process.pid})"

    @property
    def pid(self) -> int:
        """The child's process id: a Child is made once its process has started."""
        if self.process.pid is None:
            raise RuntimeError(f"{self.spec.name} has not started")
        return self.process.pid

    def retire(self, now: float) -> None:
        """A warm stop: it finishes its tasks, flushes and writes back."""
        self.retiring_since = now
        self.send(signal.SIGTERM)

    def go_cold(self, now: float) -> None:
        """A cold stop: its tasks in flight are abandoned to their leases."""
        self.retiring_since = self.retiring_since or now
        self.cold_since = now
        self.send(signal.SIGQUIT)

    def send(self, sig: int) -> None:
        # exitcode polls waitpid(pid): a pid already reaped might belong to someone else by now.
        if self.process.exitcode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass


@dataclass
class Seats:
    """How many children of one role are wanted, and when the next may start."""

    wanted: int
    backoff: Backoff = field(default_factory=lambda: Backoff(cap=RESPAWN_CAP))
    next_spawn: float = 0.0
    config_failures: int = 0
    last_config_failure: float = -math.inf


def describe_exit(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    if code == 0:
        return "exited"
    known = {c.value: c.name for c in ExitCode}
    return f"exited with {code}" + (f" ({known[code]})" if code in known else "")


def after_abort(child: Child, code: int) -> str:
    """A child sent SIGABRT may die of another signal while faulthandler dumps its threads' stacks (it
    walks them while they run again): say so, rather than leave a SIGSEGV unexplained."""
    if child.aborted_since is None or code in (-signal.SIGABRT, -signal.SIGKILL) or code >= 0:
        return ""
    return " while dumping its stacks after SIGABRT"
