"""What batchd says to systemd and to the journal.

Logging: one record per event, naming the role and pid, and no record can pass for two. A
record's message is one line: control characters in it (CR, LF, NUL, ESC, the rest of C0 and C1,
DEL, U+2028/U+2029) are escaped as Python writes them in a string literal (`\\r`, `\\x00`), so
that a URL or a response quoted in a message cannot forge log lines. A traceback keeps its line
structure, except that the text of each exception (its message, its notes) is escaped too.

Where the record goes:
- stderr is the journal (JOURNAL_STREAM) and python3-systemd is installed: one journal entry per
  record through `systemd.journal.JournalHandler`, the traceback inside MESSAGE, PRIORITY from
  the level, SYSLOG_IDENTIFIER=batchd and batchd's fields (`JournalFields`): BATCHD_ROLE
  (supervisor, master, worker), BATCHD_NAMESPACE, and from a worker's thread busy with a task
  BATCHD_BATCH and BATCHD_TASK_ID, so that `journalctl BATCHD_TASK_ID=42` tells one task's story;
- stderr is the journal without python3-systemd: one journal entry per line, each line
  prefixed with the record's `<N>` syslog priority and its role and pid, the lines after the
  first marked `role[pid] |` where the first says `role[pid]:`;
- elsewhere (a terminal): a timestamp, the level, role and pid, then `    |` before each line
  of a traceback.

Notifications (`Notifier`): only the supervisor talks to systemd (`NotifyAccess=main`
drops what a forked child sends). Nothing is sent without NOTIFY_SOCKET; sdnotify,
setproctitle and systemd.journal are optional imports (the `daemon` extra, python3-sdnotify,
python3-setproctitle and python3-systemd on Debian).
"""
import importlib
import logging
import os
import re
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from typing import Optional

_role = {"process": "batchd", "namespace": ""}
_thread_role = threading.local()
_task = threading.local()     # .fields: the journal fields of the task the thread works on

# (highest level, syslog priority): a level between two standard ones takes the more severe
# priority, as JournalHandler maps it, so that both ways to the journal agree.
_PRIORITY_OF_LEVEL = ((logging.DEBUG, 7), (logging.INFO, 6), (logging.WARNING, 4), (logging.ERROR, 3),
                      (logging.CRITICAL, 2))
_ALERT = 1

# What a terminal or the journal could take for a line break or a control sequence: C0 (with
# CR, LF, NUL, ESC), DEL, C1 (with NEL) and the Unicode line and paragraph separators. Each is
# written as Python's ascii() writes it: \r, \n, \t, \x00, \x1b, \x85, \u2028.
_CONTROL_CHARACTERS = (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029)
_ESCAPES = {code: ascii(chr(code))[1:-1] for code in _CONTROL_CHARACTERS}

# Line prefixes, %-templates over a record: (the first line, each further line). A further line
# cannot pass for a first one: the two differ before the message begins, where no message reaches.
TERMINAL_LINES = ("%(asctime)s %(levelname)s %(role)s[%(process)d] ", "    | ")
JOURNAL_STREAM_LINES = ("<%(priority)d>%(role)s[%(process)d]: ", "<%(priority)d>%(role)s[%(process)d] | ")
JOURNAL_MESSAGE_LINES = ("%(role)s[%(process)d]: ", "  | ")


def set_process_role(role: str) -> None:
    """The role every log line of this process names (master, worker 2, supervisor...)."""
    _role["process"] = role


def set_thread_role(role: str) -> None:
    """For threads running another role inside one process (a MemoryBatchStore batch)."""
    _thread_role.role = role


def current_role() -> str:
    return getattr(_thread_role, "role", None) or _role["process"]


def set_log_namespace(namespace: str) -> None:
    """The namespace this process serves (BATCHD_NAMESPACE)."""
    _role["namespace"] = namespace


@contextmanager
def task_log_fields(namespace: str, batch_id, task_id):
    """The calling thread works on this task: the journal fields of what it logs meanwhile say so."""
    _task.fields = {"BATCHD_NAMESPACE": namespace, "BATCHD_BATCH": batch_id, "BATCHD_TASK_ID": task_id}
    try:
        yield
    finally:
        _task.fields = None


def role_kind(role: str) -> str:
    """What a role is, without its number, instance or thread: `worker` for `worker 2@news.3`."""
    kind = re.match(r"[a-z]+", role)
    return kind.group() if kind else role


def syslog_priority(levelno: int) -> int:
    for highest, priority in _PRIORITY_OF_LEVEL:
        if levelno <= highest:
            return priority
    return _ALERT


FAILURE_LINE_MOST = 500     # characters of a task's failure line in the log (its record keeps the whole reason)
URL_MOST = 160              # characters of one URL in such a line: cut in the middle
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://\S+|(?<=with url: )\S+")    # (the second: urllib3's path)


def cut_middle(text: str, most: int) -> str:
    """`text`, at most `most` characters: its head and its tail around "…" (a URL's host and its last path
    segment, a message's class and its end, are what a reader looks for)."""
    if len(text) <= most:
        return text
    head = (most - 1) // 2
    return text[:head] + "…" + text[len(text) - (most - 1 - head):]


