"""MysqlBatchStore: the default backend, on MySQL or MariaDB through mysqlclient.

Every statement binds its values; table and column names come from a validated
TaskLayout and are quoted with backticks. Each thread has its own connection
(mysqlclient connections are not thread-safe), made again after a fork.
"""
import logging
import os
import threading
import time
from contextlib import contextmanager
from typing import Optional, Sequence
from urllib.parse import parse_qs, unquote, urlsplit

from ..codec import plain_json
from ..config import check_identifier, redact_url
from ..errors import BackendUnavailable, ConfigError
from ..task import Move, TaskState
from .base import (COLUMNS_ITEM_KIND, BatchRecord, BatchStore, ItemRow, Progress, TaskLayout)

log = logging.getLogger("batchd.store")

# Client errors that mean "the server is not there" rather than "the statement is wrong".
CONNECTION_ERRORS = {1040, 1042, 1043, 1047, 1053, 1081, 1152, 1158, 1159, 1160, 1161,
                     2002, 2003, 2005, 2006, 2012, 2013, 2026, 2055}
IN_CHUNK = 1000
IDLE_PING = 30.0
TIME_TYPES = {"datetime", "timestamp"}
RECORD_COLUMNS = ("id", "batch_date", "total_count", "done_count", "fail_count", "interval",
                  "interval_unit", "is_done", "create_time", "update_time")


def q(name: str) -> str:
    """Quote an identifier that has already been validated."""
    return f"`{check_identifier(name, 'identifier')}`"


def marks(n: int) -> str:
    return ", ".join(["%s"] * n)


def chunks(seq: Sequence, size: int = IN_CHUNK):
    for start in range(0, len(seq), size):
        yield list(seq[start:start + size])


def parse_mysql_url(url: str) -> dict:
    """mysql://user:password@host:port/database?charset=utf8mb4&unix_socket=/path -> connect() args."""
    parts = urlsplit(url)
    if parts.scheme not in ("mysql", "mariadb"):
        raise ConfigError(f"setting MYSQL_URL: {redact_url(url)}: the scheme must be mysql://")
    database = unquote(parts.path.lstrip("/"))
    if not database:
        raise ConfigError(f"setting MYSQL_URL: {redact_url(url)}: no database name (mysql://user:pass@host:3306/DB)")
    try:
        port = parts.port or 3306
    except ValueError:
        raise ConfigError(f"setting MYSQL_URL: {redact_url(url)}: bad port") from None
    args = {"host": parts.hostname or "127.0.0.1", "port": port, "user": unquote(parts.username or "root"),
            "passwd": unquote(parts.password or ""), "db": database, "charset": "utf8mb4",
            "connect_timeout": 5}
    for name, values in parse_qs(parts.query).items():
        if name not in ("charset", "unix_socket", "connect_timeout", "read_timeout", "write_timeout"):
            raise ConfigError(f"setting MYSQL_URL: unknown option {name!r}")
        args[name] = int(values[-1]) if name.endswith("timeout") else values[-1]
    return args


def _driver():
    try:
        import MySQLdb
        import MySQLdb.cursors
    except ImportError:
        raise ConfigError('the MySQL store needs mysqlclient: pip install "batchd[mysql]" '
                          "(or apt install python3-mysqldb)") from None
    return MySQLdb


