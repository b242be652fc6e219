"""The queue-side ports of a SqliteBatchStore, in the same SQLite file, for one host with no Redis.

The same guarantees as the Redis ports (batchd/backends/ports.py), with tables in place of keys; every
table has the namespace as a column, so spiders sharing a file keep apart:

    batchd_queue     seq (push order), namespace, task_key, payload   the pending list (JSON payloads)
    batchd_lease     namespace, task_key, token, deadline, since      a lease: the token that holds it,
                                                                      its deadline and when it was taken
                                                                      (Unix time; renewals keep `since`)
    batchd_attempts  namespace, task_key, attempts                    leases this batch (BATCH_TASK_MAX_ATTEMPTS)
    batchd_seen      namespace, batch_id, fingerprint                 request fingerprints (REQUEST_FILTER_ENABLE)
    batchd_lock      namespace, owner, expires                        the master lock: owner string and expiry
    batchd_flag      namespace, name, value                           'done' (the batch id), 'wake',
                                                                      'store' (the store this namespace serves),
                                                                      'paused' (since when), 'open_request'
    batchd_status    namespace, name, fields, expires                 a supervisor's snapshot (JSON), until expires
    batchd_tally     namespace, batch_id, done, failed, held          tasks settled per batch (BatchTally)
    batchd_stats     namespace, batch_id, name, count                 a batch's counters (BatchCounters)
    batchd_stats_flush  namespace, batch_id, source, seq              each worker's last flush applied to a batch
    batchd_host_stats   namespace, batch_id, host, counts             a batch's counters per host (JSON; at most
                                                                      HOST_STATS_TOP hosts and "(other)")
    batchd_host_gauges  namespace, source, gauges, expires            a worker's hosts now (JSON), until expires
    batchd_render    namespace, host, record, changed                 each host's render="auto" choice (JSON,
                                                                      hosts/render_choices.py), kept across batches

A step that must not be split (pop + lease, check the token + renew / release, take the
lock unless another owner holds it) is one statement or one `BEGIN IMMEDIATE`
transaction, so no other process sees it half done. Deadlines and expiries are read
from the host's clock (time.time()), the clock of every process that opens the file.
"""
import json
import sqlite3
import time
from typing import Iterable, Iterator, Optional, Sequence

from ...codec import decode_task, encode_task
from ...model import Lease, task_key
from ...hosts.counts import OTHER, merge_hosts, sum_gauges
from ...hosts.render_choices import KEPT_HOSTS as KEPT_CHOICES, RenderChoice, choice_step
from ..ports import EVERY_BATCH, LeaseView, lease_view
from ..sql_dialect import chunks, marks
from .sqlite_file import IN_CHUNK, SqliteFile

WAKE_POLL = 0.05      # seconds between two looks at the wake flag
DONE_FLAG, WAKE_FLAG, STORE_FLAG, PAUSED_FLAG, OPEN_FLAG = "done", "wake", "store", "paused", "open_request"

