"""SqliteBatchStore: the task table, the batch record, the items and the queue in one SQLite file.

The store's logic is SqlBatchStore's (batchd/store/sql.py); this module is the SQLite dialect
(quoting, the clock, upserts, the DDL) and SqliteFile, the file's connections and transactions.

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
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from datetime import date, datetime, timedelta, timezone
from datetime import time as time_of_day
from decimal import Decimal
from typing import Optional, Sequence

from ..config import check_identifier
from ..errors import BackendUnavailable, ConfigError
from ..threads import guard
from .base import TaskLayout
from .sql import SqlBatchStore

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


def stamp(moment: datetime) -> str:
    """The text form of a time in the file (fractions of a second dropped, as SQLite does)."""
    return moment.strftime(TIME_FORMAT)


def utc_now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


class SqliteFile:
    """One SQLite file shared by threads and processes: a connection per thread, made again after a fork."""

    def __init__(self, path, busy_timeout: float = BUSY_TIMEOUT):
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise ConfigError(f"SQLite {sqlite3.sqlite_version} is too old for the SQLite store: it needs "
                              f"{'.'.join(map(str, MIN_SQLITE))} or later (RETURNING, ON CONFLICT without a target)")
        path = os.fspath(path)
        if not path or path == ":memory:" or path.startswith("file:"):
            raise ConfigError(f"SQLite store {path!r}: give the path of a file, which every batchd process "
                              "of this host can open")
        self.path = os.path.abspath(path)
        self.busy_timeout = busy_timeout
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
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None,
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
        deadline = time.monotonic() + BUSY_TIMEOUT   # a new file's first switch to WAL may take its turn
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
        return BackendUnavailable(f"SQLite {self.path} unavailable: {error}", "SQLite")

    @contextmanager
    def translated(self):
        """Transient SQLite failures leave as BackendUnavailable, which every loop knows how to wait out.
        A statement may wait for another process's write lock: the thread promises no more than that."""
        try:
            with guard.waiting(self.busy_timeout + 5):
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

    def change_many(self, sql: str, rows: Sequence[Sequence]) -> None:
        """Run one writing statement once per row of values."""
        with self.translated():
            self.connection().executemany(sql, rows)

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


