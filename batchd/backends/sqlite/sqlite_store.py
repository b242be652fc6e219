"""SqliteBatchStore: the task table, the batch record and the items in one SQLite file (its queue-side
ports live in the same file: batchd/backends/sqlite/sqlite_ports.py), for one host with no MySQL and no Redis.

The store's logic is SqlBatchStore's (batchd/backends/sql.py); this module is the SQLite dialect (the
hooks of batchd/backends/sql_dialect.py): quoting, the clock, upserts, the DDL. The file's connections and
transactions are SqliteFile's (batchd/backends/sqlite/sqlite_file.py). Every state change is a
compare-and-set UPDATE whose row count is returned.

Time. Every time batchd writes (the task's time column, `batch_date`, the record's `update_time`)
is UTC text 'YYYY-MM-DD HH:MM:SS', so rows a user inserts with `DEFAULT CURRENT_TIMESTAMP` compare
correctly. Comparisons go through datetime(), which also reads ISO text with a 'T' or fractions
of a second. So batch dates, and the calendar rule that opens a batch at a new day or hour, are UTC.
"""
import hashlib
import sqlite3
from datetime import date, datetime, timedelta, timezone, tzinfo
from datetime import time as time_of_day
from decimal import Decimal
from typing import Iterator, Optional, Sequence

from ...config import check_identifier
from ...errors import ConfigError
from ...model import TaskLayout
from ..sql import SqlBatchStore
from ..sql_dialect import column_sets, where_all
from ..task_load import SEEN_TABLE, ColumnLimit, declared_limit
from .sqlite_file import BUSY_TIMEOUT, IN_CHUNK, SqliteFile, stamp, utc_now

# Declared types whose affinity would keep a number: a Unix time, which batchd cannot compare.
NUMERIC_TIME_TYPES = ("INT", "REAL", "FLOA", "DOUB")
ROWID = "_rowid_"     # every table's row number (but a WITHOUT ROWID one's), whatever its columns are named


