"""Exit codes of the `batchd` command and the exceptions that map onto them.

The codes are sysexits(3) values and part of the contract: docs/architecture.md (Exit codes)
says who returns each and what systemd does with it. Unit files name `CONFIG` in
`RestartPreventExitStatus=`, scripts test for the others.
"""
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1        # and, in once mode, the batch ended with failed tasks and no quality flag (SPEC)
    # Between a once-mode master and its supervisor only: its batch ended with failed tasks. A child's own 1 is a
    # crash, to be replaced; the supervisor ends the command with 1 (FAILURE) for this one, as the contract says.
    TASKS_FAILED = 3
    DATAERR = 65       # once mode: the batch's quality checks flagged it (batchd/quality/), failed tasks or not
    UNAVAILABLE = 69   # MySQL or Redis unreachable (once mode, and commands; resident processes wait)
    SOFTWARE = 70      # a thread of batchd died, or a task's thread would not come back: replace the process
    IOERR = 74         # a file batchd must write (FAILED_ITEMS_PATH) refused the data: disk full, read-only
    TEMPFAIL = 75      # another master holds the namespace lock (once mode)
    CONFIG = 78        # bad setting, missing table or column, spider not importable


class BatchdError(Exception):
    """An error that ends a batchd entry point with one log line and an exit code."""

    exit_code = ExitCode.FAILURE


class ConfigError(BatchdError):
    """Something the operator must fix: a setting, a table, a column, the spider path."""

    exit_code = ExitCode.CONFIG


class BackendUnavailable(BatchdError):
    """MySQL, Redis or another backend could not be reached (a transient condition). `backend`
    names it ("MySQL", "Redis", "SQLite") for the outage bookkeeping and STATUS= lines."""

    exit_code = ExitCode.UNAVAILABLE

    def __init__(self, message: str, backend: str = "the backend"):
        super().__init__(message)
        self.backend = backend


class MasterLockHeld(BatchdError):
    """Another master owns this namespace."""

    exit_code = ExitCode.TEMPFAIL
