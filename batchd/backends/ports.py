"""The ports: what the master, the workers, the supervisor and the commands need from a backend,
each a narrow contract with its guarantees written in its docstring.

    BatchStore       the task table, the batch record, the items (an ABC: users may write one; store.py)
    LeaseQueue       claimed tasks on their way to workers, under leases
    MasterLocks      one master per namespace
    WakeChannel      workers asking the master for a patrol now
    StatusBoard      supervisors' snapshots for `batchd status` and other hosts
    SeenFilter       request de-duplication within a batch
    BatchTally       the settled tasks of a batch, counted as write-backs land
    BatchCounters    a batch's Scrapy-like counters (requests, responses, items...), added by every worker
    NamespaceRecord  which store a namespace serves
    RenderChoices    whether each host's render="auto" pages need a browser, kept across batches

A backend package (batchd/backends/<name>/) provides every port of a namespace from one
`open_backend(settings, namespace, store)`, bundled in a `Backend`; batchd/backends/__init__.py
is the one place that picks the package. Master, worker and pipeline each take only the ports
they use. docs/architecture.md shows how the processes use them; the Redis key schema is in
batchd/backends/mysql_redis/redis_keys.py.

Leases, never pop-and-forget: `lease()` moves a task from the pending list into the lease set
with a deadline and a token unique to this lease. The holder renews the deadline while it
works, and its write-back counts only if `release()` finds the lease still its own. The master
reclaims leases whose deadline passed. A task waiting in the pending list holds no lease and is
never reclaimed.
"""
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping, Optional, Protocol, Sequence

from ..errors import ConfigError
from ..hosts.breakers import BreakerState, LocalHostBreakers
from ..hosts.rates import LocalHostRates
from ..hosts.render_choices import LocalRenderChoices, RenderChoice
from ..model import Lease, TaskLayout
from .store import BatchStore


