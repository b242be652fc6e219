"""The ports: what the master, the workers, the supervisor and the commands need from a backend,
each a narrow contract with its guarantees written in its docstring.

    BatchStore       the task table, the batch record, the items (an ABC: users may write one)
    LeaseQueue       claimed tasks on their way to workers, under leases
    MasterLocks      one master per namespace
    WakeChannel      workers asking the master for a patrol now
    StatusBoard      supervisors' snapshots for `batchd status` and other hosts
    SeenFilter       request de-duplication within a batch
    BatchTally       the settled tasks of a batch, counted as write-backs land
    BatchCounters    a batch's Scrapy-like counters (requests, responses, items...), added by every worker
    NamespaceRecord  which store a namespace serves

A backend package (batchd/backends/<name>/) provides every port of a namespace from one
`open_backend(settings, namespace, store)`, bundled in a `Backend`; batchd/backends/__init__.py
is the one place that picks the package. Master, worker and pipeline each take only the ports
they use. docs/architecture.md shows how the processes use them; the Redis key schema is in
batchd/backends/mysql_redis/redis_ports.py.

Leases, never pop-and-forget: `lease()` moves a task from the pending list into the lease set
with a deadline and a token unique to this lease. The holder renews the deadline while it
works, and its write-back counts only if `release()` finds the lease still its own. The master
reclaims leases whose deadline passed. A task waiting in the pending list holds no lease and is
never reclaimed.
"""
import abc
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Iterable, Mapping, Optional, Protocol, Sequence

from ..errors import ConfigError
from ..hosts.breakers import BreakerState, LocalHostBreakers
from ..hosts.rates import LocalHostRates
from ..model import (BatchOpening, BatchRecord, FailureQuery, ItemRow, Lease, PageRecord, Progress, Revisit, TaskFailure,
                     TaskLayout)
from ..task import Move


def opened_with(walked: int, opening: Optional[BatchOpening]) -> int:
    """The total_count of a batch whose opening walk is over, having walked `walked` rows."""
    return walked if opening is None or opening.opened_with is None else opening.opened_with


