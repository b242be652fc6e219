"""LocalQueue: every queue-side port of a MemoryBatchStore, shared by the threads of one process.

The same contracts as the Redis ports (batchd/backends/ports.py); the clock is time.monotonic() and the
wake-up a Condition, since nothing here is seen by another process. One object serves every
port: in one process they share one lock, and splitting them would only add indirection.
"""
import collections
import threading
import time
from typing import Iterable, Iterator, Optional, Sequence

from ...model import Lease, task_key
from ...hosts.counts import merge_hosts, sum_gauges
from ..ports import EVERY_BATCH, LeaseView, lease_view


class LocalMasterLock:
    """Free when nobody holds it or its holder let the TTL run out (time.monotonic(), like the leases)."""

    def __init__(self, queue: "LocalQueue", owner: str, ttl: float):
        self._queue, self._owner, self._ttl = queue, owner, ttl

    def acquire(self) -> bool:
        with self._queue._cond:
            if self._queue.lock_holder() in (None, self._owner):
                self._queue._lock_owner = self._owner
                self._queue._lock_expires = time.monotonic() + self._ttl
                return True
            return False

    def renew(self) -> bool:
        with self._queue._cond:
            if self._queue.lock_holder() != self._owner:
                return False
            self._queue._lock_expires = time.monotonic() + self._ttl
            return True

    def release(self) -> None:
        with self._queue._cond:
            if self._queue.lock_holder() == self._owner:
                self._queue._lock_owner = None