class MysqlBatchStore(BatchStore):
    def __init__(self, url: Optional[str] = None, **connect_args):
        """`url` as BATCHD_MYSQL_URL; keyword arguments go to MySQLdb.connect() and win over the URL."""
        if not url and not connect_args:
            raise ConfigError("no MySQL configured: set BATCHD_MYSQL_URL (mysql://user:pass@host:3306/db) "
                              "or MYSQL_URL in the config file")
        self.url = url
        self._args = dict(parse_mysql_url(url) if url else {}, **connect_args)
        self._local = threading.local()
        self._pid = os.getpid()
        self._item_columns: dict = {}
        self._id_type = "BIGINT"

    def describe(self) -> str:
        a = self._args
        return f"MySQL {a.get('user')}@{a.get('host')}:{a.get('port')}/{a.get('db')}"

    # -- connections
    def _connection(self):
        if self._pid != os.getpid():          # forked: the parent's sockets are not ours
            self._local, self._pid = threading.local(), os.getpid()
        conn = getattr(self._local, "conn", None)
        if conn is not None and time.monotonic() - self._local.used > IDLE_PING:
            try:
                conn.ping()
            except Exception:
                self._drop()
                conn = None
        if conn is None:
            MySQLdb = _driver()
            try:
                conn = MySQLdb.connect(autocommit=True, **self._args)
            except MySQLdb.OperationalError as e:
                raise self._unavailable(e) from None
            with conn.cursor() as cur:
                # A claim must not hold locks on rows it skipped.
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            self._local.conn = conn
        self._local.used = time.monotonic()
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def _unavailable(self, error) -> BackendUnavailable:
        return BackendUnavailable(f"{self.describe()} unreachable: {error.args[-1] if error.args else error}")

    @contextmanager
    def _cursor(self, dict_rows: bool = False, transaction: bool = False):
        """A cursor on this thread's connection; connection losses become BackendUnavailable,
        wherever they surface (a dead connection also fails when the cursor is closed)."""
        MySQLdb = _driver()
        conn = self._connection()
        cursor_class = MySQLdb.cursors.DictCursor if dict_rows else MySQLdb.cursors.Cursor
        try:
            cur = conn.cursor(cursor_class)
            try:
                if transaction:
                    conn.begin()
                yield cur
                if transaction:
                    conn.commit()
            finally:
                cur.close()
        except MySQLdb.OperationalError as e:
            if e.args and e.args[0] in CONNECTION_ERRORS:
                self._drop()
                raise self._unavailable(e) from None
            self._rollback(conn, transaction)
            raise
        except BaseException:
            self._rollback(conn, transaction)
            raise

    def _rollback(self, conn, transaction: bool) -> None:
        if transaction:
            try:
                conn.rollback()
            except Exception:
                self._drop()

    def close(self) -> None:
        self._drop()

    # -- binding to a task table
    def open(self, layout: TaskLayout) -> None:
        columns = self._columns(layout.table)
        if not columns:
            raise ConfigError(f"task table `{layout.table}` not found in database "
                              f"`{self._args.get('db')}` (__task_table__)")
        for name, setting in ((layout.id_field, "BATCH_TASK_ID_FIELD"),
                              (layout.state_field, "BATCH_TASK_STATE_FIELD"),
                              (layout.time_field, "BATCH_TASK_TIME_FIELD")):
            if name not in columns:
                raise ConfigError(f"task table `{layout.table}` has no column `{name}` ({setting})")
        time_type = columns[layout.time_field]["DATA_TYPE"].lower()
        if time_type not in TIME_TYPES:
            raise ConfigError(f"task table `{layout.table}`: column `{layout.time_field}` is {time_type.upper()}, "
                              "it must be DATETIME or TIMESTAMP (BATCH_TASK_TIME_FIELD)")
        self._id_type = columns[layout.id_field]["COLUMN_TYPE"]
        self.layout = layout
        self._warn_unindexed_state(layout)
        self._create_record_table(layout)
        if layout.item_table:
            self.item_columns(layout.item_table, setting="__item_table__")
        else:
            self._create_default_item_table(layout.default_item_table)

    def _columns(self, table: str) -> dict:
        with self._cursor(dict_rows=True) as cur:
            cur.execute("SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE FROM information_schema.COLUMNS "
                        "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s", (table,))
            return {row["COLUMN_NAME"]: row for row in cur.fetchall()}

    def _warn_unindexed_state(self, layout: TaskLayout) -> None:
        fix = self.missing_state_index(layout)
        if fix:
            log.warning("task table `%s`: column `%s` has no index, so every patrol scans the whole table; run: "
                        "%s", layout.table, layout.state_field, fix)

    def missing_state_index(self, layout: TaskLayout) -> Optional[str]:
        with self._cursor() as cur:
            cur.execute("SELECT 1 FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
                        "AND TABLE_NAME = %s AND COLUMN_NAME = %s AND SEQ_IN_INDEX = 1 LIMIT 1",
                        (layout.table, layout.state_field))
            if cur.fetchone():
                return None
        index = check_identifier(f"idx_{layout.state_field}"[:64], "index name")
        return f"ALTER TABLE `{layout.table}` ADD INDEX `{index}` (`{layout.state_field}`)"

    def _create_record_table(self, layout: TaskLayout) -> None:
        with self._cursor() as cur:
            cur.execute(f"""CREATE TABLE IF NOT EXISTS {q(layout.record_table)} (
                `id` BIGINT NOT NULL AUTO_INCREMENT,
                `batch_date` DATETIME NOT NULL,
                `total_count` BIGINT NOT NULL DEFAULT 0,
                `done_count` BIGINT NOT NULL DEFAULT 0,
                `fail_count` BIGINT NOT NULL DEFAULT 0,
                `interval` INT NOT NULL,
                `interval_unit` VARCHAR(8) NOT NULL,
                `is_done` TINYINT NOT NULL DEFAULT 0,
                `create_time` DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
                `update_time` DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
                PRIMARY KEY (`id`)
            ) DEFAULT CHARSET=utf8mb4""")
        missing = [c for c in RECORD_COLUMNS if c not in self._columns(layout.record_table)]
        if missing:
            raise ConfigError(f"batch record table `{layout.record_table}` exists without column "
                              f"`{missing[0]}`; rename the old table so batchd can create its own")

    def _create_default_item_table(self, table: str) -> None:
        with self._cursor() as cur:
            cur.execute(f"""CREATE TABLE IF NOT EXISTS {q(table)} (
                `id` BIGINT NOT NULL AUTO_INCREMENT,
                `batch_id` BIGINT NOT NULL,
                `task_id` {self._id_type} NOT NULL,
                `request_seq` INT NOT NULL,
                `item_seq` INT NOT NULL,
                `item` JSON NOT NULL,
                `create_time` DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
                PRIMARY KEY (`id`),
                UNIQUE KEY `uq_item` (`batch_id`, `task_id`, `request_seq`, `item_seq`),
                KEY `idx_task` (`task_id`)
            ) DEFAULT CHARSET=utf8mb4""")

    def item_columns(self, table: str, setting: str = "the item table") -> Optional[frozenset]:
        if table not in self._item_columns:
            columns = self._columns(table)
            if not columns:
                raise ConfigError(f"item table `{table}` not found in database `{self._args.get('db')}` ({setting})")
            self._item_columns[table] = frozenset(columns)
        return self._item_columns[table]

    # -- batches
    def now(self):
        with self._cursor() as cur:
            cur.execute("SELECT NOW()")
            return cur.fetchone()[0]

    def last_batch(self) -> Optional[BatchRecord]:
        with self._cursor(dict_rows=True) as cur:
            cur.execute(f"SELECT `id`, `batch_date`, `total_count`, `done_count`, `fail_count`, `interval`, "
                        f"`interval_unit`, `is_done` FROM {q(self.layout.record_table)} ORDER BY `id` DESC LIMIT 1")
            row = cur.fetchone()
        if row is None:
            return None
        row["is_done"] = bool(row["is_done"])
        return BatchRecord(**row)

    def reset_tasks(self, chunk_size: int):
        """Walk the primary key in ranges of chunk_size rows: one short UPDATE each, resumable."""
        last = None
        while True:
            upper = self._nth_id_after(last, chunk_size)
            yield self._reset_range(last, upper)
            if upper is None:
                return
            last = upper

    def _nth_id_after(self, last, n: int):
        """The id n rows after `last` (from the start when None), or None when fewer rows are left."""
        t, key = q(self.layout.table), q(self.layout.id_field)
        after, params = (f"WHERE {key} > %s ", [last]) if last is not None else ("", [])
        with self._cursor() as cur:
            cur.execute(f"SELECT {key} FROM {t} {after}ORDER BY {key} LIMIT 1 OFFSET %s", params + [n - 1])
            row = cur.fetchone()
        return row[0] if row else None

    def _reset_range(self, last, upper) -> int:
        """Every row with last < id <= upper (open ends when None) back to pending."""
        key, state = q(self.layout.id_field), q(self.layout.state_field)
        conditions, params = [f"NOT ({state} <=> %s)"], [int(TaskState.PENDING)]
        if last is not None:
            conditions.append(f"{key} > %s")
            params.append(last)
        if upper is not None:
            conditions.append(f"{key} <= %s")
            params.append(upper)
        with self._cursor() as cur:
            cur.execute(f"UPDATE {q(self.layout.table)} SET {state} = %s, {q(self.layout.time_field)} = NOW() "
                        f"WHERE {' AND '.join(conditions)}", [int(TaskState.PENDING)] + params)
            return cur.rowcount

    def insert_batch(self, interval: int, interval_unit: str, total: int) -> BatchRecord:
        with self._cursor() as cur:
            cur.execute(f"INSERT INTO {q(self.layout.record_table)} (`batch_date`, `total_count`, `interval`, "
                        "`interval_unit`) VALUES (NOW(), %s, %s, %s)", (total, interval, interval_unit))
        return self.last_batch()

    def update_batch(self, batch_id: int, progress: Progress, is_done: bool) -> None:
        with self._cursor() as cur:
            cur.execute(f"UPDATE {q(self.layout.record_table)} SET `total_count` = %s, `done_count` = %s, "
                        "`fail_count` = %s, `is_done` = %s WHERE `id` = %s",
                        (progress.total, progress.done, progress.failed, int(is_done), batch_id))

    # -- task states
    def claim(self, limit: int) -> list:
        t, key, state = q(self.layout.table), q(self.layout.id_field), q(self.layout.state_field)
        with self._cursor(dict_rows=True, transaction=True) as cur:
            cur.execute(f"SELECT * FROM {t} WHERE {state} = %s ORDER BY {key} LIMIT %s FOR UPDATE SKIP LOCKED",
                        (int(TaskState.PENDING), limit))
            rows = list(cur.fetchall())
            ids = [row[self.layout.id_field] for row in rows]
            for part in chunks(ids):
                cur.execute(f"UPDATE {t} SET {state} = %s, {q(self.layout.time_field)} = NOW() "
                            f"WHERE {key} IN ({marks(len(part))}) AND {state} = %s",
                            [int(TaskState.PROCESSING)] + part + [int(TaskState.PENDING)])
        for row in rows:
            row[self.layout.state_field] = int(TaskState.PROCESSING)
        return rows

    def move(self, move: Move, ids: Sequence, older_than: Optional[float] = None) -> int:
        t, key, state = q(self.layout.table), q(self.layout.id_field), q(self.layout.state_field)
        time_col = q(self.layout.time_field)
        sources = [int(s) for s in move.sources]
        source_test = f" AND {state} IN ({marks(len(sources))})" if sources else ""
        age_test = f" AND {time_col} < NOW() - INTERVAL %s SECOND" if older_than is not None else ""
        moved = 0
        for part in chunks(list(ids)):
            with self._cursor() as cur:
                cur.execute(f"UPDATE {t} SET {state} = %s, {time_col} = NOW() "
                            f"WHERE {key} IN ({marks(len(part))}){source_test}{age_test}",
                            [int(move.target)] + part + sources + ([older_than] if older_than is not None else []))
                moved += cur.rowcount
        return moved

    def stale_processing(self, older_than: float, limit: int) -> list:
        t, key, state = q(self.layout.table), q(self.layout.id_field), q(self.layout.state_field)
        with self._cursor() as cur:
            cur.execute(f"SELECT {key} FROM {t} WHERE {state} = %s AND {q(self.layout.time_field)} "
                        "< NOW() - INTERVAL %s SECOND LIMIT %s", (int(TaskState.PROCESSING), older_than, limit))
            return [row[0] for row in cur.fetchall()]

    def progress(self) -> Progress:
        state = q(self.layout.state_field)
        with self._cursor() as cur:
            cur.execute(f"SELECT {state}, COUNT(*) FROM {q(self.layout.table)} GROUP BY {state}")
            counts = {value: n for value, n in cur.fetchall()}
        return Progress(total=sum(counts.values()), done=counts.get(int(TaskState.DONE), 0),
                        failed=counts.get(int(TaskState.FAILED), 0),
                        pending=counts.get(int(TaskState.PENDING), 0),
                        processing=counts.get(int(TaskState.PROCESSING), 0))

    def unsettled_count(self) -> int:
        state = q(self.layout.state_field)
        with self._cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {q(self.layout.table)} WHERE {state} IN (%s, %s)",
                        (int(TaskState.PENDING), int(TaskState.PROCESSING)))
            return cur.fetchone()[0]

    # -- items
    def save_items(self, table: str, kind: str, rows: Sequence[ItemRow]) -> None:
        if not rows:
            return
        with self._cursor(transaction=True) as cur:
            if kind == COLUMNS_ITEM_KIND:
                self._save_column_items(cur, table, rows)
            else:
                self._save_json_items(cur, table, rows)

    def _save_json_items(self, cur, table: str, rows: Sequence[ItemRow]) -> None:
        cur.executemany(f"INSERT INTO {q(table)} (`batch_id`, `task_id`, `request_seq`, `item_seq`, `item`) "
                        "VALUES (%s, %s, %s, %s, %s) ON DUPLICATE KEY UPDATE `item` = VALUES(`item`)",
                        [(r.batch_id, r.task_id, r.request_seq, r.item_seq, plain_json(r.data)) for r in rows])

    def _save_column_items(self, cur, table: str, rows: Sequence[ItemRow]) -> None:
        by_columns: dict = {}
        for row in rows:
            by_columns.setdefault(tuple(row.data), []).append(row.data)
        for columns, items in by_columns.items():
            names = ", ".join(q(c) for c in columns)
            updates = ", ".join(f"{q(c)} = VALUES({q(c)})" for c in columns)
            cur.executemany(f"INSERT INTO {q(table)} ({names}) VALUES ({marks(len(columns))}) "
                            f"ON DUPLICATE KEY UPDATE {updates}",
                            [[column_value(item[c]) for c in columns] for item in items])


def column_value(value):
    """Lists and dicts go to a column as JSON text; the driver converts the rest."""
    return plain_json(value) if isinstance(value, (dict, list, tuple)) else value