class BatchStore(abc.ABC):
    """The contract a storage backend fulfils. Thread-safe: workers call it from several threads."""

    layout: Optional[TaskLayout] = None
    runs_in_process = False   # True when no other process can reach the store: start_monitor() runs workers too
    backend_name = "memory"   # names the backend in outage lines and STATUS= ("MySQL", "SQLite")
    # Which backend package (batchd/backends/) serves this store's other ports: its own file, its own
    # process, or Redis (a store of the user's own, like MySQL's, is served by Redis).
    served_by = "mysql_redis"
    # True when record_reset keeps a BatchOpening: only then may a batch open otherwise than full, resetting all.
    keeps_openings = False
    # True when the store keeps PageRecords and Revisits (the page and revisit tables): only then may
    # REVALIDATE be on or BATCH_MODE be "due".
    keeps_pages = False

    @property
    def opened_layout(self) -> TaskLayout:
        """The layout open() bound this store to: a store used before open() is a programming error."""
        if self.layout is None:
            raise RuntimeError(f"{self.describe()} is used before open()")
        return self.layout

    def describe(self) -> str:
        """What this store is, fit for a log line (never a password)."""
        return type(self).__name__

    def ping(self) -> None:
        """A cheap round trip; raises BackendUnavailable while the backend is down."""

    def identity(self) -> str:
        """Which data this store is, the same from every host that reaches it and never with a password
        (the server as it names itself and the database, or the file): a queue namespace serves one."""
        return f"{type(self).__name__} {id(self):x}"

    @abc.abstractmethod
    def open(self, layout: TaskLayout) -> None:
        """Bind to a task table: check that it and its three columns exist (else raise ConfigError
        naming the table, the column and the setting), create the batch record table and the default
        item table if missing, and warn (with the statement to run) when the state column has no index.
        Raise BackendUnavailable when the backend cannot be reached."""

    @abc.abstractmethod
    def now(self) -> datetime:
        """The store's clock: every batch date and every staleness test uses it, never the host's."""

    @abc.abstractmethod
    def last_batch(self) -> Optional[BatchRecord]:
        """The most recent batch record, or None before the first batch."""

    def recent_batches(self, count: int) -> list:
        """The `count` most recent batch records, newest first (`batchd status --history`). A store that
        keeps only its last record gives that one."""
        last = self.last_batch()
        return [last] if last is not None else []

    @abc.abstractmethod
    def insert_batch(self, interval: int, interval_unit: str, total: int) -> BatchRecord:
        """Open a batch record dated now(), its reset still to walk (reset_cursor [null, 0]); `total` is the
        number of tasks expected (the last batch's) until the reset has counted them."""

    def record_stats(self, batch_id: int, counters: dict) -> None:
        """Keep the batch's counters ({name: n}) in its record, as the master closes it. A store that has
        nowhere to keep them does nothing: the master logs them anyway."""

    def record_failures(self, failures: Sequence[TaskFailure]) -> None:
        """Keep why these tasks failed, stamped with now(): one row per task and batch, a later failure
        replacing an earlier one. Written beside the FINISH_FAILED / MARK_FAILED move of those tasks (before
        it, so a write-back retried after an outage writes them again). A store that has nowhere to keep
        them does nothing: the log lines say why tasks failed anyway."""

    def failures(self, query: FailureQuery, after=None, limit: int = 100) -> list:
        """Up to `limit` TaskFailures that `query` selects, in task id order, after task id `after`."""
        raise ConfigError(f"{self.describe()} keeps no failure records")

    def failure_groups(self, query: FailureQuery) -> list:
        """Every failure `query` selects, counted in FailureGroups (the largest first)."""
        raise ConfigError(f"{self.describe()} keeps no failure records")

    @abc.abstractmethod
    def next_chunk(self, after, size: int) -> Optional[tuple]:
        """The `size` rows that follow id `after` in id order (from the first when None), as (the last
        of their ids, how many); None when no row is left. Reads the primary key, nothing else."""

    @abc.abstractmethod
    def reset_chunk(self, after, upper, move: Move = Move.RESET) -> int:
        """`move` (Move.RESET, or RESET_KEEPING_FAILED) of every row with after < id <= upper (after None:
        from the first row); rows already pending are left alone. Return how many moved. One short statement."""

    @abc.abstractmethod
    def count_chunk(self, after, upper) -> tuple:
        """(rows, done, failed) among the rows with after < id <= upper: a reconciliation walks the table so."""

    def reset_due_chunk(self, after, upper, due_before: float, move: Move = Move.RESET) -> int:
        """A "due" batch's reset: `move` of the rows with after < id <= upper whose revisit is due, i.e.
        with no Revisit or one whose next_due <= due_before; rows already pending, those in the states
        the move keeps, and those not due are left alone. How many moved. One short statement (the
        revisit table is read by its primary key, row by row of the chunk)."""
        raise NotImplementedError(f"{self.describe()} keeps no revisits")

    # -- what a re-crawl remembers (keeps_pages); a store without it is never asked
    def recall_pages(self, urls: Sequence[str]) -> dict:
        """The PageRecords kept of these URLs, by URL (those never fetched whole are absent)."""
        raise NotImplementedError(f"{self.describe()} keeps no pages")

    def remember_pages(self, pages: Sequence[PageRecord]) -> None:
        """Keep these PageRecords, each replacing the one of its URL: one upsert."""
        raise NotImplementedError(f"{self.describe()} keeps no pages")

    def forget_pages(self, urls: Sequence[str]) -> None:
        """Drop what is kept of these URLs (a page gone: 404 or 410)."""
        raise NotImplementedError(f"{self.describe()} keeps no pages")

    def pages_changed_in(self, batch_id: int) -> list:
        """The PageRecords whose changed_in is `batch_id` (new or changed in that batch), by URL."""
        raise NotImplementedError(f"{self.describe()} keeps no pages")

    def revisits(self, task_ids: Sequence) -> dict:
        """The Revisits kept of these tasks, by task_key(task_id) (tasks never scheduled are absent)."""
        raise NotImplementedError(f"{self.describe()} keeps no revisits")

    def schedule_revisits(self, revisits: Sequence[Revisit]) -> None:
        """Keep these Revisits, each replacing the one of its task: one upsert."""
        raise NotImplementedError(f"{self.describe()} keeps no revisits")

    @abc.abstractmethod
    def record_reset(self, batch_id: int, after, walked: int, finished: bool = False,
                     opening: Optional[BatchOpening] = None) -> None:
        """Keep the opening walk's progress in the batch record: every row up to id `after` is walked (reset,
        or counted), `walked` rows so far. `finished`: no row is left; the cursor is cleared and total_count =
        walked (opening.opened_with when given). `opening`: a batch opened otherwise than full, resetting all,
        keeps its BatchOpening in the same statement (only stores with keeps_openings are given one)."""

    @abc.abstractmethod
    def update_batch(self, batch_id: int, progress: Progress, is_done: bool) -> None:
        """Write the counts of `progress` (and is_done) into the batch record."""

    @abc.abstractmethod
    def claim(self, limit: int, upto=None) -> list:
        """Move at most `limit` PENDING tasks to PROCESSING (lowest ids first; with `upto`, none past that
        id) and return their rows as dicts. A row returned is one this call moved: no two claims ever
        return the same row. Through the state column's index: never a scan of the table. With the layout's
        host_field (BATCH_TASK_HOST_FIELD), the tasks are taken round robin across hosts instead, in the
        order picked (hosts/claims.py)."""

    @abc.abstractmethod
    def move(self, move: Move, ids: Sequence, older_than: Optional[float] = None) -> int:
        """Apply `move` to the rows among `ids` whose state is one of its sources (and, with older_than,
        whose time column is older than that many seconds by now()); return how many rows moved."""

    @abc.abstractmethod
    def stale_processing(self, older_than: float, limit: int) -> list:
        """Ids of up to `limit` PROCESSING tasks whose time column is older than `older_than` seconds."""

    @abc.abstractmethod
    def progress(self) -> Progress:
        """Counts of the whole task table by state: a scan, for the demo, benchmarks and tests. The master
        never asks (it counts as tasks settle: BatchTally)."""

    @abc.abstractmethod
    def unsettled_count(self) -> int:
        """PENDING + PROCESSING rows, through the state column's index: cheap when few are left, which is
        when the master asks (its queue has run dry and nothing is left to claim)."""

    @abc.abstractmethod
    def save_items(self, table: str, kind: str, rows: Sequence[ItemRow], key: Sequence[str] = ()) -> None:
        """Store the rows durably in one transaction, as upserts (a row with the same key replaces the
        old one). `kind` is DEFAULT_ITEM_KIND or COLUMNS_ITEM_KIND. `key`: the columns a column table's
        rows are upserted on (an Item's __unique_key__, a UNIQUE index of the table); empty: any unique
        key the table has. Raise on failure: nothing of the batch counts as stored unless this returns."""

    def create_task_table(self, layout: TaskLayout) -> bool:
        """For `batchd tasks` and the demo: make the seed's task table (primary key, `url`, state and
        time columns, the state indexed) when it does not exist. True when it was made. The table
        stays the user's: batchd never alters one that exists."""
        raise ConfigError(f"{self.describe()} cannot create task tables; create `{layout.table}` yourself")

    def add_tasks(self, layout: TaskLayout, rows: Sequence[dict]) -> int:
        """Insert task rows (keys are column names, each checked) as pending; return how many."""
        raise ConfigError(f"{self.describe()} cannot add tasks; insert them into `{layout.table}` yourself")

    def missing_state_index(self, layout: TaskLayout) -> Optional[str]:
        """The statement that would index the task table's state column when no index leads with it
        (`batchd check` reports it, open() warns); None when indexed or when the backend cannot tell."""
        return None

    def item_columns(self, table: str, setting: str = "the item table") -> Optional[frozenset]:
        """The columns of a COLUMNS_ITEM_KIND table, so a bad item key is named before a flush fails;
        None when the backend cannot tell (every key is then tried). ConfigError naming `setting` when
        the table does not exist."""
        return None

    def unique_keys(self, table: str) -> Optional[list]:
        """The column sets (frozensets) of the table's primary key and UNIQUE indexes, which an upsert
        on those columns needs; None when the backend cannot tell (or needs none)."""
        return None

    def close(self) -> None:
        """Release connections; the store may be used again afterwards (it reconnects)."""