class SqliteBatchStore(SqlBatchStore):
    """The SQLite dialect of SqlBatchStore (batchd/backends/sql.py): double quotes and ?, the host's UTC
    clock bound as text, datetime() comparisons, ON CONFLICT upserts, BEGIN IMMEDIATE transactions."""

    runs_in_process = False   # the master and the workers may be separate processes of this host
    backend_name = "SQLite"
    served_by = "sqlite"             # its other ports live in the same file
    quote_mark = '"'
    placeholder = "?"
    in_chunk = IN_CHUNK
    claim_lock = ""                          # BEGIN IMMEDIATE already holds the file's write lock
    move_in_one_transaction = True           # one write lock and one commit for every chunk
    # No ON UPDATE in SQLite: the store writes the record's times, all from one reading of the clock.
    stamped_on_insert = ("batch_date", "create_time", "update_time")
    cursor_type = "TEXT"
    stats_type = "TEXT"
    print_type = "TEXT"
    outcome_type = "TEXT"
    stamped_on_update = ("update_time",)

    def __init__(self, path, busy_timeout: float = BUSY_TIMEOUT):
        """`path`: the SQLite file, made if missing; its directory must exist. `busy_timeout`: how long a
        statement waits for another process's write lock before it counts as an outage."""
        super().__init__()
        self.db = SqliteFile(path, busy_timeout)
        self._id_affinity = "INTEGER"

    def describe(self) -> str:
        return f"SQLite {self.db.path}"

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

    def exported_column(self, column: str, info, as_text: bool) -> str:
        """A column declared DATETIME or TIMESTAMP holds its times as text with a space ('2026-12-07 05:04:03', as
        the store writes them): they come as ISO 8601 text, its 'T' put in by SQLite itself, whatever `as_text`
        says (SQLite has no time type to give instead)."""
        quoted = self.quote(column)
        if not any(declared in info for declared in ("DATETIME", "TIMESTAMP")):
            return quoted
        return f"CASE WHEN typeof({quoted}) = 'text' THEN replace({quoted}, ' ', 'T') ELSE {quoted} END"

    def stream_select(self, table: str, selected: Sequence[str], conditions: list, values: list,
                      size: int) -> Iterator[list]:
        """Chunks in rowid order, each one short read that starts after the last rowid of the one before: no read
        stays open across chunks, so the workers' commits and the WAL's checkpoints never wait for an export.
        (A table made WITHOUT ROWID has no rowid to go by: ConfigError.)"""
        names = ", ".join(selected)
        last = None
        while True:
            after: tuple = ([f"{ROWID} > ?"], [last]) if last is not None else ([], [])
            try:
                rows = self.db.plain_rows(f"SELECT {ROWID}, {names} FROM {self.quote(table)}"
                                          f"{where_all(conditions + after[0])} ORDER BY {ROWID} LIMIT ?",
                                          values + after[1] + [size])
            except sqlite3.OperationalError as e:
                raise ConfigError(f"item table {self.quote(table)} cannot be read in rowid order ({e}): "
                                  "batchd export reads SQLite tables by rowid") from None
            if not rows:
                return
            last = rows[-1][0]
            yield [row[1:] for row in rows]

    # -- the clock
    def now(self) -> datetime:
        return utc_now().replace(microsecond=0)

    def clock_zone(self) -> tzinfo:
        return timezone.utc

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

    def unique_keys(self, table: str) -> list:
        """The UNIQUE indexes (partial ones match no ON CONFLICT without their WHERE) and the primary key,
        which pragma_index_list leaves out when it is the rowid (INTEGER PRIMARY KEY)."""
        rows = self.fetch('SELECT il.name, ii.name FROM pragma_index_list(?) AS il, pragma_index_info(il.name) AS ii '
                          'WHERE il."unique" = 1 AND il.partial = 0', (table,))
        rows += self.fetch("SELECT '', name FROM pragma_table_info(?) WHERE pk > 0", (table,))
        return column_sets(rows)

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
            "reset_cursor" TEXT,
            "stats" TEXT,
            "opening" TEXT,
            "spider_print" TEXT,
            "outcome" TEXT,
            "quality" TEXT,
            "create_time" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
            "update_time" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP)""")

    def create_failure_table(self, table: str) -> None:
        self.execute(f"""CREATE TABLE IF NOT EXISTS {self.quote(table)} (
            "batch_id" INTEGER NOT NULL,
            "task_id" {self._id_affinity} NOT NULL,
            "url" TEXT,
            "reason" TEXT NOT NULL,
            "status" INTEGER,
            "error_class" TEXT,
            "attempts" INTEGER,
            "host" TEXT NOT NULL,
            "fail_time" DATETIME NOT NULL,
            PRIMARY KEY ("batch_id", "task_id"))""")

    def create_page_table(self, table: str) -> None:
        self.execute(f"""CREATE TABLE IF NOT EXISTS {self.quote(table)} (
            "url_key" TEXT NOT NULL PRIMARY KEY,
            "url" TEXT NOT NULL,
            "task_id" {self._id_affinity} NOT NULL,
            "etag" TEXT,
            "last_modified" TEXT,
            "vary" TEXT,
            "signature" TEXT,
            "whole_at" REAL NOT NULL,
            "seen_in" INTEGER NOT NULL,
            "changed_in" INTEGER NOT NULL,
            "redirected" INTEGER NOT NULL DEFAULT 0,
            "parsed_by" {self.print_type})""")
        self._create_index(table, "changed_in")

    def create_revisit_table(self, table: str) -> None:
        self.execute(f"""CREATE TABLE IF NOT EXISTS {self.quote(table)} (
            "task_id" {self._id_affinity} NOT NULL PRIMARY KEY,
            "interval_s" REAL NOT NULL,
            "next_due" REAL NOT NULL,
            "verdict" TEXT NOT NULL,
            "batch_id" INTEGER NOT NULL)""")
        self._create_index(table, "next_due")

    def _create_index(self, table: str, column: str, index: Optional[str] = None) -> None:
        """Index `column` of a table batchd made, unless it is. Index names are global in an SQLite file: by
        default idx_<table>_<column>, cut to 64 characters with a hash of the whole, so that the indexes of
        two tables with long names never share one (an index named before: `index`)."""
        if index is None:
            index = f"idx_{table}_{column}"
            if len(index) > 64:
                index = f"{index[:55]}_{hashlib.sha1(index.encode()).hexdigest()[:8]}"
        self.execute(f"CREATE INDEX IF NOT EXISTS {self.quote(index)} ON {self.quote(table)} ({self.quote(column)})")

    def task_table_statements(self, layout: TaskLayout) -> list:
        q = self.quote
        return [f"""CREATE TABLE {q(layout.table)} (
            {q(layout.id_field)} INTEGER PRIMARY KEY,
            "url" TEXT NOT NULL,
            {q(layout.state_field)} INTEGER NOT NULL DEFAULT 0,
            {q(layout.time_field)} DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP)""",
                self.index_statement(layout.table, layout.state_field)]

    # -- loading tasks (backends/task_load.py)
    def column_limit(self, info) -> ColumnLimit:
        """SQLite stores text of any length: the length a declared type like VARCHAR(500) names is honoured
        all the same (a table shared with MySQL), else batchd's bound."""
        return declared_limit(info)

    def seen_table_statements(self, table: str, column: str, id_column: str) -> list:
        seen, key, url = self.quote(SEEN_TABLE), self.quote("url_key"), self.quote(column)
        return [self.drop_seen_statement(),
                f"CREATE TEMP TABLE {seen} ({key} TEXT PRIMARY KEY, \"task_id\") WITHOUT ROWID",
                f"INSERT INTO {seen} ({key}, \"task_id\") SELECT {url}, MIN({self.quote(id_column)}) "
                f"FROM {self.quote(table)} WHERE {url} IS NOT NULL GROUP BY {url}"]

    def seen_key(self, url: str):
        return url

    def drop_seen_statement(self) -> str:
        return f"DROP TABLE IF EXISTS temp.{self.quote(SEEN_TABLE)}"

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
        self._create_index(table, "task_id", check_identifier(f"idx_{table}_task"[:64], "index name"))