class LeaseQueue(Protocol):
    """Claimed tasks on their way from the master to the workers, under leases. Thread-safe."""

    namespace: str
    backend_name: str     # names the backend in outage lines and STATUS= ("Redis", "SQLite")

    def describe(self) -> str:
        """What this queue is, fit for a log line (never a password)."""

    def ping(self) -> None:
        """A cheap round trip; raises BackendUnavailable while the backend is down."""

    def clear_batch(self) -> None:
        """Forget the pending list, the leases, the attempt counts, the done flag, the seen requests (but
        REQUEST_FILTER_ACROSS_BATCHES's)."""

    def forget_earlier_requests(self) -> None:
        """Forget REQUEST_FILTER_ACROSS_BATCHES's requests: the links earlier batches followed go again."""

    def push(self, batch_id: int, tasks: Sequence[dict], id_field: str) -> None:
        """Append claimed task rows to the pending list."""

    def count_attempts(self, task_ids: Sequence) -> list:
        """Add one lease attempt to each task for this batch; return the new counts in order."""

    def forget_attempts(self, task_ids: Sequence) -> None:
        """Start these tasks' attempt counts afresh in this batch (`batchd requeue --failed`: a task the
        master failed for BATCH_TASK_MAX_ATTEMPTS is leased again, not failed again at its next claim)."""

    def pending_count(self) -> int:
        """Tasks waiting in the pending list."""

    def leased_count(self) -> int:
        """Tasks held under a lease."""

    def queue_counts(self) -> tuple:
        """(pending, leased), read in one step: a task leased or given back meanwhile is counted once."""

    def lease(self, token: str, lease_seconds: float) -> Optional[Lease]:
        """Take the next pending task under a new lease, atomically, or None when the list is empty."""

    def lease_many(self, tokens: Sequence[str], lease_seconds: float) -> list:
        """Take up to one pending task per token, in list order, each under a new lease with its token, in
        one atomic step (one round trip): fewer when the list runs short, [] when it is empty. Each
        Lease's queue_left counts the tasks behind it in the list."""

    def renew(self, leases: Iterable[Lease], lease_seconds: float) -> list:
        """Push back the deadlines of the leases still owned and return them; the others were reclaimed."""

    def release(self, leases: Sequence[Lease]) -> list:
        """End the leases that are still owned and return them; the others were reclaimed, and a
        write-back for them must not happen (their new holder owns the task)."""

    def hand_back(self, leases: Sequence[Lease]) -> list:
        """End the leases still owned and put their tasks back at the tail of the queue, in one atomic step;
        return those handed back. A worker holding more tasks of one busy host than it can start soon
        shares them out this way (hosts/set_aside.py), without the master, MySQL or an attempt counted."""

    def give_back(self, leases: Sequence[Lease]) -> int:
        """Make these leases, if still owned, due at once, so that the master reclaims their tasks at its
        next patrol instead of when the deadlines pass (a worker stopping with tasks it cannot finish)."""

    def expire_leases_of(self, token_prefix: str) -> int:
        """Give back every lease whose token starts with `token_prefix` (a worker process that died: its
        supervisor knows its host and pid); return how many."""

    def held_leases(self, oldest: int) -> "LeaseView":
        """Every lease as it stands, read in one step, for `batchd status --why`: counted by holder, and the
        `oldest` held longest (since lease() or lease_many() took them; a renewal keeps that time), with their
        tokens. Ages and deadlines are in seconds on the backend's own clock. Reads every lease: for an
        operator's command, never a worker's or the master's loop."""

    def reclaim_expired(self, limit: int) -> list:
        """Remove up to `limit` leases whose deadline passed; return their task keys."""

    def known(self, task_keys: Sequence[str]) -> set:
        """The keys among these that the queue holds, pending or leased (one snapshot: a key moving from
        the list to a lease is seen in one of them)."""

    def forget_if_memory_changed(self) -> bool:
        """The master, at each patrol: when the server holding the queue is not the one that held it at the
        last ask (a restart, empty or not; a replica promoted by a failover), writes may be lost, so the
        pending list and the leases are forgotten (the master sets every task in processing back to pending,
        from the store) and True is said. The first ask of a namespace says True (nothing to forget yet). A
        queue kept with the tasks (SQLite, in memory) is never lost apart from them: False."""

    def set_done(self, batch_id: int) -> None:
        """Set the batch-done flag (`<ns>:batch_done`), cleared when a new batch opens; the batch's request filter
        is dropped (Redis: freed in the background; SQLite's rows go when the next batch opens)."""

    def is_done(self) -> bool:
        """The batch-done flag is set."""

    def set_paused(self, since: Optional[float]) -> None:
        """Pause the namespace (`since`: Unix time), or resume it (None). While it is paused `lease_many`
        takes nothing, in the same atomic step that would have taken tasks; a new batch keeps the flag."""

    def paused_since(self) -> Optional[float]:
        """When the namespace was paused, or None."""

    def ask_open_batch(self, force: bool, reparse: Optional[str] = None) -> None:
        """Ask the master to open the next batch at its next patrol, whatever the calendar says (`force`:
        close the open one first, as it stands; `reparse`: a reparse batch, its BatchOpening as JSON)."""

    def take_open_request(self) -> Optional[str]:
        """The open-batch request ("now", "force" or a reparse's JSON), removed as it is read; None when there
        is none."""

    def close(self) -> None:
        """Release connections."""


@dataclass(frozen=True)
class HeldLease:
    """A lease as `held_leases` reads it: the task's key, the token that holds it, for how many seconds
    (None: taken by an older batchd, which kept no time) and in how many its deadline passes (<= 0: due)."""

    key: str
    token: str
    held: Optional[float]
    expires_in: float


@dataclass(frozen=True)
class LeaseView:
    """`held_leases`: {holder: (leases, seconds until the last of them expires)}, a holder being a token up to
    its last ':' (a worker process's tokens share it: worker/worker.py worker_token_prefix), and the oldest
    HeldLeases, the longest held first."""

    holders: dict
    oldest: list