SCHEMA = """
CREATE TABLE IF NOT EXISTS batchd_queue (
    seq INTEGER PRIMARY KEY, namespace TEXT NOT NULL, task_key TEXT NOT NULL, payload TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS batchd_queue_order ON batchd_queue (namespace, seq);
CREATE INDEX IF NOT EXISTS batchd_queue_key ON batchd_queue (namespace, task_key);
CREATE TABLE IF NOT EXISTS batchd_lease (
    namespace TEXT NOT NULL, task_key TEXT NOT NULL, token TEXT NOT NULL, deadline REAL NOT NULL, since REAL,
    PRIMARY KEY (namespace, task_key)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS batchd_lease_deadline ON batchd_lease (namespace, deadline);
CREATE TABLE IF NOT EXISTS batchd_attempts (
    namespace TEXT NOT NULL, task_key TEXT NOT NULL, attempts INTEGER NOT NULL,
    PRIMARY KEY (namespace, task_key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batchd_seen (
    namespace TEXT NOT NULL, batch_id INTEGER NOT NULL, fingerprint TEXT NOT NULL,
    PRIMARY KEY (namespace, batch_id, fingerprint)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batchd_lock (
    namespace TEXT NOT NULL PRIMARY KEY, owner TEXT NOT NULL, expires REAL NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batchd_flag (
    namespace TEXT NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (namespace, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batchd_tally (
    namespace TEXT NOT NULL, batch_id INTEGER NOT NULL, done INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0, held INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, batch_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batchd_stats (
    namespace TEXT NOT NULL, batch_id INTEGER NOT NULL, name TEXT NOT NULL, count INTEGER NOT NULL,
    PRIMARY KEY (namespace, batch_id, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batchd_stats_flush (
    namespace TEXT NOT NULL, batch_id INTEGER NOT NULL, source TEXT NOT NULL, seq INTEGER NOT NULL,
    PRIMARY KEY (namespace, batch_id, source)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batchd_host_stats (
    namespace TEXT NOT NULL, batch_id INTEGER NOT NULL, host TEXT NOT NULL, counts TEXT NOT NULL,
    PRIMARY KEY (namespace, batch_id, host)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batchd_host_gauges (
    namespace TEXT NOT NULL, source TEXT NOT NULL, gauges TEXT NOT NULL, expires REAL NOT NULL,
    PRIMARY KEY (namespace, source)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batchd_render (
    namespace TEXT NOT NULL, host TEXT NOT NULL, record TEXT NOT NULL, changed REAL NOT NULL,
    PRIMARY KEY (namespace, host)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batchd_status (
    namespace TEXT NOT NULL, name TEXT NOT NULL, fields TEXT NOT NULL, expires REAL NOT NULL,
    PRIMARY KEY (namespace, name)) WITHOUT ROWID;
"""
HOST_TABLE = "SELECT host, counts FROM batchd_host_stats WHERE namespace = ? AND batch_id = ?"
BATCH_TABLES = ("batchd_queue", "batchd_lease", "batchd_attempts")   # and batchd_seen, but EVERY_BATCH's rows


class SqliteMasterLock:
    """A row per namespace; free when missing or expired, so a dead master's lock lapses after its TTL."""

    def __init__(self, db: SqliteFile, namespace: str, owner: str, ttl: float):
        self.db, self.namespace, self.owner, self.ttl = db, namespace, owner, ttl

    def acquire(self) -> bool:
        now = time.time()
        return bool(self.db.change(
            "INSERT INTO batchd_lock (namespace, owner, expires) VALUES (?, ?, ?) "
            "ON CONFLICT (namespace) DO UPDATE SET owner = excluded.owner, expires = excluded.expires "
            "WHERE batchd_lock.expires <= ?", (self.namespace, self.owner, now + self.ttl, now)))

    def renew(self) -> bool:
        now = time.time()
        return bool(self.db.change("UPDATE batchd_lock SET expires = ? WHERE namespace = ? AND owner = ? "
                                   "AND expires > ?", (now + self.ttl, self.namespace, self.owner, now)))

    def release(self) -> None:
        self.db.change("DELETE FROM batchd_lock WHERE namespace = ? AND owner = ?", (self.namespace, self.owner))


def create_schema(db: SqliteFile) -> None:
    """The tables of every port, made if missing (idempotent); a file made by an older batchd gains the
    lease's `since` column (NULL in the leases it holds)."""
    with db.translated():
        connection = db.connection()
        connection.executescript(SCHEMA)
        if "since" not in {row[1] for row in connection.execute("PRAGMA table_info(batchd_lease)")}:
            try:
                connection.execute("ALTER TABLE batchd_lease ADD COLUMN since REAL")
            except sqlite3.OperationalError as e:     # another process added it meanwhile
                if "duplicate column" not in str(e):
                    raise