class LeaseQueue(Protocol):
    """Claimed tasks on their way from the master to the workers, under leases. Thread-safe."""

    namespace: str
    backend_name: str     # names the backend in outage lines and STATUS= ("Redis", "SQLite")

    def describe(self) -> str:
        """What this queue is, fit for a log line (never a password)."""

    def ping(self) -> None:
        """A cheap round trip; raises BackendUnavailable while the backend is down."""

    def clear_batch(self) -> None:
        """Forget the pending list, the leases, the attempt counts, the done flag, the seen requests."""

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
        """Set the batch-done flag (`<ns>:batch_done`), cleared when a new batch opens."""

    def is_done(self) -> bool:
        """The batch-done flag is set."""

    def set_paused(self, since: Optional[float]) -> None:
        """Pause the namespace (`since`: Unix time), or resume it (None). While it is paused `lease_many`
        takes nothing, in the same atomic step that would have taken tasks; a new batch keeps the flag."""

    def paused_since(self) -> Optional[float]:
        """When the namespace was paused, or None."""

    def ask_open_batch(self, force: bool) -> None:
        """Ask the master to open the next batch at its next patrol, whatever the calendar says (`force`:
        close the open one first, as it stands)."""

    def take_open_request(self) -> Optional[str]:
        """The open-batch request ("now" or "force"), removed as it is read; None when there is none."""

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


