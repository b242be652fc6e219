"""What batchd says to systemd and to the journal.

Logging: one line per event, naming the role and pid. Under systemd (stderr is the
journal, JOURNAL_STREAM) each line starts with a `<N>` syslog priority and carries
no timestamp (the journal adds its own); on a terminal lines carry a timestamp.

Notifications (`Notifier`): only the supervisor talks to systemd (`NotifyAccess=main`
drops what a forked child sends). Nothing is sent without NOTIFY_SOCKET; sdnotify and
setproctitle are optional imports (the `daemon` extra, python3-sdnotify and
python3-setproctitle on Debian).
"""
import logging
import os
import sys
import threading
import time

_role = {"process": "batchd"}
_thread_role = threading.local()

PRIORITIES = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


def set_process_role(role: str) -> None:
    """The role every log line of this process names (master, worker 2, supervisor...)."""
    _role["process"] = role


def set_thread_role(role: str) -> None:
    """For threads running another role inside one process (a MemoryBatchStore batch)."""
    _thread_role.role = role


def current_role() -> str:
    return getattr(_thread_role, "role", None) or _role["process"]


class RoleFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.role = current_role()
        record.priority = PRIORITIES.get(record.levelno, 6)
        return True


def stderr_is_journal(environ=os.environ) -> bool:
    stream = environ.get("JOURNAL_STREAM", "")
    try:
        device, inode = (int(part) for part in stream.split(":"))
        st = os.fstat(sys.stderr.fileno())
    except (ValueError, OSError, AttributeError):
        return False
    return st.st_dev == device and st.st_ino == inode


def setup_logging(level: str = "INFO", force: bool = False) -> None:
    """Install batchd's handler on the `batchd` logger, unless the application configured logging
    itself (then its handlers get batchd's records as usual)."""
    logger = logging.getLogger("batchd")
    logger.setLevel(level.upper())
    ours = [h for h in logger.handlers if getattr(h, "batchd_handler", False)]
    if ours and not force:
        return
    if logging.getLogger().handlers and not force:
        return
    for handler in ours:
        logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.batchd_handler = True
    handler.addFilter(RoleFilter())
    if stderr_is_journal():
        handler.setFormatter(logging.Formatter("<%(priority)d>%(role)s[%(process)d]: %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(role)s[%(process)d] %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False


def set_process_title(title: str) -> None:
    """What ps and top show for this process (`batchd: worker 2 <ns>`), when setproctitle is there."""
    try:
        import setproctitle
    except ImportError:
        return
    setproctitle.setproctitle(title)


def under_systemd(environ=os.environ) -> bool:
    """Started by systemd as a service (or told to notify it)."""
    return bool(environ.get("INVOCATION_ID") or environ.get("NOTIFY_SOCKET"))


def watchdog_usec(environ=os.environ) -> int:
    """WatchdogSec= of this service in microseconds, 0 when off or meant for another process."""
    try:
        usec = int(environ.get("WATCHDOG_USEC", "0"))
        owner = int(environ.get("WATCHDOG_PID", "0") or 0)
    except ValueError:
        return 0
    return usec if usec > 0 and owner in (0, os.getpid()) else 0


class Notifier:
    """sd_notify(3) for the supervisor. Every method is a no-op without NOTIFY_SOCKET."""

    def __init__(self):
        # sdnotify reads NOTIFY_SOCKET from os.environ itself: so does this class, never another mapping.
        self._notifier = None
        self.watchdog_interval = watchdog_usec() / 2e6 or None   # half of WatchdogSec, in s
        if not os.environ.get("NOTIFY_SOCKET"):
            return
        try:
            import sdnotify
        except ImportError:
            logging.getLogger("batchd").warning(
                "NOTIFY_SOCKET is set but sdnotify is missing (pip install \"batchd[daemon]\" or apt install "
                "python3-sdnotify): systemd will not hear that batchd is ready")
            return
        self._notifier = sdnotify.SystemdNotifier()

    @property
    def enabled(self) -> bool:
        return self._notifier is not None

    def send(self, *fields: str) -> None:
        if self._notifier is not None:
            # sdnotify encodes as latin-1 and drops what does not fit: keep every field ASCII.
            self._notifier.notify("\n".join(f.encode("ascii", "replace").decode() for f in fields))

    def ready(self, status: str) -> None:
        self.send("READY=1", f"STATUS={status}")

    def status(self, status: str) -> None:
        self.send(f"STATUS={status}")

    def watchdog(self) -> None:
        self.send("WATCHDOG=1")

    def reloading(self) -> None:
        # MONOTONIC_USEC: systemd >= 253 (Type=notify-reload) wants it beside RELOADING=1.
        self.send("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")

    def stopping(self, status: str) -> None:
        self.send("STOPPING=1", f"STATUS={status}")

    def extend_timeout(self, seconds: float) -> None:
        """While draining: systemd waits this much longer before it gives up on the stop."""
        self.send(f"EXTEND_TIMEOUT_USEC={int(seconds * 1e6)}")

    def close(self) -> None:
        """In a forked child: let go of the inherited socket; children never notify."""
        if self._notifier is not None and self._notifier.socket is not None:
            self._notifier.socket.close()
        self._notifier = None
