"""Every thread batchd starts runs under one guard, and liveness means progress.

`start_thread(target, name, *args)` runs `target` under the guard: an exception that
escapes it is logged CRITICAL with its traceback, then the process's fatal hooks run
(a supervised child exits 70 so that the supervisor replaces it and its tasks come back
through their leases; a worker run in-process stops cold). A thread is never left dead
while the rest of its process looks healthy.

Each guarded thread checks in as it makes progress (`check_in()`), and may promise when
it will next do so (`check_in(within=s)`: a lock keeper that sleeps 10 s, a download with
a deadline). `stale()` lists the threads that missed their promise: a child's heartbeat
counts only while that list is empty, so a wedged thread stops the beat and the
supervisor's SIGABRT / SIGKILL escalation, or systemd's watchdog, replaces the process.
"""
import logging
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Optional

from ..errors import ExitCode

log = logging.getLogger("batchd")


@dataclass
class Pulse:
    """One guarded thread's last sign of progress, and how long it may stay silent after it."""

    name: str
    at: float
    within: float = 0.0

    def silent_for(self, now: float, limit: float) -> Optional[float]:
        """Seconds past its allowance, or None while it is within it."""
        late = now - self.at - max(limit, self.within)
        return late if late > 0 else None


class ThreadGuard:
    def __init__(self):
        self._lock = threading.Lock()
        self._pulses: dict = {}            # thread ident -> Pulse
        self._fatal_hooks: list = []

    # -- starting threads
    def start(self, target: Callable, name: str, *args) -> threading.Thread:
        thread = threading.Thread(target=self._run, args=(target, args), name=name, daemon=True)
        thread.start()
        return thread

    def _run(self, target: Callable, args: tuple) -> None:
        with self._lock:
            self._pulses[threading.get_ident()] = Pulse(threading.current_thread().name, time.monotonic())
        try:
            target(*args)
        except BaseException as e:   # the guard: whatever ends a thread abnormally ends its process
            self.die(f"thread {threading.current_thread().name} died: {type(e).__name__}: {e}",
                     getattr(e, "exit_code", ExitCode.SOFTWARE), exc_info=True)
        finally:
            self.forget()

    def die(self, reason: str, exit_code: int = ExitCode.SOFTWARE, exc_info=False) -> None:
        """A fault this process cannot carry on with: log it, then run the fatal hooks with the exit code
        it calls for (78 for a configuration error met mid-run, else 70)."""
        with self._lock:
            hooks = list(self._fatal_hooks)
        log.critical("%s; this process ends so that it can be replaced", reason, exc_info=exc_info)
        for hook in hooks:
            hook(reason, int(exit_code))

    def on_fatal(self, hook: Callable[[str, int], None]) -> Callable[[], None]:
        """Run `hook(reason, exit_code)` when a guarded thread dies; returns a function that removes it."""
        with self._lock:
            self._fatal_hooks.append(hook)
        return lambda: self._remove_hook(hook)

    def _remove_hook(self, hook) -> None:
        with self._lock:
            if hook in self._fatal_hooks:
                self._fatal_hooks.remove(hook)

    # -- progress
    def check_in(self, within: float = 0.0) -> None:
        """The calling thread made progress; with `within`, it promises to check in again in that
        many seconds (a wait by design), even if that is longer than the usual allowance. A thread
        the guard did not start (a main thread, a user's) is not watched: this is a no-op there."""
        with self._lock:
            pulse = self._pulses.get(threading.get_ident())
            if pulse is not None:
                pulse.at, pulse.within = time.monotonic(), within

    @contextmanager
    def waiting(self, seconds: float):
        """A blocking step of known bound (a statement with socket timeouts, a download with a
        deadline): the thread may be silent that long, then its usual allowance again."""
        outer = self._promise()
        self.check_in(within=seconds)
        try:
            yield
        finally:
            self.check_in(within=outer)      # a wait inside a longer one: the longer one's promise again

    def _promise(self) -> float:
        with self._lock:
            pulse = self._pulses.get(threading.get_ident())
            return pulse.within if pulse is not None else 0.0

    def forget(self, ident: Optional[int] = None) -> None:
        """Stop watching a thread (it ended, or it was given up on)."""
        with self._lock:
            self._pulses.pop(threading.get_ident() if ident is None else ident, None)

    def stale(self, limit: float, now: Optional[float] = None) -> list:
        """(name, seconds silent) of every watched thread silent past max(limit, its promise)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            pulses = list(self._pulses.values())
        return [(p.name, now - p.at) for p in pulses if p.silent_for(now, limit) is not None]

    def _after_fork(self) -> None:
        # Only the forking thread lives on in a child: the parent's pulses and hooks are not its own.
        self._lock = threading.Lock()
        self._pulses, self._fatal_hooks = {}, []


class Heart:
    """A role's heartbeat that counts only while every guarded thread of the process is within its
    allowance: a stale thread silences it (once logged, naming the thread), so the supervisor's
    escalation replaces the process instead of a beat that promises progress nobody makes."""

    def __init__(self, beat: Callable[[], None], allowance: float):
        self._beat, self.allowance = beat, allowance
        self._silenced_by: Optional[str] = None

    def __call__(self) -> None:
        late = guard.stale(self.allowance)
        if late:
            name, seconds = late[0]
            if self._silenced_by != name:
                self._silenced_by = name
                log.error("thread %s has made no progress for %.0f s; the heartbeat stops so that this process "
                          "is replaced", name, seconds)
            return
        self._silenced_by = None
        self._beat()


guard = ThreadGuard()
os.register_at_fork(after_in_child=guard._after_fork)


def start_thread(target: Callable, name: str, *args) -> threading.Thread:
    """Start a daemon thread under the process's guard (see the module's docstring)."""
    return guard.start(target, name, *args)


def check_in(within: float = 0.0) -> None:
    guard.check_in(within)
