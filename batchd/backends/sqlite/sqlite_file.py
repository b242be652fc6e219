"""SqliteFile: one SQLite file shared by the threads and processes of one host.

The master and any number of worker processes open the same file. It runs in WAL mode, so
readers never wait for the writer; writers take turns under `busy_timeout`, and every
read-modify-write (a claim, a lease) runs inside `BEGIN IMMEDIATE`, which takes the write
lock before it reads.

Time. SQLite has no server clock, so the host's clock stands in for MySQL's `NOW()`, read in
UTC: `utc_now()`, and `stamp()` writes it as 'YYYY-MM-DD HH:MM:SS', what SQLite's own
CURRENT_TIMESTAMP gives.

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
from datetime import datetime, timezone
from typing import Sequence

from ...errors import BackendUnavailable, ConfigError
from ...service.threads import guard

BUSY_TIMEOUT = 30.0
MIN_SQLITE = (3, 35, 0)
IN_CHUNK = 500
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
# Result codes that mean "not now" (another process holds the file, the disk is full)
# rather than "the statement is wrong": loops wait them out as an outage.
TRANSIENT_CODES = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL,
                   sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PROTOCOL}

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

    def plain_rows(self, sql: str, params: Sequence = ()) -> list:
        """rows(), each a plain tuple rather than an sqlite3.Row (a read of many rows, where Row costs its time)."""
        with self.translated():
            cursor = self.connection().cursor()
            cursor.row_factory = None
            return cursor.execute(sql, params).fetchall()

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