def lease_view(rows: Iterable[tuple], now: float, oldest: int) -> LeaseView:
    """A LeaseView of (key, token, deadline, leased at or None) rows read at `now`, on one clock."""
    holders: dict = {}
    held = []
    for key, token, deadline, since in rows:
        holder = token[:token.rfind(":") + 1] or token
        count, last = holders.get(holder, (0, None))
        expires_in = deadline - now
        holders[holder] = (count + 1, expires_in if last is None else max(last, expires_in))
        held.append(HeldLease(key, token, None if since is None else max(0.0, now - since), expires_in))
    held.sort(key=lambda lease: (lease.held is None, -(lease.held or 0.0), lease.key))
    return LeaseView(holders, held[:oldest])


class MasterLock(Protocol):
    """One master per namespace: a lock with a TTL that the live master renews."""

    def acquire(self) -> bool:
        """Take the lock if it is free; True when this owner now holds it."""

    def renew(self) -> bool:
        """Push the expiry back by the TTL; False when the lock is no longer ours."""

    def release(self) -> None:
        """Give the lock up if still ours."""


class MasterLocks(Protocol):
    def master_lock(self, owner: str, ttl: float) -> MasterLock:
        """The namespace's lock as `owner` would hold it (nothing is taken until acquire())."""

    def lock_holder(self) -> Optional[str]:
        """Who holds the master lock now, or None."""


class WakeChannel(Protocol):
    def wake_master(self) -> None:
        """Ask the master for a patrol now (the queue ran low, or a batch may have finished); wake-ups
        that pile up count as one."""

    def wait_for_wake(self, timeout: float) -> bool:
        """Block up to `timeout` s for a wake-up; True if woken (and the wake-up is consumed)."""


class StatusBoard(Protocol):
    """Supervisors' snapshots, for `batchd status` and for supervisors on other hosts."""

    def write_status(self, key: str, fields: dict, ttl: float) -> None:
        """Replace the snapshot `key` (host:instance); it disappears by itself after `ttl` seconds."""

    def read_statuses(self) -> list:
        """Every live snapshot of this namespace, as dicts of strings."""

    def delete_status(self, key: str) -> None:
        """Remove the snapshot `key` now."""


EVERY_BATCH = 0     # the request filter's batch id under REQUEST_FILTER_ACROSS_BATCHES: kept when batches close


class SeenFilter(Protocol):
    def first_seen(self, batch_id: int, fingerprint: str) -> bool:
        """Request de-duplication: True the first time this batch (EVERY_BATCH: any batch) sees the fingerprint.
        Each store drops a batch's filter when the batch closes or the next opens, but EVERY_BATCH's."""


class HostRates(Protocol):
    """DOMAIN_RATE_LIMIT: the starts of requests to each host, spaced for every worker that shares this
    backend (Redis: every worker of the namespace on every host; SQLite, memory: the worker's process)."""

    def reserve(self, host: str, per_second: float, burst: int) -> float:
        """Book the next start of a request to `host` under `per_second` requests a second (`burst` of them
        may start together): the seconds to wait before starting it, 0 for now."""


class HostBreakers(Protocol):
    """Each host's breaker (hosts/breakers.py tells its states and steps), one story for every worker that
    shares this backend (Redis: every worker of the namespace on every host; SQLite, memory: the worker's
    process). Workers count a host's failures themselves and step its breaker only when its state changes."""

    def step(self, host: str, step: str, now: float, arg=None) -> tuple:
        """One step of `host`'s breaker at `now` (Unix seconds), atomically: (its state after, or None for
        closed; 1 when the step did what it asked: opened the breaker, won the probe, first said it down)."""

    def look(self, host: str) -> Optional[BreakerState]:
        """`host`'s breaker as it stands: None for closed (no record)."""

    def close(self, host: str) -> None:
        """The probe answered: forget the host's record (closed)."""

    def states(self, limit: int = 20) -> dict:
        """For display (`batchd status --hosts`): host -> BreakerState of at most `limit` hosts with a record,
        the most recently changed first."""