class SeenFilter(Protocol):
    def first_seen(self, batch_id: int, fingerprint: str) -> bool:
        """Request de-duplication: True the first time this batch sees the fingerprint."""


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

    def host_counts(self, batch_id: int) -> dict:
        """The batch's table of hosts, {host: {field: n}}."""

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


def store_items(store: BatchStore, destination, rows: Sequence[ItemRow]) -> None:
    """`rows` into `destination` (an ItemDestination): the key goes along only when there is one, so that a
    store of the user's written before Item classes (a save_items without `key`) still takes dicts."""
    if destination.key:
        store.save_items(destination.table, destination.kind, rows, key=destination.key)
    else:
        store.save_items(destination.table, destination.kind, rows)


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

    def host_rates(self, namespace: str) -> HostRates:
        """The backend's HostRates, or the one every worker of this process shares for the namespace."""
        return self.rates if self.rates is not None else LocalHostRates.for_namespace(namespace)

    def host_breakers(self, namespace: str) -> HostBreakers:
        """The backend's HostBreakers, or the one every worker of this process shares for the namespace."""
        return self.breakers if self.breakers is not None else LocalHostBreakers.for_namespace(namespace)

    def master_ports(self) -> MasterPorts:
        return MasterPorts(self.store, self.leases, self.locks, self.wake, self.namespaces, self.tally, self.counters)

    def worker_ports(self, namespace: str) -> WorkerPorts:
        return WorkerPorts(self.store, self.leases, self.wake, self.seen, self.namespaces, self.tally, self.counters,
                           self.host_rates(namespace), self.host_breakers(namespace))

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