def failure_line(text: str, most: int = FAILURE_LINE_MOST) -> str:
    """A task's failure as one log line: each URL in it cut to URL_MOST in the middle, then the whole to `most`."""
    return cut_middle(_URL.sub(lambda found: cut_middle(found.group(0), URL_MOST), text), most)


def counted(n: int, noun: str) -> str:
    """'1 task', '2 tasks', '0 bad URLs': a count as a line says it (a noun whose plural takes an s)."""
    return f"{n} {noun if n == 1 else noun + 's'}"


def escape_controls(text: str) -> str:
    """`text` on one line, every control character escaped."""
    return text.translate(_ESCAPES)


def escaped_lines(text: str) -> list:
    """`text` cut at its line feeds only (str.splitlines would also cut at CR, NEL, U+2028...),
    each line escaped."""
    return [escape_controls(line) for line in text.removesuffix("\n").split("\n")]


def format_traceback(exc_info) -> str:
    """The traceback as Python prints it, but the text of each exception in the chain (its
    message and notes: often data, a URL or a server's answer) escaped onto its line.
    Exception groups indent their members' text: those keep their line breaks, which still
    land on continuation lines."""
    described = traceback.TracebackException(*exc_info)
    own_text = {piece for exception in _chain(described) for piece in exception.format_exception_only()}
    lines: list[str] = []
    for piece in described.format():
        lines += [escape_controls(piece.removesuffix("\n"))] if piece in own_text else escaped_lines(piece)
    return "\n".join(lines)


def _chain(described: traceback.TracebackException) -> list:
    """This exception and those it was raised from or while handling, each once."""
    chain: list[traceback.TracebackException] = []
    todo: list[Optional[traceback.TracebackException]] = [described]
    while todo:
        exception = todo.pop()
        if exception is not None and all(exception is not seen for seen in chain):
            chain.append(exception)
            todo += [exception.__cause__, exception.__context__]
    return chain


class RoleFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.role = current_role()
        record.priority = syslog_priority(record.levelno)
        return True


class JournalFields(RoleFilter):
    """JournalHandler sends every upper-case attribute of a record as a journal field: batchd's fields
    (this module's text) become attributes of each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        super().filter(record)
        record.BATCHD_ROLE = role_kind(current_role())
        if _role["namespace"]:
            record.BATCHD_NAMESPACE = _role["namespace"]
        for name, value in (getattr(_task, "fields", None) or {}).items():
            setattr(record, name, value)
        return True


class LineFormatter(logging.Formatter):
    """A record as its message line, then one line per line of its traceback and stack, each line
    starting with its prefix (see TERMINAL_LINES) and free of control characters. This is the one
    place batchd's records are escaped: every module's log calls get it."""

    def __init__(self, prefixes: tuple):
        first, further = prefixes
        super().__init__(first)   # for usesTime()
        self.first, self.further = first, further

    def format(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.getMessage())
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        first = self.first % record.__dict__ + record.message
        further = self.further % record.__dict__
        return "\n".join([first, *(further + line for line in self.further_lines(record))])

    def further_lines(self, record: logging.LogRecord) -> list:
        if record.exc_info:
            # Cached where logging expects it: JournalHandler sends it again as EXCEPTION_TEXT.
            record.exc_text = self.formatException(record.exc_info)
        lines = []
        for text in (record.exc_text, record.stack_info):
            if text:
                lines += escaped_lines(text)
        return lines

    def formatException(self, ei) -> str:
        return format_traceback(ei)


def stderr_is_journal(environ=os.environ) -> bool:
    stream = environ.get("JOURNAL_STREAM", "")
    try:
        device, inode = (int(part) for part in stream.split(":"))
        st = os.fstat(sys.stderr.fileno())
    except (ValueError, OSError, AttributeError):
        return False
    return st.st_dev == device and st.st_ino == inode


def journal_handler() -> Optional[logging.Handler]:
    """A JournalHandler from python3-systemd, None without it (pip cannot install it)."""
    try:
        # By its absolute name: Debian's package `systemd`, never this module (batchd.service.systemd).
        journal = importlib.import_module("systemd.journal")
    except ImportError:
        return None
    handler = journal.JournalHandler(SYSLOG_IDENTIFIER="batchd")
    handler.addFilter(JournalFields())
    handler.setFormatter(LineFormatter(JOURNAL_MESSAGE_LINES))
    return handler


def stream_handler(prefixes: tuple) -> logging.Handler:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RoleFilter())
    handler.setFormatter(LineFormatter(prefixes))
    return handler


def make_handler() -> logging.Handler:
    if not stderr_is_journal():
        return stream_handler(TERMINAL_LINES)
    return journal_handler() or stream_handler(JOURNAL_STREAM_LINES)


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
    handler = make_handler()
    setattr(handler, "batchd_handler", True)    # the mark setup_logging looks for (getattr above)
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