class RenderChoices(Protocol):
    """Each host's render="auto" choice (hosts/render_choices.py), shared by every worker of the namespace and
    kept across batches; changed only by `step`, atomically."""

    def choice(self, host: str) -> Optional[RenderChoice]:
        """The host's record, or None for a host never met."""

    def step(self, host: str, step: str, now: float, batch: Optional[int], why: str, sample_size: int) -> tuple:
        """(the host's record after render_choices.choice_step, whether its mode changed); (None, False) for a
        new host when KEPT_HOSTS are kept already."""

    def choices(self, limit: int = 1000) -> dict:
        """host -> RenderChoice of the `limit` most recently changed hosts, for display."""


class BatchTally(Protocol):
    """Done and failed tasks per batch, counted as they settle, so the master never counts rows. Every
    compare-and-set write-back adds the rows it really moved, so the tally is exact but for the write-backs
    of a holder that died between its store and its tally (at most the tasks it had in flight), and the
    master reconciles it with a walk of the table when the batch closes."""

    def add_settled(self, batch_id: int, done: int, failed: int) -> None:
        """Add rows that just moved to DONE / FAILED in this batch."""

    def settled(self, batch_id: int) -> Optional[tuple]:
        """(done, failed) of the batch, or None when this backend has not held its tally since the batch
        opened (Redis restarted empty): the master then restores it with restore_settled()."""

    def restore_settled(self, batch_id: int, done: int, failed: int) -> None:
        """Unless the tally is held: add these counts (the batch record's, its last word) to what was added
        since it was lost, and hold it again."""

    def set_settled(self, batch_id: int, done: int, failed: int) -> None:
        """Hold the tally at exactly these counts (a new batch: 0, 0; a reconciliation: the rows counted)."""


class BatchCounters(Protocol):
    """A batch's counters (batchd/settle/batch_stats.py names them), the sum of every worker's flushes. Each flush is
    numbered by its worker, and a number is applied once: a flush sent again because its first answer was
    lost (the backend went down mid-call) adds nothing twice."""

    def add_counts(self, batch_id: int, counts: Mapping[str, int], source: str, seq: int,
                   hosts: Mapping[str, Mapping[str, int]] = {}, host_cap: int = 0) -> None:
        """Add `counts` to the batch's totals and `hosts` ({host: {field: n}}) to its table of hosts, atomically,
        unless flush `seq` of `source` (a worker's own name) or a later one was applied to this batch already.
        A source's numbers only grow. The table lets `host_cap` hosts in at most; any other host's counts go to
        host_counts.OTHER (host_counts.merge_hosts says how)."""

    def counts(self, batch_id: int) -> dict:
        """The batch's totals, {name: n} ({} when nothing was counted, or the backend lost them)."""

    def host_counts(self, batch_id: int) -> Iterator[tuple]:
        """The batch's table of hosts, (host, {field: n}) one host at a time: a master judging a batch of
        10,000 hosts never holds them all (quality/verdict.py)."""

    def set_host_gauges(self, source: str, gauges: Mapping[str, Mapping[str, int]], ttl: float) -> None:
        """What is true of `source`'s hosts now ({host: {field: n}}), in place of what it said before, for `ttl`
        seconds (a worker that stops saying it is forgotten); {}: forget it now."""

    def host_gauges(self) -> dict:
        """Every live source's gauges, added up per host."""


class NamespaceRecord(Protocol):
    def claim_namespace(self, identity: str, record: bool = True) -> Optional[str]:
        """Record `identity` (the store's, never a password) as the one store this namespace serves, if
        none is recorded yet (and `record`: `batchd check` only looks); return None when it is ours or
        unclaimed, else the identity recorded by someone else."""