class SqlitePort:
    """What the ports of one namespace in the file share: the file, the namespace, its flags."""

    def __init__(self, db: SqliteFile, namespace: str):
        self.db, self.namespace = db, namespace

    def _has_flag(self, name: str) -> bool:
        return bool(self.db.rows("SELECT 1 FROM batchd_flag WHERE namespace = ? AND name = ?", (self.namespace, name)))

    def _flag(self, name: str) -> Optional[str]:
        rows = self.db.rows("SELECT value FROM batchd_flag WHERE namespace = ? AND name = ?", (self.namespace, name))
        return rows[0][0] if rows else None

    def _set_flag(self, name: str, value: str) -> None:
        self.db.change("INSERT INTO batchd_flag (namespace, name, value) VALUES (?, ?, ?) "
                       "ON CONFLICT (namespace, name) DO UPDATE SET value = excluded.value",
                       (self.namespace, name, value))

    def close(self) -> None:
        """The file's connections belong to the store (SqliteFile), closed with it."""


class SqliteLeaseQueue(SqlitePort):
    """The LeaseQueue port in the file (batchd_queue, batchd_lease, batchd_attempts)."""

    backend_name = "SQLite"

    def describe(self) -> str:
        return f"SQLite queue {self.db.path}"

    def ping(self) -> None:
        self.db.rows("SELECT 1")

    def clear_batch(self) -> None:
        with self.db.transaction() as conn:
            for table in BATCH_TABLES:
                conn.execute(f"DELETE FROM {table} WHERE namespace = ?", (self.namespace,))
            conn.execute("DELETE FROM batchd_seen WHERE namespace = ? AND batch_id <> ?",
                         (self.namespace, EVERY_BATCH))
            conn.execute("DELETE FROM batchd_flag WHERE namespace = ? AND name IN (?, ?)",
                         (self.namespace, DONE_FLAG, WAKE_FLAG))

    def forget_earlier_requests(self) -> None:
        self.db.change("DELETE FROM batchd_seen WHERE namespace = ? AND batch_id = ?", (self.namespace, EVERY_BATCH))

    def push(self, batch_id: int, tasks: Sequence[dict], id_field: str) -> None:
        if not tasks:
            return
        entries = []
        for row in tasks:
            key = task_key(row[id_field])
            entries.append((self.namespace, key, encode_task(key, batch_id, row[id_field], row)))
        with self.db.transaction() as conn:
            conn.executemany("INSERT INTO batchd_queue (namespace, task_key, payload) VALUES (?, ?, ?)", entries)

    def count_attempts(self, task_ids: Sequence) -> list:
        with self.db.transaction() as conn:
            return [conn.execute("INSERT INTO batchd_attempts (namespace, task_key, attempts) VALUES (?, ?, 1) "
                                 "ON CONFLICT (namespace, task_key) DO UPDATE SET attempts = attempts + 1 "
                                 "RETURNING attempts", (self.namespace, task_key(task_id))).fetchall()[0][0]
                    for task_id in task_ids]

    def forget_attempts(self, task_ids: Sequence) -> None:
        with self.db.transaction() as conn:
            conn.executemany("DELETE FROM batchd_attempts WHERE namespace = ? AND task_key = ?",
                             [(self.namespace, task_key(task_id)) for task_id in task_ids])

    def pending_count(self) -> int:
        return self.db.rows("SELECT COUNT(*) FROM batchd_queue WHERE namespace = ?", (self.namespace,))[0][0]

    def leased_count(self) -> int:
        return self.db.rows("SELECT COUNT(*) FROM batchd_lease WHERE namespace = ?", (self.namespace,))[0][0]

    def queue_counts(self) -> tuple:
        return tuple(self.db.rows("SELECT (SELECT COUNT(*) FROM batchd_queue WHERE namespace = ?), "
                                  "(SELECT COUNT(*) FROM batchd_lease WHERE namespace = ?)",
                                  (self.namespace, self.namespace))[0])

    def lease(self, token: str, lease_seconds: float) -> Optional[Lease]:
        return next(iter(self.lease_many([token], lease_seconds)), None)

    def lease_many(self, tokens: Sequence[str], lease_seconds: float) -> list:
        # An idle worker polls: looking first spares the write lock while the list is empty.
        if not self.db.rows("SELECT 1 FROM batchd_queue WHERE namespace = ? LIMIT 1", (self.namespace,)):
            return []
        with self.db.transaction() as conn:
            if conn.execute("SELECT 1 FROM batchd_flag WHERE namespace = ? AND name = ?",
                            (self.namespace, PAUSED_FLAG)).fetchall():
                return []
            taken = sorted(tuple(row) for row in conn.execute(
                "DELETE FROM batchd_queue WHERE seq IN (SELECT seq FROM batchd_queue WHERE namespace = ? "
                "ORDER BY seq LIMIT ?) RETURNING seq, task_key, payload", (self.namespace, len(tokens))))
            now = time.time()
            conn.executemany("INSERT INTO batchd_lease (namespace, task_key, token, deadline, since) "
                             "VALUES (?, ?, ?, ?, ?) ON CONFLICT (namespace, task_key) DO UPDATE SET "
                             "token = excluded.token, deadline = excluded.deadline, since = excluded.since",
                             [(self.namespace, key, token, now + lease_seconds, now)
                              for (_, key, _), token in zip(taken, tokens)])
            left = conn.execute("SELECT COUNT(*) FROM batchd_queue WHERE namespace = ?",
                                (self.namespace,)).fetchall()[0][0]
        return [Lease.of_payload(decode_task(payload), token, left + len(taken) - 1 - n)
                for n, ((_, _, payload), token) in enumerate(zip(taken, tokens))]

    def renew(self, leases: Iterable[Lease], lease_seconds: float) -> list:
        leases = list(leases)
        if not leases:
            return []
        deadline = time.time() + lease_seconds
        with self.db.transaction() as conn:
            return [lease for lease in leases
                    if conn.execute("UPDATE batchd_lease SET deadline = ? WHERE namespace = ? AND task_key = ? "
                                    "AND token = ?", (deadline, self.namespace, lease.key, lease.token)).rowcount]

    def release(self, leases: Sequence[Lease]) -> list:
        if not leases:
            return []
        with self.db.transaction() as conn:
            return [lease for lease in leases
                    if conn.execute("DELETE FROM batchd_lease WHERE namespace = ? AND task_key = ? AND token = ?",
                                    (self.namespace, lease.key, lease.token)).rowcount]

    def hand_back(self, leases: Sequence[Lease]) -> list:
        if not leases:
            return []
        with self.db.transaction() as conn:
            handed = [lease for lease in leases
                      if conn.execute("DELETE FROM batchd_lease WHERE namespace = ? AND task_key = ? AND token = ?",
                                      (self.namespace, lease.key, lease.token)).rowcount]
            conn.executemany("INSERT INTO batchd_queue (namespace, task_key, payload) VALUES (?, ?, ?)",
                             [(self.namespace, lease.key,
                               encode_task(lease.key, lease.batch_id, lease.task_id, lease.task)) for lease in handed])
        return handed

    def give_back(self, leases: Sequence[Lease]) -> int:
        if not leases:
            return 0
        with self.db.transaction() as conn:
            return sum(conn.execute("UPDATE batchd_lease SET deadline = 0 WHERE namespace = ? AND task_key = ? "
                                    "AND token = ?", (self.namespace, lease.key, lease.token)).rowcount
                       for lease in leases)

    def expire_leases_of(self, token_prefix: str) -> int:
        return self.db.change("UPDATE batchd_lease SET deadline = 0 WHERE namespace = ? "
                              "AND substr(token, 1, ?) = ?", (self.namespace, len(token_prefix), token_prefix))

    def held_leases(self, oldest: int) -> LeaseView:
        rows = self.db.rows("SELECT task_key, token, deadline, since FROM batchd_lease WHERE namespace = ?",
                            (self.namespace,))
        return lease_view(rows, time.time(), oldest)

    def reclaim_expired(self, limit: int) -> list:
        rows = self.db.rows("DELETE FROM batchd_lease WHERE namespace = ? AND task_key IN (SELECT task_key "
                            "FROM batchd_lease WHERE namespace = ? AND deadline <= ? LIMIT ?) RETURNING task_key",
                            (self.namespace, self.namespace, time.time(), limit))
        return [row[0] for row in rows]

    def forget_if_memory_changed(self) -> bool:
        return False          # the queue lives and dies with the tasks

    def known(self, task_keys: Sequence[str]) -> set:
        found: set[str] = set()
        for part in chunks(list(task_keys), IN_CHUNK):
            keys = marks(len(part), "?")
            # One statement reads one snapshot: a key moving from the list to a lease is seen in one of them.
            found.update(row[0] for row in self.db.rows(
                f"SELECT task_key FROM batchd_queue WHERE namespace = ? AND task_key IN ({keys}) "
                f"UNION SELECT task_key FROM batchd_lease WHERE namespace = ? AND task_key IN ({keys})",
                [self.namespace] + part + [self.namespace] + part))
        return found

    def set_done(self, batch_id: int) -> None:
        self._set_flag(DONE_FLAG, str(batch_id))

    def is_done(self) -> bool:
        return self._has_flag(DONE_FLAG)

    def set_paused(self, since: Optional[float]) -> None:
        if since is None:
            self.db.change("DELETE FROM batchd_flag WHERE namespace = ? AND name = ?", (self.namespace, PAUSED_FLAG))
        else:
            self._set_flag(PAUSED_FLAG, repr(since))

    def paused_since(self) -> Optional[float]:
        since = self._flag(PAUSED_FLAG)
        return float(since) if since is not None else None

    def ask_open_batch(self, force: bool, reparse: Optional[str] = None) -> None:
        self._set_flag(OPEN_FLAG, reparse or ("force" if force else "now"))

    def take_open_request(self) -> Optional[str]:
        rows = self.db.rows("DELETE FROM batchd_flag WHERE namespace = ? AND name = ? RETURNING value",
                            (self.namespace, OPEN_FLAG))
        return rows[0][0] if rows else None


