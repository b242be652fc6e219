"""batchd's log records in their three forms: terminal lines, journal stream lines (stderr under
systemd, each line its own journal entry) and, with python3-systemd, one journal entry per
record through JournalHandler. A message cannot forge a line in any of them.

stderr is a file of the test's; "stderr is the journal" means JOURNAL_STREAM names that file's
device and inode, as systemd names its stream socket. A test that needs the journal stream lines
whatever is installed hides python3-systemd (`without_python_systemd`); the pip environment
never has it, the Debian one (.venv-debian) does.
"""
import importlib
import logging
import os
import re
import sys
from unittest import mock

import pytest

import batchd
from batchd.service.systemd import cut_middle, failure_line, set_thread_role, setup_logging

log = logging.getLogger("batchd.test_logging")   # any batchd module's logger, as they all log

FORGED = "\r\nX-Injected: 1"                     # what an operator found in a task URL
ESCAPED = r"\r\nX-Injected: 1"
CONTROL_CHARACTERS = [chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029)]
PID = os.getpid()


@pytest.fixture(autouse=True)
def batchd_logger():
    """This thread logs as `worker 2`; what setup_logging does to the `batchd` logger is undone after."""
    logger = logging.getLogger("batchd")
    handlers, level, propagate = logger.handlers[:], logger.level, logger.propagate
    set_thread_role("worker 2")
    yield logger
    set_thread_role("")
    logger.handlers[:], logger.propagate = handlers, propagate
    logger.setLevel(level)   # setLevel, not .level: it clears what the loggers below cached


@pytest.fixture
def stderr(tmp_path):
    """The file that is stderr while setup_logging runs (`log_to`)."""
    with open(tmp_path / "stderr", "w", encoding="utf-8") as stream:
        yield stream


@pytest.fixture
def journal_stderr(stderr, monkeypatch):
    st = os.fstat(stderr.fileno())
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
    return stderr


@pytest.fixture
def without_python_systemd(monkeypatch):
    """As on pip's environment: `import systemd.journal` fails."""
    monkeypatch.setitem(sys.modules, "systemd.journal", None)


def log_to(stream, level="INFO") -> None:
    """setup_logging with `stream` as stderr. (Not a monkeypatch in a fixture: pytest's capture
    puts its own sys.stderr back before the test runs.)"""
    with mock.patch.object(sys, "stderr", stream):
        setup_logging(level, force=True)


def lines_written(stream) -> list:
    stream.flush()
    with open(stream.name, encoding="utf-8") as f:
        text = f.read()
    assert text.endswith("\n"), repr(text)
    return text[:-1].split("\n")


def the_handler(logger) -> logging.Handler:
    (handler,) = [h for h in logger.handlers if getattr(h, "batchd_handler", False)]
    return handler


def raise_with(message: str):
    """An exception whose message is data, raised while handling another one that is too."""
    try:
        raise ValueError("bad page" + FORGED + "\x00")
    except ValueError as e:
        raise RuntimeError(message) from e


def log_failure(level=logging.ERROR):
    try:
        raise_with("no parse for http://site/a" + FORGED)
    except RuntimeError:
        log.log(level, "task %s failed: %s", 7, "http://site/a" + FORGED, exc_info=True)


def assert_no_control_character(text: str, but="") -> None:
    found = sorted({c for c in text if c in CONTROL_CHARACTERS and c not in but})
    assert not found, (found, text)


# -- one line per record, and its prefix