def claim_namespace(record_port: NamespaceRecord, store: BatchStore, layout: TaskLayout, namespace: str, who: str,
                    record: bool = True) -> str:
    """A namespace serves one store: the first master or worker records the store's identity in the
    queue; one whose store differs refuses to start (ConfigError, exit 78), naming both. Returns the
    identity (`batchd check` looks without recording)."""
    identity = f"{store.identity()} table {layout.table}"
    other = record_port.claim_namespace(identity, record)
    if other is not None:
        raise ConfigError(f"namespace {namespace!r} serves {other}, but this {who}'s store is {identity}: "
                          "give each store its own NAMESPACE (if the data really moved, delete the namespace's "
                          f"store record: the key {namespace}:store in Redis)")
    return identity


@dataclass(frozen=True)
class MasterPorts:
    """What a master reaches: the store, the queue it fills and patrols, its lock, and the batch's figures."""

    store: BatchStore
    leases: LeaseQueue
    locks: MasterLocks
    wake: WakeChannel
    namespaces: NamespaceRecord
    tally: BatchTally
    counters: BatchCounters
    render_choices: RenderChoices


@dataclass(frozen=True)
class WorkerPorts:
    """What a worker reaches: the store it writes to, the queue it leases from, and what its tasks share
    with every worker of the namespace (the request filter, the hosts' rate and breakers, the batch's figures)."""

    store: BatchStore
    leases: LeaseQueue
    wake: WakeChannel
    seen: SeenFilter
    namespaces: NamespaceRecord
    tally: BatchTally
    counters: BatchCounters
    host_rates: HostRates
    host_breakers: HostBreakers
    render_choices: RenderChoices


@dataclass
class Backend:
    """Every port of one namespace on one backend, as `batchd.backends.open_backend` gives them."""

    store: BatchStore
    leases: LeaseQueue
    locks: MasterLocks
    wake: WakeChannel
    board: StatusBoard
    seen: SeenFilter
    namespaces: NamespaceRecord
    tally: BatchTally
    counters: BatchCounters
    closers: tuple = field(default=())     # what close() releases besides the store
    rates: Optional[HostRates] = None     # DOMAIN_RATE_LIMIT; None: kept in this process (host_rates())
    breakers: Optional[HostBreakers] = None     # None: kept in this process (host_breakers())
    renders: RenderChoices = field(default_factory=LocalRenderChoices)    # render="auto"'s choice per host

    def host_rates(self, namespace: str) -> HostRates:
        """The backend's HostRates, or the one every worker of this process shares for the namespace."""
        return self.rates if self.rates is not None else LocalHostRates.for_namespace(namespace)

    def host_breakers(self, namespace: str) -> HostBreakers:
        """The backend's HostBreakers, or the one every worker of this process shares for the namespace."""
        return self.breakers if self.breakers is not None else LocalHostBreakers.for_namespace(namespace)

    def master_ports(self) -> MasterPorts:
        return MasterPorts(self.store, self.leases, self.locks, self.wake, self.namespaces, self.tally, self.counters,
                           self.renders)

    def worker_ports(self, namespace: str) -> WorkerPorts:
        return WorkerPorts(self.store, self.leases, self.wake, self.seen, self.namespaces, self.tally, self.counters,
                           self.host_rates(namespace), self.host_breakers(namespace), self.renders)

    def close(self) -> None:
        for close in self.closers:
            close()
        self.store.close()


@dataclass
class SupervisorPorts:
    """What a supervisor reaches, with short timeouts (its loop must never wait long): the status board,
    the leases and wake channel to give back a dead worker's tasks at once, the batch's tally its snapshot
    samples (the rate and the ETA), and the batch's counters and the hosts' breakers that /metrics shows per
    host (None: breakers kept in each worker process)."""

    board: StatusBoard
    leases: LeaseQueue
    wake: WakeChannel
    tally: BatchTally
    counters: BatchCounters
    close: Callable[[], None]
    breakers: Optional[HostBreakers] = None