class LocalQueue:
    backend_name = "in-process"

    def __init__(self, namespace: str):
        self.namespace = namespace
        self._cond = threading.Condition()
        self._lock_owner: Optional[str] = None
        self._lock_expires = 0.0
        self._pending: collections.deque = collections.deque()
        self._id_field = "id"         # of the rows pushed last (a task handed back is queued as they are)
        self._leases: dict = {}       # key -> (token, deadline, when it was taken)
        self._attempts: collections.Counter = collections.Counter()
        self._seen: set = set()       # (batch id, fingerprint)
        self._done = False
        self._paused_since: Optional[float] = None
        self._open_request: Optional[str] = None
        self._woken = False
        self._statuses: dict = {}     # key -> (fields, expiry)
        self._identity: Optional[str] = None
        self._tallies: dict = {}      # batch id -> [done, failed, held since set or restored]
        self._counters: dict = {}     # batch id -> {name: n}
        self._flushes: dict = {}      # (batch id, source) -> the number of its last flush applied
        self._hosts: dict = {}        # batch id -> {host: {field: n}} (host_counts.py)
        self._gauges: dict = {}       # source -> ({host: {field: n}}, expiry)

    # -- the BatchTally port
    def add_settled(self, batch_id: int, done: int, failed: int) -> None:
        with self._cond:
            tally = self._tallies.setdefault(batch_id, [0, 0, False])
            tally[0] += done
            tally[1] += failed

    def settled(self, batch_id: int) -> Optional[tuple]:
        with self._cond:
            tally = self._tallies.get(batch_id)
            return (tally[0], tally[1]) if tally and tally[2] else None

    def restore_settled(self, batch_id: int, done: int, failed: int) -> None:
        with self._cond:
            tally = self._tallies.setdefault(batch_id, [0, 0, False])
            if not tally[2]:
                self._tallies[batch_id] = [tally[0] + done, tally[1] + failed, True]

    def set_settled(self, batch_id: int, done: int, failed: int) -> None:
        with self._cond:
            self._tallies[batch_id] = [done, failed, True]

    # -- the BatchCounters port
    def add_counts(self, batch_id: int, counts, source: str, seq: int, hosts={}, host_cap: int = 0) -> None:
        with self._cond:
            if self._flushes.get((batch_id, source), 0) >= seq:
                return
            self._flushes[batch_id, source] = seq
            totals = self._counters.setdefault(batch_id, {})
            for name, n in counts.items():
                totals[name] = totals.get(name, 0) + n
            merge_hosts(self._hosts.setdefault(batch_id, {}), hosts, host_cap)

    def counts(self, batch_id: int) -> dict:
        with self._cond:
            return dict(self._counters.get(batch_id, {}))

    def host_counts(self, batch_id: int) -> Iterator[tuple]:
        with self._cond:
            return iter([(host, dict(fields)) for host, fields in self._hosts.get(batch_id, {}).items()])

    def set_host_gauges(self, source: str, gauges, ttl: float) -> None:
        with self._cond:
            self._gauges.pop(source, None)
            if gauges:
                self._gauges[source] = ({host: dict(fields) for host, fields in gauges.items()},
                                        time.monotonic() + ttl)

    def host_gauges(self) -> dict:
        with self._cond:
            now = time.monotonic()
            return sum_gauges(gauges for gauges, expires in self._gauges.values() if expires > now)

    def claim_namespace(self, identity: str, record: bool = True) -> Optional[str]:
        with self._cond:
            if record:
                self._identity = self._identity or identity
            return None if self._identity in (None, identity) else self._identity

    def hand_back(self, leases: Sequence[Lease]) -> list:
        with self._cond:
            handed = [lease for lease in leases if self._leases.get(lease.key, (None,))[0] == lease.token]
            for lease in handed:
                del self._leases[lease.key]
                self._pending.append((lease.batch_id, dict(lease.task), self._id_field))
            if handed:
                self._cond.notify_all()
            return handed

    def give_back(self, leases: Sequence[Lease]) -> int:
        with self._cond:
            owned = [lease for lease in leases if self._leases.get(lease.key, (None,))[0] == lease.token]
            for lease in owned:
                self._leases[lease.key] = (lease.token, 0.0, self._leases[lease.key][2])
            return len(owned)

    def expire_leases_of(self, token_prefix: str) -> int:
        with self._cond:
            theirs = [key for key, (token, _, _) in self._leases.items() if token.startswith(token_prefix)]
            for key in theirs:
                token, _, since = self._leases[key]
                self._leases[key] = (token, 0.0, since)
            return len(theirs)

    def held_leases(self, oldest: int) -> LeaseView:
        with self._cond:
            rows = [(key, token, deadline, since) for key, (token, deadline, since) in self._leases.items()]
        return lease_view(rows, time.monotonic(), oldest)

    def master_lock(self, owner: str, ttl: float) -> LocalMasterLock:
        return LocalMasterLock(self, owner, ttl)

    def lock_holder(self) -> Optional[str]:
        with self._cond:
            return self._lock_owner if self._lock_expires > time.monotonic() else None

    def clear_batch(self) -> None:
        with self._cond:
            self._pending.clear()
            self._leases.clear()
            self._attempts.clear()
            self._seen = {entry for entry in self._seen if entry[0] == EVERY_BATCH}
            self._done = False

    def forget_earlier_requests(self) -> None:
        with self._cond:
            self._seen = {entry for entry in self._seen if entry[0] != EVERY_BATCH}

    def push(self, batch_id: int, tasks: Sequence[dict], id_field: str) -> None:
        with self._cond:
            self._pending.extend((batch_id, dict(row), id_field) for row in tasks)
            self._id_field = id_field
            self._cond.notify_all()

    def count_attempts(self, task_ids: Sequence) -> list:
        with self._cond:
            counts = []
            for task_id in task_ids:
                self._attempts[task_key(task_id)] += 1
                counts.append(self._attempts[task_key(task_id)])
            return counts

    def forget_attempts(self, task_ids: Sequence) -> None:
        with self._cond:
            for task_id in task_ids:
                self._attempts.pop(task_key(task_id), None)

    def reclaim_expired(self, limit: int) -> list:
        with self._cond:
            now = time.monotonic()
            expired = [key for key, (_, deadline, _) in self._leases.items() if deadline <= now][:limit]
            for key in expired:
                del self._leases[key]
            return expired

    def forget_if_memory_changed(self) -> bool:
        return False          # the queue lives and dies with the tasks

    def known(self, task_keys: Sequence[str]) -> set:
        with self._cond:
            queued = {task_key(row[id_field]) for _, row, id_field in self._pending}
            return {key for key in task_keys if key in queued or key in self._leases}

    def set_done(self, batch_id: int) -> None:
        with self._cond:
            self._done = True
            self._cond.notify_all()

    def is_done(self) -> bool:
        return self._done

    def set_paused(self, since: Optional[float]) -> None:
        self._paused_since = since

    def paused_since(self) -> Optional[float]:
        return self._paused_since

    def ask_open_batch(self, force: bool, reparse: Optional[str] = None) -> None:
        self._open_request = reparse or ("force" if force else "now")

    def take_open_request(self) -> Optional[str]:
        with self._cond:
            request, self._open_request = self._open_request, None
            return request

    def wait_for_wake(self, timeout: float) -> bool:
        with self._cond:
            self._cond.wait_for(lambda: self._woken, timeout)
            woken, self._woken = self._woken, False
            return woken

    def wake_master(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def pending_count(self) -> int:
        return len(self._pending)

    def leased_count(self) -> int:
        return len(self._leases)

    def queue_counts(self) -> tuple:
        with self._cond:
            return len(self._pending), len(self._leases)

    def lease(self, token: str, lease_seconds: float) -> Optional[Lease]:
        return next(iter(self.lease_many([token], lease_seconds)), None)

    def lease_many(self, tokens: Sequence[str], lease_seconds: float) -> list:
        with self._cond:
            if self._paused_since is not None:
                return []
            leases = []
            for token in tokens[:len(self._pending)]:
                batch_id, row, id_field = self._pending.popleft()
                lease = Lease(task_id=row[id_field], batch_id=batch_id, task=row, token=token,
                              queue_left=len(self._pending))
                now = time.monotonic()
                self._leases[lease.key] = (token, now + lease_seconds, now)
                leases.append(lease)
            return leases

    def renew(self, leases: Iterable[Lease], lease_seconds: float) -> list:
        with self._cond:
            owned = [lease for lease in leases if self._leases.get(lease.key, (None,))[0] == lease.token]
            for lease in owned:
                self._leases[lease.key] = (lease.token, time.monotonic() + lease_seconds, self._leases[lease.key][2])
            return owned

    def release(self, leases: Sequence[Lease]) -> list:
        with self._cond:
            owned = [lease for lease in leases if self._leases.get(lease.key, (None,))[0] == lease.token]
            for lease in owned:
                del self._leases[lease.key]
            return owned

    def write_status(self, key: str, fields: dict, ttl: float) -> None:
        with self._cond:
            self._statuses[key] = (dict(fields), time.monotonic() + ttl)

    def read_statuses(self) -> list:
        with self._cond:
            now = time.monotonic()
            return [dict(fields) for fields, expires in self._statuses.values() if expires > now]

    def delete_status(self, key: str) -> None:
        with self._cond:
            self._statuses.pop(key, None)

    def first_seen(self, batch_id: int, fingerprint: str) -> bool:
        with self._cond:
            if (batch_id, fingerprint) in self._seen:
                return False
            self._seen.add((batch_id, fingerprint))
            return True

    def describe(self) -> str:
        return "in-process queue"

    def ping(self) -> None:
        """Always there."""

    def close(self) -> None:
        """Nothing to release."""
