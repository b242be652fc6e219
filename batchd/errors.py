"""Exit codes of the `batchd` command and the exceptions that map onto them.

The codes are sysexits(3) values fixed by SPEC Part 3; unit files name
`CONFIG` in `RestartPreventExitStatus=`, scripts test for the others.
"""
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1
    UNAVAILABLE = 69   # MySQL or Redis unreachable (once mode only)
    TEMPFAIL = 75      # another master holds the namespace lock (once mode)
    CONFIG = 78        # bad setting, missing table or column, spider not importable


class BatchdError(Exception):
    """An error that ends a batchd entry point with one log line and an exit code."""

    exit_code = ExitCode.FAILURE


class ConfigError(BatchdError):
    """Something the operator must fix: a setting, a table, a column, the spider path."""

    exit_code = ExitCode.CONFIG


class BackendUnavailable(BatchdError):
    """MySQL, Redis or another backend could not be reached (a transient condition)."""

    exit_code = ExitCode.UNAVAILABLE


class MasterLockHeld(BatchdError):
    """Another master owns this namespace."""

    exit_code = ExitCode.TEMPFAIL