class SqliteBatchStore(SqlBatchStore):
    """The SQLite dialect of SqlBatchStore (batchd/store/sql.py): double quotes and ?, the host's UTC
    clock bound as text, datetime() comparisons, ON CONFLICT upserts, BEGIN IMMEDIATE transactions."""

    runs_in_process = False   # the master and the workers may be separate processes of this host
    backend_name = "SQLite"
    quote_mark = '"'
    placeholder = "?"
    in_chunk = IN_CHUNK
    claim_lock = ""                          # BEGIN IMMEDIATE already holds the file's write lock
    move_in_one_transaction = True           # one write lock and one commit for every chunk
    # No ON UPDATE in SQLite: the store writes the record's times, all from one reading of the clock.
    stamped_on_insert = ("batch_date", "create_time", "update_time")
    stamped_on_update = ("update_time",)

    def __init__(self, path, busy_timeout: float = BUSY_TIMEOUT):
        """`path`: the SQLite file, made if missing; its directory must exist. `busy_timeout`: how long a
        statement waits for another process's write lock before it counts as an outage."""
        super().__init__()
        self.db = SqliteFile(path, busy_timeout)
        self._id_affinity = "INTEGER"

    def describe(self) -> str:
        return f"SQLite {self.db.path}"

    def embedded_queue(self, namespace: str, settings):
        from ..queue.sqlite_queue import SqliteQueue
        return SqliteQueue(self.db, namespace)

    def close(self) -> None:
        self.db.close()

    def ping(self) -> None:
        self.db.rows("SELECT 1")

    def identity(self) -> str:
        return f"SQLite {self.db.path}"

    # -- statements
    def fetch(self, sql: str, params: Sequence = (), dicts: bool = False) -> list:
        rows = self.db.rows(sql, params)
        return [dict(row) for row in rows] if dicts else rows

    def execute(self, sql: str, params: Sequence = ()) -> int:
        return self.db.change(sql, params)

    def execute_many(self, sql: str, rows: Sequence[Sequence]) -> None:
        self.db.change_many(sql, rows)

    def transaction(self):
        return self.db.transaction()

    # -- the clock
    def now(self) -> datetime:
        return utc_now().replace(microsecond=0)

    def now_term(self) -> tuple:
        return "?", [stamp(utc_now())]

    def older_than_term(self, column: str, seconds: float) -> tuple:
        """Times before the cutoff are older than `seconds`. Truncated to the second: never early."""
        return f"datetime({self.quote(column)}) < ?", [stamp(utc_now() - timedelta(seconds=seconds))]

    def time_from_db(self, value) -> datetime:
        return datetime.fromisoformat(value)

    # -- values
    def upsert_clause(self, columns: Sequence[str], key: Optional[Sequence[str]]) -> str:
        target = f"({', '.join(self.quote(c) for c in key)}) " if key else ""
        return f"ON CONFLICT {target}DO UPDATE SET " + ", ".join(f"{self.quote(c)} = excluded.{self.quote(c)}"
                                                                 for c in columns)

    def column_value(self, value):
        """What sqlite3 cannot bind goes to a column as text: JSON for lists and dicts, ISO for times."""
        if isinstance(value, datetime):
            return value.isoformat(sep=" ")
        if isinstance(value, (date, time_of_day, Decimal)):
            return str(value)
        return super().column_value(value)

    # -- the schema
    def location(self) -> str:
        return f"SQLite file {self.db.path}"

    def table_columns(self, table: str) -> dict:
        """Column name -> declared type (upper case), empty when there is no such table."""
        return {row["name"]: row["type"].upper() for row in
                self.fetch("SELECT name, type FROM pragma_table_info(?)", (table,))}

    def check_task_columns(self, layout: TaskLayout, columns: dict) -> None:
        time_type = columns[layout.time_field]
        if any(word in time_type for word in NUMERIC_TIME_TYPES):
            raise ConfigError(f'task table "{layout.table}": column "{layout.time_field}" is {time_type}; batchd keeps '
                              "times as UTC text 'YYYY-MM-DD HH:MM:SS': declare it DATETIME or TEXT "
                              "(BATCH_TASK_TIME_FIELD)")
        self._id_affinity = "INTEGER" if "INT" in columns[layout.id_field] else "TEXT"

    def has_leading_index(self, table: str, column: str) -> bool:
        return bool(self.fetch("SELECT 1 FROM pragma_index_list(?) AS il, pragma_index_info(il.name) AS ii "
                                 "WHERE ii.seqno = 0 AND ii.name = ? LIMIT 1", (table, column)))

    def index_statement(self, table: str, column: str) -> str:
        # Index names are global in an SQLite file, so this one carries the table's name.
        index = check_identifier(f"idx_{table}_{column}"[:64], "index name")
        return f"CREATE INDEX {self.quote(index)} ON {self.quote(table)} ({self.quote(column)})"

    def create_record_table(self, table: str) -> None:
        self.execute(f"""CREATE TABLE IF NOT EXISTS {self.quote(table)} (
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

    def task_table_statements(self, layout: TaskLayout) -> list:
        q = self.quote
        return [f"""CREATE TABLE {q(layout.table)} (
            {q(layout.id_field)} INTEGER PRIMARY KEY,
            "url" TEXT NOT NULL,
            {q(layout.state_field)} INTEGER NOT NULL DEFAULT 0,
            {q(layout.time_field)} DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP)""",
                self.index_statement(layout.table, layout.state_field)]

    def create_default_item_table(self, table: str) -> None:
        self.execute(f"""CREATE TABLE IF NOT EXISTS {self.quote(table)} (
            "id" INTEGER PRIMARY KEY AUTOINCREMENT,
            "batch_id" INTEGER NOT NULL,
            "task_id" {self._id_affinity} NOT NULL,
            "request_seq" INTEGER NOT NULL,
            "item_seq" INTEGER NOT NULL,
            "item" TEXT NOT NULL,
            "create_time" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
            UNIQUE ("batch_id", "task_id", "request_seq", "item_seq"))""")
        index = check_identifier(f"idx_{table}_task"[:64], "index name")
        self.execute(f'CREATE INDEX IF NOT EXISTS {self.quote(index)} ON {self.quote(table)} ("task_id")')