class SqliteMasterLocks(SqlitePort):
    """The MasterLocks port: a row of batchd_lock per namespace."""


    def master_lock(self, owner: str, ttl: float) -> SqliteMasterLock:
        return SqliteMasterLock(self.db, self.namespace, owner, ttl)

    def lock_holder(self) -> Optional[str]:
        rows = self.db.rows("SELECT owner FROM batchd_lock WHERE namespace = ? AND expires > ?",
                            (self.namespace, time.time()))
        return rows[0][0] if rows else None


class SqliteWake(SqlitePort):
    """The WakeChannel port: the wake flag, polled (no blocking pop in SQLite)."""

    def wake_master(self) -> None:
        self._set_flag(WAKE_FLAG, "1")

    def wait_for_wake(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self._take_wake():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(WAKE_POLL, left))
        return True

    def _take_wake(self) -> bool:
        # Looking first keeps the master's polling to reads, which never wait for a writer.
        return self._has_flag(WAKE_FLAG) and bool(
            self.db.change("DELETE FROM batchd_flag WHERE namespace = ? AND name = ?", (self.namespace, WAKE_FLAG)))


class SqliteStatusBoard(SqlitePort):
    """The StatusBoard port: a row of batchd_status per supervisor."""

    def write_status(self, key: str, fields: dict, ttl: float) -> None:
        self.db.change("INSERT INTO batchd_status (namespace, name, fields, expires) VALUES (?, ?, ?, ?) "
                       "ON CONFLICT (namespace, name) DO UPDATE SET fields = excluded.fields, "
                       "expires = excluded.expires", (self.namespace, key, json.dumps(fields), time.time() + ttl))

    def read_statuses(self) -> list:
        rows = self.db.rows("SELECT fields FROM batchd_status WHERE namespace = ? AND expires > ?",
                            (self.namespace, time.time()))
        return [json.loads(row[0]) for row in rows]

    def delete_status(self, key: str) -> None:
        self.db.change("DELETE FROM batchd_status WHERE namespace = ? AND name = ?", (self.namespace, key))


