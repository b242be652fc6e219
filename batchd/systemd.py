"""What batchd says to systemd and to the journal.

Logging: one line per event, naming the role and pid. Under systemd (stderr is the
journal, JOURNAL_STREAM) each line starts with a `<N>` syslog priority and carries
no timestamp (the journal adds its own); on a terminal lines carry a timestamp.
"""
import logging
import os
import sys
import threading

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
