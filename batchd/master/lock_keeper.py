"""The master lock held while a master patrols: renewed in a thread of its own, and counted held only while
a renewal is recent enough that no other master can have taken it."""
import logging
import threading
import time
from typing import Optional

from ..errors import BackendUnavailable, ConfigError
from ..service.threads import check_in, start_thread

log = logging.getLogger("batchd.master")


class LockKeeper:
    """Renews the master lock every third of its TTL; `lost` is set the moment a renewal fails.

    The lock counts as held only until half its TTL after the last renewal that succeeded (`holds`), on this
    process's clock, whether or not the next renewal has answered: a renewal blocked on a dead or partitioned
    Redis stops the patrols in time. Why half: under Sentinel a promoted replica may lack the last renewals
    (replication is asynchronous), so the lock expires there earlier than the master reckons; as long as the
    replica's lag is under half MASTER_LOCK_TIMEOUT, this master has stopped before another can take the lock."""

    def __init__(self, lock, ttl: float):
        self.lock, self.ttl = lock, ttl
        self.lost = threading.Event()
        self._valid_until = time.monotonic() + ttl / 2       # (taken just before)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def holds(self) -> bool:
        return not self.lost.is_set() and time.monotonic() < self._valid_until

    def start(self) -> None:
        self._thread = start_thread(self._renew_loop, "batchd-master-lock")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        try:
            self.lock.release()
        except (BackendUnavailable, ConfigError):
            pass   # it expires on its own

    def _renew_loop(self) -> None:
        while True:
            check_in(within=self.ttl / 3 + 1)
            if self._stop.wait(self.ttl / 3):
                return
            sent = time.monotonic()
            try:
                if self.lock.renew():
                    self._valid_until = sent + self.ttl / 2
                    continue
                log.error("the master lock was lost (taken over after a stall?); patrols stop")
            except BackendUnavailable as e:
                log.error("cannot renew the master lock: %s; patrols stop until it is held again", e)
            self.lost.set()
            return
