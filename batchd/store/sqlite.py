"""SqliteBatchStore: the task table, the batch record, the items and the queue in one SQLite file.

The embedded backend for one host with no MySQL and no Redis: the master and any number
of worker processes open the same file. It runs in WAL mode, so readers never wait for
the writer; writers take turns under `busy_timeout`, and every read-modify-write (a
claim, a lease) runs inside `BEGIN IMMEDIATE`, which takes the write lock before it
reads. Every state change is a compare-and-set UPDATE whose row count is returned.

Time. SQLite has no server clock, so the host's clock stands in for MySQL's `NOW()`,
read in UTC: `now()` is the current UTC time, whole seconds, and every time batchd
writes (the task's time column, `batch_date`, the record's `update_time`) is UTC text
'YYYY-MM-DD HH:MM:SS' — what SQLite's own CURRENT_TIMESTAMP and datetime('now') give,
so rows a user inserts with `DEFAULT CURRENT_TIMESTAMP` compare correctly. Comparisons
go through datetime(), which also reads ISO text with a 'T' or fractions of a second.
So batch dates, and the calendar rule that opens a batch at a new day or hour, are UTC.
The queue's lease deadlines and lock expiries are Unix times from the same clock.

Durability. `synchronous=NORMAL`: a power cut may roll back the last commits, but WAL
replays commits in order, so a task's write-back never survives without the items
committed before it; the tasks rolled back to processing come back through the master.

Connections: one per thread and per process (a fork is noticed by its pid). A parent's
connections are kept, unused and unclosed, in the child: CPython frees the other threads'
thread-locals at a fork, and a close there could checkpoint the WAL under the parent.
"""
import logging
import os
import sqlite3
import threading
from contextlib import contextmanager
import time
from datetime import date, datetime, timedelta, timezone
from datetime import time as time_of_day
from decimal import Decimal
from typing import Optional, Sequence

from ..codec import plain_json
from ..config import check_identifier
from ..errors import BackendUnavailable, ConfigError
from ..task import Move, TaskState
from .base import COLUMNS_ITEM_KIND, BatchRecord, BatchStore, ItemRow, Progress, TaskLayout
from .mysql import RECORD_COLUMNS, chunks

log = logging.getLogger("batchd.store")

BUSY_TIMEOUT = 30.0
MIN_SQLITE = (3, 35, 0)
IN_CHUNK = 500
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
# Result codes that mean "not now" (another process holds the file, the disk is full)
# rather than "the statement is wrong": loops wait them out as an outage.
TRANSIENT_CODES = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL,
                   sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PROTOCOL}
# Declared types whose affinity would keep a number: a Unix time, which batchd cannot compare.
NUMERIC_TIME_TYPES = ("INT", "REAL", "FLOA", "DOUB")


def q(name: str) -> str:
    """Quote an identifier that has already been validated."""
    return f'"{check_identifier(name, "identifier")}"'


def marks(n: int) -> str:
    return ", ".join(["?"] * n)


def stamp(moment: datetime) -> str:
    """The text form of a time in the file (fractions of a second dropped, as SQLite does)."""
    return moment.strftime(TIME_FORMAT)


def utc_now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