class SqliteSeenFilter(SqlitePort):
    """The SeenFilter port: batchd_seen."""

    def first_seen(self, batch_id: int, fingerprint: str) -> bool:
        return bool(self.db.change("INSERT INTO batchd_seen (namespace, batch_id, fingerprint) VALUES (?, ?, ?) "
                                   "ON CONFLICT DO NOTHING", (self.namespace, batch_id, fingerprint)))


class SqliteTally(SqlitePort):
    """The BatchTally port: a row of batchd_tally per batch."""

    def add_settled(self, batch_id: int, done: int, failed: int) -> None:
        self._upsert(batch_id, done, failed, "done = done + excluded.done, failed = failed + excluded.failed")

    def settled(self, batch_id: int) -> Optional[tuple]:
        rows = self.db.rows("SELECT done, failed FROM batchd_tally WHERE namespace = ? AND batch_id = ? AND held = 1",
                            (self.namespace, batch_id))
        return (rows[0][0], rows[0][1]) if rows else None

    def restore_settled(self, batch_id: int, done: int, failed: int) -> None:
        self._upsert(batch_id, done, failed, "done = done + excluded.done, failed = failed + excluded.failed, "
                                             "held = 1 WHERE held = 0", held=1)

    def set_settled(self, batch_id: int, done: int, failed: int) -> None:
        self._upsert(batch_id, done, failed, "done = excluded.done, failed = excluded.failed, held = 1", held=1)

    def _upsert(self, batch_id: int, done: int, failed: int, on_conflict: str, held: int = 0) -> None:
        self.db.change("INSERT INTO batchd_tally (namespace, batch_id, done, failed, held) VALUES (?, ?, ?, ?, ?) "
                       f"ON CONFLICT (namespace, batch_id) DO UPDATE SET {on_conflict}",
                       (self.namespace, batch_id, done, failed, held))


