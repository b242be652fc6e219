"""The supervisor as a process other commands deal with: found by its pid (`batchd reload`), and
detached from the terminal with a pid file (`batchd run --daemon`, on hosts without systemd).

A pid alone names a process only for as long as it lives: `RunningSupervisor` takes a pidfd first
and only then checks the command line behind it, so a supervisor that exits meanwhile and leaves
its pid to another process is never signalled in its place. The commands keep the arguments and
their messages; this module keeps /proc, the pidfd, the pid file and python-daemon.
"""
import fcntl
import os
import signal
from typing import Callable, Optional

from ..errors import BatchdError, ConfigError, ExitCode

SUPERVISOR_VERBS = ("run", "master", "worker")
TITLE_PREFIX = "batchd: "              # every process title batchd sets (setproctitle)
SUPERVISOR_TITLE = "batchd: supervisor"


class NotASupervisor(BatchdError):
    """--pid names no running batchd supervisor: nothing is signalled."""

    exit_code = ExitCode.UNAVAILABLE


# -- reload: a supervisor found by its pid
class RunningSupervisor:
    """A pidfd on PID once its command line shows a batchd supervisor, closed at the end of the `with`
    block. The signal goes through the pidfd, never through the bare pid."""

    def __init__(self, pid: int):
        self.pid = pid
        self._pidfd: Optional[int] = None

    def __enter__(self) -> "RunningSupervisor":
        self._pidfd = open_supervisor(self.pid)
        return self

    def __exit__(self, *exc_info) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def send(self, signum: int) -> None:
        assert self._pidfd is not None, "send() inside the with block only"
        try:
            signal.pidfd_send_signal(self._pidfd, signum)
        except OSError as e:       # it exited since it was opened, or is another user's
            raise NotASupervisor(f"pid {self.pid}: {e.strerror}; nothing signalled") from None


def open_supervisor(pid: int) -> int:
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as e:
        raise NotASupervisor(f"pid {pid}: {e.strerror}; nothing signalled") from None
    if not is_batchd_supervisor(pid):
        os.close(pidfd)
        shown = " ".join(command_line(pid))[:100] or "its command line is hidden from this user"
        raise NotASupervisor(f"pid {pid} is not a batchd supervisor ({shown}); nothing signalled")
    return pidfd


def is_batchd_supervisor(pid: int) -> bool:
    argv = command_line(pid)
    if len(argv) == 1 and argv[0].startswith(TITLE_PREFIX):     # the title batchd gave it
        return argv[0].startswith(SUPERVISOR_TITLE)
    # Without setproctitle a process shows its command, and a forked child its supervisor's.
    return batchd_verb(argv) in SUPERVISOR_VERBS and command_line(parent_of(pid)) != argv


def batchd_verb(argv: list) -> Optional[str]:
    """VERB of `batchd VERB ...`, `python3 /usr/bin/batchd VERB ...` or `python -m batchd VERB ...`."""
    for i, arg in enumerate(argv[:-1]):
        if os.path.basename(arg) == "batchd":
            return argv[i + 1]
    return None


def command_line(pid: int) -> list:
    """The arguments /proc shows for PID (its title, once batchd set one); [] when it is gone or hidden."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [arg.decode(errors="replace") for arg in raw.split(b"\0") if arg]


def parent_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


# -- --daemon, for hosts without systemd
class PidFile:
    """The pid file python-daemon enters once detached: written with our pid and flock-ed while we
    run, so a second `--daemon` is refused; removed at exit."""

    def __init__(self, path: str):
        self.path = path
        self._fd: Optional[int] = None

    def __enter__(self) -> "PidFile":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise ConfigError(f"pid file {self.path} is held by a running batchd (pid {holder})") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def __exit__(self, *exc_info) -> None:
        if self._fd is None:
            return
        try:
            os.unlink(self.path)
        finally:
            os.close(self._fd)
            self._fd = None

    def refuse_if_held(self) -> None:
        """Before detaching: a clear error on the terminal instead of one in the log file."""
        with self:
            pass


def run_detached(pid_path: str, log_path: str, run: Callable[[], int]) -> int:
    """`run()` in the background, detached from the terminal, holding the pid file at `pid_path`, with
    stdout and stderr appended to `log_path`; what it returns is the exit code."""
    try:
        import daemon
    except ImportError:
        raise ConfigError('--daemon needs python-daemon: pip install "batchd[daemon]" '
                          "(or apt install python3-daemon)") from None
    pidfile = PidFile(pid_path)
    pidfile.refuse_if_held()
    log_file = open(log_path, "a", buffering=1, encoding="utf-8")
    # The working directory stays: relative paths in the config (FAILED_ITEMS_PATH...) keep their meaning.
    with daemon.DaemonContext(working_directory=os.getcwd(), umask=0o027, pidfile=pidfile, stdout=log_file,
                              stderr=log_file, signal_map={}):
        return run()