class SqliteFile:
    """One SQLite file shared by threads and processes: a connection per thread, made again after a fork."""

    def __init__(self, path):
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise ConfigError(f"SQLite {sqlite3.sqlite_version} is too old for the SQLite store: it needs "
                              f"{'.'.join(map(str, MIN_SQLITE))} or later (RETURNING, ON CONFLICT without a target)")
        path = os.fspath(path)
        if not path or path == ":memory:" or path.startswith("file:"):
            raise ConfigError(f"SQLite store {path!r}: give the path of a file, which every batchd process "
                              "of this host can open")
        self.path = os.path.abspath(path)
        self._guard = threading.Lock()
        self._pid = os.getpid()
        self._local = threading.local()
        self._opened: list = []       # (thread, connection) of this process
        self._inherited: list = []    # a parent's connections: never used, never closed here

    def connection(self) -> sqlite3.Connection:
        if self._pid != os.getpid():
            self._forget_parent()
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
            with self._guard:
                self._close_for_ended_threads()
                self._opened.append((threading.current_thread(), conn))
        return conn

    def _forget_parent(self) -> None:
        # Only the forking thread lives on in the child, so the parent's guard may be held by a
        # thread that is gone: a fresh one is taken, never the old one.
        self._inherited.append(self._opened)
        self._guard, self._opened, self._local, self._pid = threading.Lock(), [], threading.local(), os.getpid()

    def _close_for_ended_threads(self) -> None:
        ended = [(thread, conn) for thread, conn in self._opened if not thread.is_alive()]
        for thread, conn in ended:
            self._opened.remove((thread, conn))
            conn.close()

    def _connect(self) -> sqlite3.Connection:
        try:
            # check_same_thread=False only so that a finished thread's connection can be closed by
            # another; each connection is used by the thread that opened it.
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None,
                                   check_same_thread=False)
            conn.row_factory = sqlite3.Row
            mode = self._use_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.DatabaseError as e:
            if _code(e) in TRANSIENT_CODES - {sqlite3.SQLITE_CANTOPEN}:
                raise self.unavailable(e) from None
            # A missing directory, no permission, not a database: nothing that waiting mends.
            raise ConfigError(f"SQLite store {self.path}: cannot use the file: {e}") from None
        if mode.lower() != "wal":
            conn.close()
            raise ConfigError(f"SQLite store {self.path}: WAL mode is not available here (journal mode {mode}); "
                              "put the file on a local filesystem")
        return conn

    @staticmethod
    def _use_wal(conn: sqlite3.Connection) -> str:
        """Put the file in WAL mode (it stays so) and return the mode it is in. Connections switching a
        new file at once can deadlock, which SQLite reports at once, without waiting: so they retry."""
        deadline = time.monotonic() + BUSY_TIMEOUT
        while True:
            try:
                return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            except sqlite3.OperationalError as e:
                if _code(e) != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def close(self) -> None:
        """Close this thread's connection; the next statement opens a new one."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            return
        self._local.conn = None
        with self._guard:
            self._opened = [(t, c) for t, c in self._opened if c is not conn]
        conn.close()

    def unavailable(self, error) -> BackendUnavailable:
        return BackendUnavailable(f"SQLite {self.path} unavailable: {error}")

    @contextmanager
    def translated(self):
        """Transient SQLite failures leave as BackendUnavailable, which every loop knows how to wait out."""
        try:
            yield
        except sqlite3.OperationalError as e:
            if _code(e) in TRANSIENT_CODES:
                raise self.unavailable(e) from None
            raise

    def rows(self, sql: str, params: Sequence = ()) -> list:
        """Run one statement on its own (autocommit) and return every row it gives."""
        with self.translated():
            return self.connection().execute(sql, params).fetchall()

    def change(self, sql: str, params: Sequence = ()) -> int:
        """Run one writing statement on its own and return how many rows it changed."""
        with self.translated():
            return self.connection().execute(sql, params).rowcount

    @contextmanager
    def transaction(self):
        """BEGIN IMMEDIATE: the write lock is taken before the first read, so what is read stays true."""
        conn = self.connection()
        with self.translated():
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                self._roll_back(conn)
                raise

    def _roll_back(self, conn: sqlite3.Connection) -> None:
        try:
            conn.rollback()
        except sqlite3.Error:
            self.close()     # a connection stuck in a transaction is no use to the next statement


def _code(error: sqlite3.Error) -> int:
    return getattr(error, "sqlite_errorcode", 0) & 0xFF


class SqliteBatchStore(BatchStore):
    runs_in_process = False   # the master and the workers may be separate processes of this host

    def __init__(self, path):
        """`path`: the SQLite file, made if missing; its directory must exist."""
        self.db = SqliteFile(path)
        self._item_columns: dict = {}
        self._id_affinity = "INTEGER"

    def describe(self) -> str:
        return f"SQLite {self.db.path}"

    def embedded_queue(self, namespace: str, settings):
        from ..queue.sqlite_queue import SqliteQueue
        return SqliteQueue(self.db, namespace)

    def close(self) -> None:
        self.db.close()

    # -- binding to a task table
    def open(self, layout: TaskLayout) -> None:
        columns = self._columns(layout.table)
        if not columns:
            raise ConfigError(f'task table "{layout.table}" not found in SQLite file {self.db.path} (__task_table__)')
        for name, setting in ((layout.id_field, "BATCH_TASK_ID_FIELD"),
                              (layout.state_field, "BATCH_TASK_STATE_FIELD"),
                              (layout.time_field, "BATCH_TASK_TIME_FIELD")):
            if name not in columns:
                raise ConfigError(f'task table "{layout.table}" has no column "{name}" ({setting})')
        time_type = columns[layout.time_field]
        if any(word in time_type for word in NUMERIC_TIME_TYPES):
            raise ConfigError(f'task table "{layout.table}": column "{layout.time_field}" is {time_type}; batchd keeps '
                              "times as UTC text 'YYYY-MM-DD HH:MM:SS': declare it DATETIME or TEXT "
                              "(BATCH_TASK_TIME_FIELD)")
        self._id_affinity = "INTEGER" if "INT" in columns[layout.id_field] else "TEXT"
        self.layout = layout
        self._warn_unindexed_state(layout)
        self._create_record_table(layout)
        if layout.item_table:
            self.item_columns(layout.item_table, setting="__item_table__")
        else:
            self._create_default_item_table(layout.default_item_table)

    def _columns(self, table: str) -> dict:
        """Column name -> declared type (upper case), empty when there is no such table."""
        return {row["name"]: row["type"].upper() for row in
                self.db.rows("SELECT name, type FROM pragma_table_info(?)", (table,))}

    def _warn_unindexed_state(self, layout: TaskLayout) -> None:
        fix = self.missing_state_index(layout)
        if fix:
            log.warning('task table "%s": column "%s" has no index, so every patrol scans the whole table; run: %s',
                        layout.table, layout.state_field, fix)

    def missing_state_index(self, layout: TaskLayout) -> Optional[str]:
        if self.db.rows("SELECT 1 FROM pragma_index_list(?) AS il, pragma_index_info(il.name) AS ii "
                        "WHERE ii.seqno = 0 AND ii.name = ? LIMIT 1", (layout.table, layout.state_field)):
            return None
        # Index names are global in an SQLite file, so this one carries the table's name.
        index = check_identifier(f"idx_{layout.table}_{layout.state_field}"[:64], "index name")
        return f"CREATE INDEX {q(index)} ON {q(layout.table)} ({q(layout.state_field)})"

    def _create_record_table(self, layout: TaskLayout) -> None:
        self.db.change(f"""CREATE TABLE IF NOT EXISTS {q(layout.record_table)} (
            "id" INTEGER PRIMARY KEY AUTOINCREMENT,
            "batch_date" DATETIME NOT NULL,
            "total_count" INTEGER NOT NULL DEFAULT 0,
            "done_count" INTEGER NOT NULL DEFAULT 0,
            "fail_count" INTEGER NOT NULL DEFAULT 0,
            "interval" INTEGER NOT NULL,
            "interval_unit" TEXT NOT NULL,
            "is_done" INTEGER NOT NULL DEFAULT 0,
            "create_time" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
            "update_time" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP)""")
        missing = [c for c in RECORD_COLUMNS if c not in self._columns(layout.record_table)]
        if missing:
            raise ConfigError(f'batch record table "{layout.record_table}" exists without column '
                              f'"{missing[0]}"; rename the old table so batchd can create its own')

    def _create_default_item_table(self, table: str) -> None:
        self.db.change(f"""CREATE TABLE IF NOT EXISTS {q(table)} (
            "id" INTEGER PRIMARY KEY AUTOINCREMENT,
            "batch_id" INTEGER NOT NULL,
            "task_id" {self._id_affinity} NOT NULL,
            "request_seq" INTEGER NOT NULL,
            "item_seq" INTEGER NOT NULL,
            "item" TEXT NOT NULL,
            "create_time" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
            UNIQUE ("batch_id", "task_id", "request_seq", "item_seq"))""")
        index = check_identifier(f"idx_{table}_task"[:64], "index name")
        self.db.change(f'CREATE INDEX IF NOT EXISTS {q(index)} ON {q(table)} ("task_id")')

    def item_columns(self, table: str, setting: str = "the item table") -> Optional[frozenset]:
        if table not in self._item_columns:
            columns = self._columns(table)
            if not columns:
                raise ConfigError(f'item table "{table}" not found in SQLite file {self.db.path} ({setting})')
            self._item_columns[table] = frozenset(columns)
        return self._item_columns[table]

    # -- the clock
    def now(self) -> datetime:
        return utc_now().replace(microsecond=0)

    def _now_text(self) -> str:
        return stamp(utc_now())

    def _cutoff(self, older_than: float) -> str:
        """Times before this are older than `older_than` seconds. Truncated to the second: never early."""
        return stamp(utc_now() - timedelta(seconds=older_than))

    # -- batches
    def last_batch(self) -> Optional[BatchRecord]:
        rows = self.db.rows(f'SELECT "id", "batch_date", "total_count", "done_count", "fail_count", "interval", '
                            f'"interval_unit", "is_done" FROM {q(self.layout.record_table)} ORDER BY "id" DESC LIMIT 1')
        if not rows:
            return None
        record = dict(rows[0])
        record["batch_date"] = datetime.fromisoformat(record["batch_date"])
        record["is_done"] = bool(record["is_done"])
        return BatchRecord(**record)

    def reset_tasks(self, chunk_size: int):
        """Walk the primary key in ranges of chunk_size rows: one short UPDATE each, resumable."""
        t, key, state = q(self.layout.table), q(self.layout.id_field), q(self.layout.state_field)
        last = None
        while True:
            after, params = (f"WHERE {key} > ? ", [last]) if last is not None else ("", [])
            upper = self.db.rows(f"SELECT {key} FROM {t} {after}ORDER BY {key} LIMIT 1 OFFSET ?",
                                 params + [chunk_size - 1])
            bounds = ([f"{key} > ?"] if last is not None else []) + ([f"{key} <= ?"] if upper else [])
            bound_values = params + ([upper[0][0]] if upper else [])
            yield self.db.change(f"UPDATE {t} SET {state} = ?, {q(self.layout.time_field)} = ? "
                                 f"WHERE {' AND '.join(bounds + [f'{state} IS NOT ?'])}",
                                 [int(TaskState.PENDING), self._now_text()] + bound_values + [int(TaskState.PENDING)])
            if not upper:
                return
            last = upper[0][0]

    def insert_batch(self, interval: int, interval_unit: str, total: int) -> BatchRecord:
        now = self._now_text()
        self.db.change(f'INSERT INTO {q(self.layout.record_table)} ("batch_date", "total_count", "interval", '
                       '"interval_unit", "create_time", "update_time") VALUES (?, ?, ?, ?, ?, ?)',
                       (now, total, interval, interval_unit, now, now))
        return self.last_batch()

    def update_batch(self, batch_id: int, progress: Progress, is_done: bool) -> None:
        self.db.change(f'UPDATE {q(self.layout.record_table)} SET "total_count" = ?, "done_count" = ?, '
                       '"fail_count" = ?, "is_done" = ?, "update_time" = ? WHERE "id" = ?',
                       (progress.total, progress.done, progress.failed, int(is_done), self._now_text(), batch_id))

    # -- task states
    def claim(self, limit: int) -> list:
        t, key, state = q(self.layout.table), q(self.layout.id_field), q(self.layout.state_field)
        with self.db.transaction() as conn:
            rows = [dict(row) for row in conn.execute(f"SELECT * FROM {t} WHERE {state} = ? ORDER BY {key} LIMIT ?",
                                                      (int(TaskState.PENDING), limit))]
            ids = [row[self.layout.id_field] for row in rows]
            for part in chunks(ids, IN_CHUNK):
                conn.execute(f"UPDATE {t} SET {state} = ?, {q(self.layout.time_field)} = ? "
                             f"WHERE {key} IN ({marks(len(part))}) AND {state} = ?",
                             [int(TaskState.PROCESSING), self._now_text()] + part + [int(TaskState.PENDING)])
        for row in rows:
            row[self.layout.state_field] = int(TaskState.PROCESSING)
        return rows

    def move(self, move: Move, ids: Sequence, older_than: Optional[float] = None) -> int:
        t, key, state = q(self.layout.table), q(self.layout.id_field), q(self.layout.state_field)
        time_col = q(self.layout.time_field)
        sources = [int(s) for s in move.sources]
        source_test = f" AND {state} IN ({marks(len(sources))})" if sources else ""
        age_test = f" AND datetime({time_col}) < ?" if older_than is not None else ""
        age_values = [self._cutoff(older_than)] if older_than is not None else []
        moved = 0
        with self.db.transaction() as conn:
            for part in chunks(list(ids), IN_CHUNK):
                moved += conn.execute(f"UPDATE {t} SET {state} = ?, {time_col} = ? "
                                      f"WHERE {key} IN ({marks(len(part))}){source_test}{age_test}",
                                      [int(move.target), self._now_text()] + part + sources + age_values).rowcount
        return moved

    def stale_processing(self, older_than: float, limit: int) -> list:
        t, key, state = q(self.layout.table), q(self.layout.id_field), q(self.layout.state_field)
        rows = self.db.rows(f"SELECT {key} FROM {t} WHERE {state} = ? AND datetime({q(self.layout.time_field)}) < ? "
                            "LIMIT ?", (int(TaskState.PROCESSING), self._cutoff(older_than), limit))
        return [row[0] for row in rows]

    def progress(self) -> Progress:
        state = q(self.layout.state_field)
        counts = {value: n for value, n in
                  self.db.rows(f"SELECT {state}, COUNT(*) FROM {q(self.layout.table)} GROUP BY {state}")}
        return Progress(total=sum(counts.values()), done=counts.get(int(TaskState.DONE), 0),
                        failed=counts.get(int(TaskState.FAILED), 0),
                        pending=counts.get(int(TaskState.PENDING), 0),
                        processing=counts.get(int(TaskState.PROCESSING), 0))

    def unsettled_count(self) -> int:
        state = q(self.layout.state_field)
        return self.db.rows(f"SELECT COUNT(*) FROM {q(self.layout.table)} WHERE {state} IN (?, ?)",
                            (int(TaskState.PENDING), int(TaskState.PROCESSING)))[0][0]

    # -- items
    def save_items(self, table: str, kind: str, rows: Sequence[ItemRow]) -> None:
        if not rows:
            return
        with self.db.transaction() as conn:
            if kind == COLUMNS_ITEM_KIND:
                self._save_column_items(conn, table, rows)
            else:
                self._save_json_items(conn, table, rows)

    def _save_json_items(self, conn, table: str, rows: Sequence[ItemRow]) -> None:
        conn.executemany(f'INSERT INTO {q(table)} ("batch_id", "task_id", "request_seq", "item_seq", "item") '
                         'VALUES (?, ?, ?, ?, ?) ON CONFLICT ("batch_id", "task_id", "request_seq", "item_seq") '
                         'DO UPDATE SET "item" = excluded."item"',
                         [(r.batch_id, r.task_id, r.request_seq, r.item_seq, plain_json(r.data)) for r in rows])

    def _save_column_items(self, conn, table: str, rows: Sequence[ItemRow]) -> None:
        by_columns: dict = {}
        for row in rows:
            by_columns.setdefault(tuple(row.data), []).append(row.data)
        for columns, items in by_columns.items():
            names = ", ".join(q(c) for c in columns)
            updates = ", ".join(f"{q(c)} = excluded.{q(c)}" for c in columns)
            # No conflict target: like MySQL's ON DUPLICATE KEY, any unique key of the user's table counts.
            conn.executemany(f"INSERT INTO {q(table)} ({names}) VALUES ({marks(len(columns))}) "
                             f"ON CONFLICT DO UPDATE SET {updates}",
                             [[column_value(item[c]) for c in columns] for item in items])


def column_value(value):
    """What sqlite3 cannot bind goes to a column as text: JSON for lists and dicts, ISO for times."""
    if isinstance(value, (dict, list, tuple)):
        return plain_json(value)
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (date, time_of_day, Decimal)):
        return str(value)
    return value
