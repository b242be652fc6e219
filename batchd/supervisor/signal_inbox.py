"""The supervisor's signals: a handler only records the signal, and the loop acts on it.

The handlers append the signal to a queue; the C-level handler also writes a byte to a wake-up pipe
(`signal.set_wakeup_fd`), so the loop's wait on its children's sentinels returns at once. The loop
then dispatches what was recorded, in order (supervisor.py: TERM / INT warm stop, QUIT cold stop, HUP
reload, TTIN / TTOU one worker more / fewer). A forked child closes the pipe first thing.
"""
import collections
import os
import signal
from multiprocessing.connection import wait

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
HANDLED_SIGNALS = STOP_SIGNALS + (signal.SIGQUIT, signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU)


class SignalInbox:
    """The signals recorded and not yet dispatched, and the pipe that wakes the loop for them."""

    def __init__(self) -> None:
        self._signals: collections.deque = collections.deque()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def install(self) -> None:
        for sig in HANDLED_SIGNALS:
            signal.signal(sig, self._record)
        signal.set_wakeup_fd(self._wake_w)     # and the C handler wakes the loop's wait() at once

    def _record(self, signum, frame) -> None:
        self._signals.append(signum)

    def wait(self, handles: list, timeout: float) -> list:
        """The handles ready within `timeout`; a signal cuts the wait short."""
        ready = wait(handles + [self._wake_r], timeout)
        self._drain_wake_pipe()
        return ready

    def _drain_wake_pipe(self) -> None:
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def asks_to_stop(self) -> bool:
        """A stop signal (warm or cold) waits to be dispatched."""
        return any(sig in STOP_SIGNALS or sig == signal.SIGQUIT for sig in self._signals)

    def take(self):
        """The signals recorded, oldest first, each taken once."""
        while self._signals:
            yield self._signals.popleft()

    def restore(self) -> None:
        """The default handlers back, and the pipe closed (the supervisor's end)."""
        signal.set_wakeup_fd(-1)
        for sig in HANDLED_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        self.close()

    def close(self) -> None:
        os.close(self._wake_r)
        os.close(self._wake_w)