def test_terminal_line_names_time_level_role_and_pid(stderr):
    log_to(stderr)
    log.info("leased %d tasks", 3)
    (line,) = lines_written(stderr)
    assert re.fullmatch(rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d,\d{{3}} INFO worker 2\[{PID}\] leased 3 tasks", line)


@pytest.mark.parametrize("level, priority", [(logging.DEBUG, 7), (logging.INFO, 6), (logging.WARNING, 4),
                                             (25, 4), (logging.ERROR, 3), (logging.CRITICAL, 2)])
def test_journal_stream_line_starts_with_the_syslog_priority(journal_stderr, without_python_systemd,
                                                             level, priority):
    log_to(journal_stderr, "DEBUG")
    log.log(level, "patrol: %d pending", 12)
    assert lines_written(journal_stderr) == [f"<{priority}>worker 2[{PID}]: patrol: 12 pending"]


# -- no message can forge a line

@pytest.fixture(params=["terminal", "journal stream"])
def any_stderr(request):
    """stderr in either form batchd writes lines to."""
    if request.param == "terminal":
        return request.getfixturevalue("stderr")
    request.getfixturevalue("without_python_systemd")
    return request.getfixturevalue("journal_stderr")


def test_crlf_and_nul_in_a_message_are_escaped(any_stderr):
    log_to(any_stderr)
    log.warning("task %s failed: GET %s: HTTP 404", 7, "http://site/a" + FORGED + "\x00")
    (line,) = lines_written(any_stderr)
    assert line.endswith(rf"task 7 failed: GET http://site/a{ESCAPED}\x00: HTTP 404"), line


def test_every_control_character_in_a_message_is_escaped(any_stderr):
    log_to(any_stderr)
    log.warning("got %s", "".join(CONTROL_CHARACTERS))
    (line,) = lines_written(any_stderr)
    assert_no_control_character(line)
    for escape in (r"\x00", r"\t", r"\n", r"\x0b", r"\r", r"\x1b", r"\x7f", r"\x85", r"\u2028", r"\u2029"):
        assert escape in line


def test_journal_stream_traceback_is_every_line_at_the_records_priority(journal_stderr, without_python_systemd):
    log_to(journal_stderr)
    log_failure(logging.ERROR)
    log_failure(logging.WARNING)
    lines = lines_written(journal_stderr)
    records = {}
    for priority in (3, 4):
        first = f"<{priority}>worker 2[{PID}]: "
        further = f"<{priority}>worker 2[{PID}] | "
        record = records[priority] = [line for line in lines if line.startswith((first, further))]
        assert record[0] == f"{first}task 7 failed: http://site/a{ESCAPED}"
        assert record[1] == f"{further}Traceback (most recent call last):"
        assert all(line.startswith(further) for line in record[1:])
        # Both exceptions of the chain keep their message on one line.
        assert f"{further}ValueError: bad page{ESCAPED}\\x00" in record
        assert record[-1] == f"{further}RuntimeError: no parse for http://site/a{ESCAPED}"
    assert sum(map(len, records.values())) == len(lines), "every line belongs to one of the two records"


def test_terminal_traceback_lines_are_marked_under_their_record(stderr):
    log_to(stderr)
    log_failure()
    lines = lines_written(stderr)
    assert re.fullmatch(rf"\S+ \S+ ERROR worker 2\[{PID}\] task 7 failed: http://site/a\\r\\nX-Injected: 1", lines[0])
    assert all(line.startswith("    | ") for line in lines[1:])
    assert lines[-1] == f"    | RuntimeError: no parse for http://site/a{ESCAPED}"


# -- JournalHandler where python3-systemd is installed

def test_journal_handler_when_python_systemd_is_installed_else_stream_lines(journal_stderr, batchd_logger):
    log_to(journal_stderr)
    try:
        journal = importlib.import_module("systemd.journal")
    except ImportError:
        check_journal_stream_fallback(the_handler(batchd_logger), journal_stderr)
    else:
        check_journal_handler(the_handler(batchd_logger), journal)


def check_journal_stream_fallback(handler, stream):
    assert isinstance(handler, logging.StreamHandler)
    log_failure()
    lines = lines_written(stream)
    assert lines[0] == f"<3>worker 2[{PID}]: task 7 failed: http://site/a{ESCAPED}"
    assert all(line.startswith(f"<3>worker 2[{PID}] | ") for line in lines[1:])


def check_journal_handler(handler, journal):
    assert isinstance(handler, journal.JournalHandler)
    # Debian's python3-systemd, not batchd/systemd.py found under the name `systemd`.
    assert not journal.__file__.startswith(os.path.dirname(batchd.__file__)), journal.__file__
    sent = []
    # What JournalHandler calls to write an entry (its `sender_function`): the test reads it.
    handler.send = lambda MESSAGE, **fields: sent.append({"MESSAGE": MESSAGE, **fields})
    log_failure()
    (entry,) = sent
    # journald keeps only fields named in upper case, digits and underscores.
    entry = {name: str(value) for name, value in entry.items() if re.fullmatch(r"[A-Z0-9_]+", name)}
    assert (entry["PRIORITY"], entry["SYSLOG_IDENTIFIER"], entry["BATCHD_ROLE"]) == ("3", "batchd", "worker")
    message = entry["MESSAGE"].split("\n")
    assert message[0] == f"worker 2[{PID}]: task 7 failed: http://site/a{ESCAPED}"
    assert message[1] == "  | Traceback (most recent call last):"
    assert all(line.startswith("  | ") for line in message[1:])
    assert message[-1] == f"  | RuntimeError: no parse for http://site/a{ESCAPED}"
    for name, value in entry.items():
        assert_no_control_character(value, but="\n")


def test_a_failure_line_cuts_each_url_in_the_middle_then_the_whole_line():
    long_url = "http://a.example/" + "p" * 1000 + "/last"
    said = failure_line(f"task 7 failed: GET {long_url}: ConnectionError: HTTPConnectionPool(host='a.example', "
                        f"port=80): Max retries exceeded with url: /{'p' * 1000}/last (Caused by refused)")
    assert len(said) <= 500 and said.startswith("task 7 failed: GET http://a.example/ppp")
    assert "/last: ConnectionError: HTTPConnectionPool(" in said and said.endswith("/last (Caused by refused)")
    assert said.count("…") == 2, "each URL cut once, urllib3's path too"
    assert cut_middle("x" * 1000, 11) == "xxxxx…xxxxx" and cut_middle("short", 11) == "short"
    assert len(failure_line("e" * 5000)) == 500
