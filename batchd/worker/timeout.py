"""TASK_TIMEOUT: a task still being processed after it is failed at once (a line names it), its lease
is no longer renewed, and its thread is interrupted with an asynchronous exception while it runs the
spider's code. A thread that has not come back `timeout_grace` later (stuck in C code, say) is given
up on: its worker stops warm and exits 70, so that its supervisor replaces it.

The interruption lands only inside the spider's code (`user_code`): one that arrives as the spider's
code returns is cancelled and raised at a known place instead, and batchd's code that the spider calls
(update_task) runs with it held off (`outside_user_code`), so that it never lands in batchd holding a lock.
"""
import ctypes
import logging
import threading
import time
from collections.abc import Iterable
from typing import Callable, Optional, Protocol

from ..errors import ExitCode
from ..service.threads import guard

log = logging.getLogger("batchd.worker")


class TaskTimedOut(BaseException):
    """Raised inside a fetch thread running the spider's code past TASK_TIMEOUT. A BaseException, so
    that a spider's `except Exception` does not swallow it."""


class Interruptible(Protocol):
    """A task in a thread's hands, as TASK_TIMEOUT sees it (a TaskRun)."""

    thread_ident: int
    in_user_code: bool
    timed_out: bool
    started: float
    lock: threading.Lock

    @property
    def task_id(self) -> object: ...


_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)


def interrupt(run: Interruptible) -> bool:
    """Raise TaskTimedOut in the run's thread if it is inside the spider's code now."""
    with run.lock:
        if run.in_user_code:
            return _set_async_exc(run.thread_ident, ctypes.py_object(TaskTimedOut)) == 1
    return False


class user_code:
    """The spider's code runs inside this, where TASK_TIMEOUT may interrupt it. (A class, not a generator:
    a task enters it at every step of its callbacks' generators.)"""

    __slots__ = ("run",)

    def __init__(self, run: Interruptible):
        self.run = run

    def __enter__(self) -> None:
        if self.run.timed_out:
            _leave(self.run)
            raise TaskTimedOut()
        with self.run.lock:
            self.run.in_user_code = True

    def __exit__(self, error_class, error, traceback) -> None:
        _leave(self.run)
        if error_class is None and self.run.timed_out:
            raise TaskTimedOut()


def _leave(run: Interruptible) -> None:
    with run.lock:
        run.in_user_code = False
        _cancel_pending(run)


def _cancel_pending(run: Interruptible) -> None:
    """Under the run's lock: an interruption is sent only after `timed_out` is set, so only a timed-out
    run may have one pending; cancel it."""
    if run.timed_out:
        _set_async_exc(run.thread_ident, ctypes.py_object())   # NULL: cancel a pending one


class outside_user_code:
    """batchd's code called from the spider's (update_task): no interruption lands in it. (A class, as
    `user_code`: the spider calls it for every task.)"""

    __slots__ = ("run", "inside")

    def __init__(self, run: Interruptible):
        self.run, self.inside = run, False

    def __enter__(self) -> None:
        with self.run.lock:
            self.inside, self.run.in_user_code = self.run.in_user_code, False
            _cancel_pending(self.run)

    def __exit__(self, error_class, error, traceback) -> None:
        with self.run.lock:
            self.run.in_user_code = self.inside


def timeout_grace(limit: float) -> float:
    """How long a thread interrupted by TASK_TIMEOUT may take to come back before the worker is
    recycled: a tenth of the timeout, between 2 and 30 s."""
    return max(2.0, min(30.0, limit / 10))


class TaskTimeouts:
    """TASK_TIMEOUT over the runs a worker's threads hold, checked at each turn of its watching thread;
    `fail(run, reason)` fails a run's task."""

    def __init__(self, limit: float, worker_name: str, fail: Callable[[Interruptible, str], None]):
        self.limit, self.worker_name, self.fail = limit, worker_name, fail
        self.given_up_threads: set = set()     # idents of threads stuck past the timeout and its grace

    def enforce(self, runs: Iterable[Interruptible]) -> Optional[str]:
        """Why the worker must be replaced (exit 70: a thread did not come back), else None."""
        if not self.limit:
            return None
        now, stuck = time.monotonic(), None
        for run in runs:
            overdue = now - run.started - self.limit
            if overdue > 0 and not run.timed_out:
                self._time_out(run)
            elif (run.timed_out and overdue > timeout_grace(self.limit)
                  and run.thread_ident not in self.given_up_threads):
                stuck = self._give_up_thread(run)
        return stuck

    def _time_out(self, run: Interruptible) -> None:
        log.error("task %s failed: still being processed after TASK_TIMEOUT=%g s; its thread is interrupted",
                  run.task_id, self.limit)
        run.timed_out = True
        self.fail(run, f"still being processed after TASK_TIMEOUT={self.limit:g} s")
        interrupt(run)

    def _give_up_thread(self, run: Interruptible) -> str:
        log.critical("%s: the thread of task %s has not come back %g s after TASK_TIMEOUT=%g s (stuck outside "
                     "Python code?); this worker stops warm and exits %d to be replaced", self.worker_name,
                     run.task_id, timeout_grace(self.limit), self.limit, ExitCode.SOFTWARE)
        self.given_up_threads.add(run.thread_ident)
        guard.forget(run.thread_ident)
        return f"a task's thread did not come back after TASK_TIMEOUT={self.limit:g} s"