class SqliteCounters(SqlitePort):
    """The BatchCounters port: batchd_stats, and batchd_stats_flush for the flushes applied, in one transaction."""

    def add_counts(self, batch_id: int, counts, source: str, seq: int, hosts={}, host_cap: int = 0) -> None:
        key = (self.namespace, batch_id, source)
        with self.db.transaction() as conn:
            applied = conn.execute("SELECT seq FROM batchd_stats_flush WHERE namespace = ? AND batch_id = ? "
                                   "AND source = ?", key).fetchall()
            if applied and applied[0][0] >= seq:
                return
            conn.execute("INSERT INTO batchd_stats_flush (namespace, batch_id, source, seq) VALUES (?, ?, ?, ?) "
                         "ON CONFLICT (namespace, batch_id, source) DO UPDATE SET seq = excluded.seq", key + (seq,))
            conn.executemany("INSERT INTO batchd_stats (namespace, batch_id, name, count) VALUES (?, ?, ?, ?) "
                             "ON CONFLICT (namespace, batch_id, name) DO UPDATE SET count = count + excluded.count",
                             [(self.namespace, batch_id, name, int(n)) for name, n in counts.items()])
            if hosts:
                self._add_hosts(conn, batch_id, hosts, host_cap)

    def _add_hosts(self, conn, batch_id: int, hosts, host_cap: int) -> None:
        """The batch's table of hosts read, merged and written back within the flush's transaction."""
        table = {host: json.loads(counts) for host, counts in conn.execute(HOST_TABLE, (self.namespace, batch_id))}
        merge_hosts(table, hosts, host_cap)
        conn.executemany("INSERT INTO batchd_host_stats (namespace, batch_id, host, counts) VALUES (?, ?, ?, ?) "
                         "ON CONFLICT (namespace, batch_id, host) DO UPDATE SET counts = excluded.counts",
                         [(self.namespace, batch_id, host, json.dumps(table[host]))
                          for host in set(hosts) | {OTHER} if host in table])

    def counts(self, batch_id: int) -> dict:
        return {name: n for name, n in self.db.rows("SELECT name, count FROM batchd_stats WHERE namespace = ? "
                                                    "AND batch_id = ?", (self.namespace, batch_id))}

    def host_counts(self, batch_id: int) -> Iterator[tuple]:
        return ((host, json.loads(counts)) for host, counts in self.db.rows(HOST_TABLE, (self.namespace, batch_id)))

    def set_host_gauges(self, source: str, gauges, ttl: float) -> None:
        now = time.time()
        self.db.change("DELETE FROM batchd_host_gauges WHERE namespace = ? AND (source = ? OR expires <= ?)",
                       (self.namespace, source, now))    # (and those of workers gone without a word)
        if gauges:
            self.db.change("INSERT INTO batchd_host_gauges (namespace, source, gauges, expires) VALUES (?, ?, ?, ?)",
                           (self.namespace, source, json.dumps(gauges), now + ttl))

    def host_gauges(self) -> dict:
        return sum_gauges(json.loads(row[0]) for row in self.db.rows(
            "SELECT gauges FROM batchd_host_gauges WHERE namespace = ? AND expires > ?", (self.namespace, time.time())))


