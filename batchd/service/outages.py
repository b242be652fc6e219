"""Outages of MySQL, Redis or an SQLite file: waited out quietly and cheaply, by every thread alike.

One `OutageWatch` per master or worker. Every retry path (flush, write-back, lease, renewal,
patrol) reports a failure with `failed(error)` and waits with `wait(...)`: exponential backoff
with jitter, capped at BACKOFF_CAP. The log says one WARNING when an outage of a backend
starts, at most one reminder a minute, and one INFO with its length when it ends.

While a backend is down, the waiting threads probe it (one cheap ping per PROBE_EVERY
for the whole process, whichever thread's turn it is). A probe that answers wakes every
waiter at once to try again, so postponed write-backs land as soon as the backend is back
instead of at the end of a long backoff; but only a real call that works (`ok(backend)`)
ends the outage: a server that answers pings but refuses writes (read-only during a
failover) stays one outage, with its one WARNING, however often the probe answers.

A listener (the ledger row of a supervised child) hears every change, so that systemd's
STATUS= line can say "waiting for MySQL since 12:01:07 (reason)".
"""
import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

from ..errors import BackendUnavailable
from .lifecycle import Backoff
from .threads import check_in, guard

log = logging.getLogger("batchd")

BACKOFF_CAP = 30.0
REMIND_EVERY = 60.0
PROBE_EVERY = 2.0
STEP = 0.5          # a waiter looks at the stop flag and the watch at least this often
PROBE_BOUND = 35.0  # a probe is bounded by its client's connect and socket timeouts


@dataclass
class Outage:
    backend: str
    reason: str
    since: float          # time.monotonic()
    since_wall: float     # time.time(), for STATUS=
    reminded: float
    probed: float = 0.0   # when a probe last went out
    probes: int = 0
    answered: bool = False  # a probe answered since the last failure: time to try again
    quiet: bool = False     # began within REMIND_EVERY of the last one's end: a flapping backend, one story

    def started_at(self) -> str:
        return time.strftime("%H:%M:%S", time.localtime(self.since_wall))


class OutageWatch:
    def __init__(self, probes: Optional[dict] = None, listener: Callable[[list], None] = lambda outages: None,
                 beat: Callable[[], None] = lambda: None):
        """`probes`: backend name -> a cheap call that raises BackendUnavailable while it is down.
        `beat`: the role's heartbeat, kept going while a thread waits (a wait is progress by design)."""
        self.probes = dict(probes or {})
        self.listener, self.beat = listener, beat
        self._cond = threading.Condition()
        self._down: dict = {}       # backend -> Outage
        self._ended: dict = {}      # backend -> when its last outage ended (time.monotonic())

    def keep_beating(self, beat: Callable[[], None]) -> None:
        """The role's heartbeat from now on (a watch is built before its role runs, the heart as it starts)."""
        self.beat = beat

    def failed(self, error: BackendUnavailable) -> None:
        backend, reason, now = error.backend, str(error), time.monotonic()
        with self._cond:
            outage = self._down.get(backend)
            if outage is None:
                quiet = now - self._ended.get(backend, -REMIND_EVERY) < REMIND_EVERY
                self._down[backend] = Outage(backend, reason, now, time.time(), now, quiet=quiet)
                if not quiet:
                    log.warning("%s; waiting for it, trying again every few seconds (at most every %.0f s)",
                                reason.rstrip("."), BACKOFF_CAP)
                self._tell()
                return
            outage.reason, outage.answered = reason, False
            if now - outage.reminded >= REMIND_EVERY:
                outage.reminded = now
                log.warning("still waiting for %s, down for %.0f s: %s", backend, now - outage.since, reason)

    def ok(self, backend: str) -> None:
        """A call to `backend` worked: if it was down, the outage is over and every waiter wakes."""
        if backend not in self._down:     # the common case, without the lock
            return
        with self._cond:
            outage = self._down.pop(backend, None)
            if outage is None:
                return
            self._ended[backend] = time.monotonic()
            if not outage.quiet:
                log.info("%s is back after %.0f s", backend, time.monotonic() - outage.since)
            self._tell()
            self._cond.notify_all()

    def is_down(self, backend: str) -> bool:
        return backend in self._down

    def outages(self) -> list:
        with self._cond:
            return list(self._down.values())

    def wait(self, delay: float, backend: str, stop) -> bool:
        """Wait up to `delay` s for `backend` to come back (its probe runs meanwhile); True when `stop`
        (anything with is_set()) was set, False when it is time to try again."""
        deadline = time.monotonic() + delay
        while not stop.is_set():
            check_in(within=STEP + 1)
            self.beat()
            left = deadline - time.monotonic()
            outage = self._down.get(backend)
            if left <= 0 or outage is None or outage.answered:
                return False
            self._probe_if_due(backend)
            with self._cond:
                if backend in self._down and not self._down[backend].answered:
                    self._cond.wait(min(left, STEP))
        return True

    def _probe_if_due(self, backend: str) -> None:
        probe = self.probes.get(backend)
        with self._cond:
            outage = self._down.get(backend)
            if probe is None or outage is None or time.monotonic() - outage.probed < PROBE_EVERY:
                return
            outage.probed = time.monotonic()     # this thread's turn: the others keep waiting
            outage.probes += 1
        try:
            with guard.waiting(PROBE_BOUND):
                probe()
        except BackendUnavailable:
            return
        with self._cond:
            outage.answered = True
            self._cond.notify_all()

    def _tell(self) -> None:
        self.listener(list(self._down.values()))


def retry_through_outages(action: Callable, watch: OutageWatch, stop, give_up_after: Optional[float] = None,
                          setting: str = "OUTAGE_TIMEOUT"):
    """Run `action` until it does not raise BackendUnavailable, waiting out outages with backoff.
    Returns None if `stop` was set meanwhile. With `give_up_after`, an outage longer than that
    many seconds is final: BackendUnavailable naming the setting."""
    backoff, started, down = Backoff(cap=BACKOFF_CAP), None, None
    while True:
        try:
            result = action()
        except BackendUnavailable as e:
            watch.failed(e)
            started, down = started or time.monotonic(), e.backend
            if give_up_after is not None and time.monotonic() - started > give_up_after:
                raise BackendUnavailable(f"{e} (down for more than {setting}={give_up_after:g} s)",
                                         e.backend) from None
            if watch.wait(backoff.next_delay(), e.backend, stop):
                return None
            continue
        if down is not None:
            watch.ok(down)
        return result
