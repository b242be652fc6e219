"""The TaskQueue contract shared by the Redis queue and the embedded ones.

Leases, never pop-and-forget: `lease()` moves a task from the pending list into
the lease set with a deadline and a token unique to this lease. The holder renews
the deadline while it works, and its write-back counts only if `release()` finds
the lease still its own. The master reclaims leases whose deadline passed.
A task waiting in the pending list holds no lease and is never reclaimed.
"""
import abc
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence


@dataclass
class Lease:
    task_id: object
    batch_id: int
    task: dict
    token: str
    queue_left: int = -1      # tasks left in the pending list right after this lease

    @property
    def key(self) -> str:
        return task_key(self.task_id)


def task_key(task_id) -> str:
    """Ids are kept as strings in queues; the payload carries the typed id."""
    return str(task_id)


class MasterLock(abc.ABC):
    """One master per namespace: a lock with a TTL that the live master renews."""

    @abc.abstractmethod
    def acquire(self) -> bool:
        """Take the lock if it is free; True when this owner now holds it."""

    @abc.abstractmethod
    def renew(self) -> bool:
        """Push the expiry back by the TTL; False when the lock is no longer ours."""

    @abc.abstractmethod
    def release(self) -> None:
        """Give the lock up if still ours."""


class TaskQueue(abc.ABC):
    namespace: str
    backend_name = "in-process"     # names the backend in outage lines and STATUS= ("Redis", "SQLite")

    def describe(self) -> str:
        """What this queue is, fit for a log line (never a password)."""
        return "in-process queue"

    def ping(self) -> None:
        """A cheap round trip; raises BackendUnavailable while the backend is down."""

    @abc.abstractmethod
    def claim_namespace(self, identity: str, record: bool = True) -> Optional[str]:
        """Record `identity` (the store's, never a password) as the one store this namespace serves, if
        none is recorded yet (and `record`: `batchd check` only looks); return None when it is ours or
        unclaimed, else the identity recorded by someone else."""

    @abc.abstractmethod
    def give_back(self, leases: Sequence[Lease]) -> int:
        """End these leases now, if still owned, so that the master reclaims their tasks at its next
        patrol instead of when the deadlines pass (a worker stopping with tasks it cannot finish)."""

    @abc.abstractmethod
    def expire_leases_of(self, token_prefix: str) -> int:
        """Give back every lease whose token starts with `token_prefix` (a worker process that died:
        its supervisor knows its host and pid); return how many."""

    # -- the master's side
    @abc.abstractmethod
    def master_lock(self, owner: str, ttl: float) -> MasterLock: ...

    @abc.abstractmethod
    def lock_holder(self) -> Optional[str]:
        """Who holds the master lock now, or None."""

    @abc.abstractmethod
    def clear_batch(self) -> None:
        """Forget the pending list, the leases, the attempt counts, the done flag, the seen requests."""

    @abc.abstractmethod
    def push(self, batch_id: int, tasks: Sequence[dict], id_field: str) -> None:
        """Append claimed task rows to the pending list."""

    @abc.abstractmethod
    def count_attempts(self, task_ids: Sequence) -> list:
        """Add one lease attempt to each task for this batch; return the new counts in order."""

    @abc.abstractmethod
    def reclaim_expired(self, limit: int) -> list:
        """Remove up to `limit` leases whose deadline passed; return their task ids (as keys)."""

    @abc.abstractmethod
    def known(self, task_keys: Sequence[str]) -> set:
        """The keys among these that the queue holds, pending or leased."""

    @abc.abstractmethod
    def set_done(self, batch_id: int) -> None: ...

    @abc.abstractmethod
    def wait_for_wake(self, timeout: float) -> bool:
        """Block up to `timeout` s for a worker's wake-up; True if woken."""

    # -- both sides
    @abc.abstractmethod
    def pending_count(self) -> int: ...

    @abc.abstractmethod
    def leased_count(self) -> int: ...

    @abc.abstractmethod
    def is_done(self) -> bool:
        """The batch-done flag is set (cleared when a new batch opens)."""

    # -- the workers' side
    @abc.abstractmethod
    def lease(self, token: str, lease_seconds: float) -> Optional[Lease]:
        """Take the next pending task under a new lease, or None when the list is empty."""

    @abc.abstractmethod
    def renew(self, leases: Iterable[Lease], lease_seconds: float) -> int:
        """Push back the deadlines of the leases still owned; return how many were."""

    @abc.abstractmethod
    def release(self, leases: Sequence[Lease]) -> list:
        """End the leases that are still owned and return them; the others were reclaimed."""

    @abc.abstractmethod
    def wake_master(self) -> None:
        """Ask the master for a patrol now (the queue ran low, or a batch may have finished)."""

    @abc.abstractmethod
    def first_seen(self, batch_id: int, fingerprint: str) -> bool:
        """Request de-duplication: True the first time this batch sees the fingerprint."""

    # -- the status board: supervisors' snapshots for `batchd status`
    @abc.abstractmethod
    def write_status(self, key: str, fields: dict, ttl: float) -> None:
        """Replace the snapshot `key` (host:instance); it disappears by itself after `ttl` seconds."""

    @abc.abstractmethod
    def read_statuses(self) -> list:
        """Every live snapshot of this namespace, as dicts of strings."""

    @abc.abstractmethod
    def delete_status(self, key: str) -> None: ...

    def close(self) -> None:
        """Release connections."""