class SqliteNamespaceRecord(SqlitePort):
    """The NamespaceRecord port: the store flag."""

    def claim_namespace(self, identity: str, record: bool = True) -> Optional[str]:
        if record:
            self.db.change("INSERT INTO batchd_flag (namespace, name, value) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                           (self.namespace, STORE_FLAG, identity))
        recorded = self.db.rows("SELECT value FROM batchd_flag WHERE namespace = ? AND name = ?",
                                (self.namespace, STORE_FLAG))
        return None if not recorded or recorded[0][0] == identity else recorded[0][0]


class SqliteRenderChoices(SqlitePort):
    """The RenderChoices port: a row per host; a step reads and writes it in one BEGIN IMMEDIATE transaction."""

    def choice(self, host: str) -> Optional[RenderChoice]:
        rows = self.db.rows("SELECT record FROM batchd_render WHERE namespace = ? AND host = ?", (self.namespace, host))
        return RenderChoice.from_json(rows[0][0]) if rows else None

    def step(self, host: str, step: str, now: float, batch: Optional[int], why: str, sample_size: int) -> tuple:
        with self.db.transaction() as conn:
            rows = conn.execute("SELECT record FROM batchd_render WHERE namespace = ? AND host = ?",
                                (self.namespace, host)).fetchall()
            if not rows and conn.execute("SELECT COUNT(*) FROM batchd_render WHERE namespace = ?",
                                         (self.namespace,)).fetchone()[0] >= KEPT_CHOICES:
                return None, False
            record, changed = choice_step(RenderChoice.from_json(rows[0][0]) if rows else None, step, now, batch, why,
                                          sample_size)
            if record is not None:
                conn.execute("INSERT INTO batchd_render (namespace, host, record, changed) VALUES (?, ?, ?, ?) "
                             "ON CONFLICT (namespace, host) DO UPDATE SET record = excluded.record, "
                             "changed = excluded.changed", (self.namespace, host, record.to_json(), time.time()))
        return record, changed

    def choices(self, limit: int = 1000) -> dict:
        rows = self.db.rows("SELECT host, record FROM batchd_render WHERE namespace = ? ORDER BY changed DESC LIMIT ?",
                            (self.namespace, limit))
        return {host: RenderChoice.from_json(record) for host, record in rows}
