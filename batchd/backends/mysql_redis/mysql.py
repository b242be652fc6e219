"""MysqlBatchStore: the default backend, on MySQL or MariaDB through mysqlclient.

The store's logic is SqlBatchStore's (batchd/backends/sql.py); this module is the MySQL dialect (the
hooks of batchd/backends/sql_dialect.py): backticks and %s, the server's NOW(), ON DUPLICATE KEY UPDATE,
a claim that SELECTs ... FOR UPDATE SKIP LOCKED then UPDATEs in one transaction, the DDL, and the
connections. Every
statement binds its values; table and column names come from a validated TaskLayout and are
quoted with backticks. Each thread has its own connection (mysqlclient connections are not
thread-safe), made again after a fork; connections run in autocommit, READ COMMITTED.
"""
import hashlib
import os
import threading
import time
from contextlib import contextmanager
from datetime import timedelta, timezone, tzinfo
from typing import Iterator, Optional, Sequence
from urllib.parse import parse_qs, unquote, urlsplit

from ...config import IDENTIFIER, check_identifier, redact_url
from ...errors import BackendUnavailable, ConfigError
from ...model import CLASS_MOST, HOST_MOST, PAGE_TEXT_MOST, PAGE_URL_MOST, REASON_MOST, URL_MOST, TaskLayout
from ...service.threads import guard
from ..sql import SqlBatchStore
from ..sql_dialect import column_sets, where_all
from ..task_load import SEEN_TABLE, ColumnLimit, declared_limit

# Errors that mean "the server is not there (or not writable) now" rather than "the statement is
# wrong": a connection lost or refused, and a server in read-only mode (1290, 1792, 1836: a replica
# during a failover), which waiting heals like an outage.
CONNECTION_ERRORS = {1040, 1042, 1043, 1047, 1053, 1081, 1152, 1158, 1159, 1160, 1161,
                     2002, 2003, 2005, 2006, 2012, 2013, 2026, 2055, 1290, 1792, 1836}
# Errors that waiting cannot heal: the operator must fix the URL, a grant or the schema (exit 78).
# 1044/1045/1698 access denied, 1049 unknown database, 1142/1143 a command or column denied,
# 1146 no such table, 1054 no such column, 2059 an authentication plugin the client lacks.
CONFIGURATION_ERRORS = {1044, 1045, 1049, 1142, 1143, 1146, 1054, 1698, 2059}
IN_CHUNK = 1000
IDLE_PING = 30.0
SOCKET_TIMEOUT = 60     # read and write: a statement or a peer gone silent (a partition) ends in an outage
STREAM_WRITE_TIMEOUT = 3600    # seconds the server waits on an export's reader (its net_write_timeout)
TIME_TYPES = {"datetime", "timestamp"}
# An export's text forms (MysqlBatchStore.exported_column), by DATA_TYPE: ISO 8601 for times, the digits of decimals.
TEXT_FORMS = {**{t: "REPLACE(CAST({column} AS CHAR), ' ', 'T')" for t in TIME_TYPES},
              **{t: "CAST({column} AS CHAR)" for t in ("date", "time", "decimal")}}
TEXT_BYTES = {"tinytext": 255, "text": 65535, "mediumtext": 16777215}     # LONGTEXT: no bound worth the name


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
            "connect_timeout": 5, "read_timeout": SOCKET_TIMEOUT, "write_timeout": SOCKET_TIMEOUT}
    for name, values in parse_qs(parts.query).items():
        if name not in ("charset", "unix_socket", "connect_timeout", "read_timeout", "write_timeout"):
            raise ConfigError(f"setting MYSQL_URL: unknown option {name!r}")
        args[name] = int(values[-1]) if name.endswith("timeout") else values[-1]
    return args


def _code(error) -> int:
    return error.args[0] if error.args and isinstance(error.args[0], int) else 0


def _message(error) -> str:
    return str(error.args[-1]) if error.args else str(error)


def _driver():
    try:
        import MySQLdb
        import MySQLdb.cursors
    except ImportError:
        raise ConfigError('the MySQL store needs mysqlclient: pip install "batchd[mysql]" '
                          "(or apt install python3-mysqldb)") from None
    return MySQLdb


class MysqlBatchStore(SqlBatchStore):
    backend_name = "MySQL"
    quote_mark = "`"
    placeholder = "%s"
    in_chunk = IN_CHUNK
    claim_lock = " FOR UPDATE SKIP LOCKED"   # rows another claim holds are skipped, not waited for
    move_in_one_transaction = False          # each chunk commits alone: no row stays locked for the series
    stamped_on_insert = ("batch_date",)      # create_time and update_time: the DDL's defaults
    cursor_type = "VARCHAR(1024)"
    stats_type = "JSON"
    print_type = "CHAR(40)"
    outcome_type = "VARCHAR(16)"
    stamped_on_update = ()                   # update_time: ON UPDATE CURRENT_TIMESTAMP

    def __init__(self, url: Optional[str] = None, **connect_args):
        """`url` as BATCHD_MYSQL_URL; keyword arguments go to MySQLdb.connect() and win over the URL."""
        if not url and not connect_args:
            raise ConfigError("no MySQL configured: set BATCHD_MYSQL_URL (mysql://user:pass@host:3306/db) "
                              "or MYSQL_URL in the config file")
        super().__init__()
        self.url = url
        self._args = dict(parse_mysql_url(url) if url else {}, **connect_args)
        self._local = threading.local()
        self._pid = os.getpid()
        self._id_type = "BIGINT"
        self.setting = "MYSQL_URL"     # which setting named it, for a configuration error

    @property
    def call_bound(self) -> float:
        """The longest a statement can block: connecting, then waiting on the socket both ways."""
        a = self._args
        return a.get("connect_timeout", 10) + a.get("read_timeout", 0) + a.get("write_timeout", 0) or 3600

    def describe(self) -> str:
        a = self._args
        return f"MySQL {a.get('user')}@{a.get('host')}:{a.get('port')}/{a.get('db')}"

    # -- connections
    def _connection(self):
        if self._pid != os.getpid():          # forked: the parent's sockets are not ours
            self._local, self._pid = threading.local(), os.getpid()
        in_transaction = getattr(self._local, "transaction", None)
        if in_transaction is not None:        # every statement of a transaction() runs on its connection
            return in_transaction
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
                raise self._refused(e) if _code(e) in CONFIGURATION_ERRORS else self._unavailable(e) from None
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
        return BackendUnavailable(f"{self.describe()} unreachable: {_message(error)}", self.backend_name)

    def _refused(self, error) -> ConfigError:
        return ConfigError(f"setting {self.setting}: {self.describe()}: {_message(error)} (MySQL error {_code(error)})")

    @contextmanager
    def _translated(self):
        """Connection losses leave as BackendUnavailable (and the connection is dropped), what the operator
        must fix as ConfigError; the rest (a value the database refuses, say) as they are. The thread may
        block as long as the connection's timeouts allow: it promises no more than that."""
        MySQLdb = _driver()
        try:
            with guard.waiting(self.call_bound):
                yield
        except MySQLdb.OperationalError as e:
            if _code(e) in CONNECTION_ERRORS:
                self._drop()
                raise self._unavailable(e) from None
            if _code(e) in CONFIGURATION_ERRORS:
                raise self._refused(e) from None
            raise
        except MySQLdb.ProgrammingError as e:
            if _code(e) in CONFIGURATION_ERRORS:
                raise self._refused(e) from None
            raise

    @contextmanager
    def _cursor(self, dict_rows: bool = False):
        """A cursor on this thread's connection (the transaction's, inside one); connection losses become
        BackendUnavailable, wherever they surface (a dead connection also fails when the cursor is closed)."""
        MySQLdb = _driver()
        with self._translated():
            cur = self._connection().cursor(MySQLdb.cursors.DictCursor if dict_rows else MySQLdb.cursors.Cursor)
            try:
                yield cur
            finally:
                cur.close()

    @contextmanager
    def transaction(self):
        with self._translated():
            conn = self._connection()
            conn.begin()
            self._local.transaction = conn
            try:
                yield
                conn.commit()
            except BaseException:
                self._rollback(conn)
                raise
            finally:
                self._local.transaction = None

    def _rollback(self, conn) -> None:
        try:
            conn.rollback()
        except Exception:
            self._drop()

    def fetch(self, sql: str, params: Sequence = (), dicts: bool = False) -> list:
        with self._cursor(dict_rows=dicts) as cur:
            cur.execute(sql, params or None)
            return list(cur.fetchall())

    def execute(self, sql: str, params: Sequence = ()) -> int:
        with self._cursor() as cur:
            cur.execute(sql, params or None)
            return cur.rowcount

    def execute_many(self, sql: str, rows: Sequence[Sequence]) -> None:
        with self._cursor() as cur:
            cur.executemany(sql, rows)

    def exported_column(self, column: str, info, as_text: bool) -> str:
        """As text, a time is cast by the server ('2026-12-07 05:04:03', its fractions kept) with its space made
        the ISO 'T', and a decimal cast to its digits: mysqlclient's conversion of each to an object, then back
        to text, cost half of an export of a table of times and prices."""
        quoted = self.quote(column)
        data_type = info["DATA_TYPE"].lower()
        if not as_text or data_type not in TEXT_FORMS:
            return quoted
        return TEXT_FORMS[data_type].format(column=quoted)

    def stream_select(self, table: str, selected: Sequence[str], conditions: list, values: list,
                      size: int) -> Iterator[list]:
        """A server-side cursor (SSCursor) on a connection of its own: the rows come as they are fetched, and the
        thread's connection stays free for other statements meanwhile. The server may wait on a slow reader (a
        pipe to another program) for up to STREAM_WRITE_TIMEOUT seconds between two fetches."""
        MySQLdb = _driver()
        names = ", ".join(selected)
        with self._translated():
            conn = MySQLdb.connect(**self._args)
            cursor = conn.cursor(MySQLdb.cursors.SSCursor)
            try:
                cursor.execute(f"SET SESSION net_write_timeout = {STREAM_WRITE_TIMEOUT}")
                cursor.execute(f"SELECT {names} FROM {self.quote(table)}{where_all(conditions)}", values or None)
            except BaseException:
                conn.close()
                raise
        return self._fetched(conn, cursor, size)

    def _fetched(self, conn, cursor, size: int) -> Iterator[list]:
        try:
            while True:
                with self._translated():
                    rows = cursor.fetchmany(size)
                if not rows:
                    return
                yield list(rows)
        finally:
            try:
                conn.close()      # a cursor left unread is dropped with its connection
            except Exception:
                pass

    def close(self) -> None:
        self._drop()

    # -- the dialect
    def ping(self) -> None:
        """A round trip that also fails while the server refuses writes (read-only, a failover)."""
        if self.fetch("SELECT @@read_only")[0][0]:
            raise BackendUnavailable(f"{self.describe()} is read-only", self.backend_name)

    def identity(self) -> str:
        """The server as it names itself (the same from every host, whatever address reaches it)."""
        host, port, database = self.fetch("SELECT @@hostname, @@port, DATABASE()")[0]
        return f"MySQL {host}:{port}/{database}"

    def now(self):
        return self.fetch("SELECT NOW()")[0][0]

    def clock_zone(self) -> tzinfo:
        """NOW() is in the session's time zone (the server's, by default): its offset from UTC now, to the
        minute (one statement: both clocks read at once)."""
        seconds = self.fetch("SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW())")[0][0]
        return timezone(timedelta(minutes=round(int(seconds) / 60)))

    def now_term(self) -> tuple:
        return "NOW()", []

    def older_than_term(self, column: str, seconds: float) -> tuple:
        return f"{self.quote(column)} < NOW() - INTERVAL %s SECOND", [seconds]

    def upsert_clause(self, columns: Sequence[str], key: Optional[Sequence[str]]) -> str:
        return "ON DUPLICATE KEY UPDATE " + ", ".join(f"{self.quote(c)} = VALUES({self.quote(c)})" for c in columns)

    # -- the schema
    def location(self) -> str:
        return f"database `{self._args.get('db')}`"

    def table_columns(self, table: str) -> dict:
        return self.tables_columns([table])[table]

    def tables_columns(self, tables: Sequence[str]) -> dict:
        # One read of information_schema for all of them: each is several milliseconds, and every process
        # opening the store asks for six tables. Its names compare without case, as the read of one did.
        rows = self.fetch("SELECT TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE FROM information_schema.COLUMNS "
                          f"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ({self.marks(len(tables))}) "
                          "ORDER BY ORDINAL_POSITION",
                          tuple(tables), dicts=True)
        found: dict = {table: {} for table in tables}
        asked = {table.lower(): table for table in tables}
        for row in rows:
            table = asked.get(row.pop("TABLE_NAME").lower())
            if table is not None:
                found[table][row["COLUMN_NAME"]] = row
        return found

    def unique_keys(self, table: str) -> list:
        rows = self.fetch("SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = "
                          "DATABASE() AND TABLE_NAME = %s AND NON_UNIQUE = 0", (table,))
        return column_sets(rows)

    def check_task_columns(self, layout: TaskLayout, columns: dict) -> None:
        time_type = columns[layout.time_field]["DATA_TYPE"].lower()
        if time_type not in TIME_TYPES:
            raise ConfigError(f"task table `{layout.table}`: column `{layout.time_field}` is {time_type.upper()}, "
                              "it must be DATETIME or TIMESTAMP (BATCH_TASK_TIME_FIELD)")
        self._id_type = columns[layout.id_field]["COLUMN_TYPE"]

    def has_leading_index(self, table: str, column: str) -> bool:
        return bool(self.fetch("SELECT 1 FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
                               "AND TABLE_NAME = %s AND COLUMN_NAME = %s AND SEQ_IN_INDEX = 1 LIMIT 1",
                               (table, column)))

    def state_range_hint(self, layout: TaskLayout) -> str:
        """MariaDB reads `state = 0 AND id > x ORDER BY id` as a ref on the state index and skips every pending
        row up to x (53 ms at x = 877,500 of a million), unless forced to range over the index as (state, id)
        (6 ms): an index of the state column alone (InnoDB appends the primary key) or of (state, id)."""
        rows = self.fetch("SELECT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
                          "AND TABLE_NAME = %s GROUP BY INDEX_NAME HAVING MAX(CASE WHEN SEQ_IN_INDEX = 1 THEN "
                          "COLUMN_NAME END) = %s AND (COUNT(*) = 1 OR (COUNT(*) = 2 AND MAX(CASE WHEN SEQ_IN_INDEX "
                          "= 2 THEN COLUMN_NAME END) = %s)) LIMIT 1", (layout.table, layout.state_field, layout.id_field))
        if not rows or not IDENTIFIER.match(rows[0][0]):
            return ""
        return f" FORCE INDEX ({self.quote(rows[0][0])})"

    def index_statement(self, table: str, column: str) -> str:
        index = check_identifier(f"idx_{column}"[:64], "index name")
        return f"ALTER TABLE {self.quote(table)} ADD INDEX {self.quote(index)} ({self.quote(column)})"

    def create_record_table(self, table: str) -> None:
        self.execute(f"""CREATE TABLE IF NOT EXISTS {self.quote(table)} (
            `id` BIGINT NOT NULL AUTO_INCREMENT,
            `batch_date` DATETIME NOT NULL,
            `total_count` BIGINT NOT NULL DEFAULT 0,
            `done_count` BIGINT NOT NULL DEFAULT 0,
            `fail_count` BIGINT NOT NULL DEFAULT 0,
            `interval` INT NOT NULL,
            `interval_unit` VARCHAR(8) NOT NULL,
            `is_done` TINYINT NOT NULL DEFAULT 0,
            `reset_cursor` VARCHAR(1024) NULL,
            `stats` JSON NULL,
            `opening` VARCHAR(1024) NULL,
            `spider_print` VARCHAR(1024) NULL,
            `outcome` VARCHAR(16) NULL,
            `quality` JSON NULL,
            `create_time` DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
            `update_time` DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
            PRIMARY KEY (`id`)
        ) DEFAULT CHARSET=utf8mb4""")

    def create_failure_table(self, table: str) -> None:
        self.execute(f"""CREATE TABLE IF NOT EXISTS {self.quote(table)} (
            `batch_id` BIGINT NOT NULL,
            `task_id` {self._id_type} NOT NULL,
            `url` VARCHAR({URL_MOST}) NULL,
            `reason` VARCHAR({REASON_MOST}) NOT NULL,
            `status` SMALLINT NULL,
            `error_class` VARCHAR({CLASS_MOST}) NULL,
            `attempts` INT NULL,
            `host` VARCHAR({HOST_MOST}) NOT NULL,
            `fail_time` DATETIME NOT NULL,
            PRIMARY KEY (`batch_id`, `task_id`)
        ) DEFAULT CHARSET=utf8mb4""")

    def create_page_table(self, table: str) -> None:
        most = PAGE_TEXT_MOST
        self.execute(f"""CREATE TABLE IF NOT EXISTS {self.quote(table)} (
            `url_key` CHAR(40) NOT NULL,
            `url` VARCHAR({PAGE_URL_MOST}) NOT NULL,
            `task_id` {self._id_type} NOT NULL,
            `etag` VARCHAR({most['etag']}) NULL,
            `last_modified` VARCHAR({most['last_modified']}) NULL,
            `vary` VARCHAR({most['vary']}) NULL,
            `signature` CHAR({most['signature']}) NULL,
            `whole_at` DOUBLE NOT NULL,
            `seen_in` BIGINT NOT NULL,
            `changed_in` BIGINT NOT NULL,
            `redirected` TINYINT NOT NULL DEFAULT 0,
            `parsed_by` {self.print_type} NULL,
            PRIMARY KEY (`url_key`),
            KEY `idx_changed_in` (`changed_in`)
        ) DEFAULT CHARSET=utf8mb4""")

    def create_revisit_table(self, table: str) -> None:
        self.execute(f"""CREATE TABLE IF NOT EXISTS {self.quote(table)} (
            `task_id` {self._id_type} NOT NULL,
            `interval_s` DOUBLE NOT NULL,
            `next_due` DOUBLE NOT NULL,
            `verdict` VARCHAR(16) NOT NULL,
            `batch_id` BIGINT NOT NULL,
            PRIMARY KEY (`task_id`),
            KEY `idx_next_due` (`next_due`)
        ) DEFAULT CHARSET=utf8mb4""")

    def task_table_statements(self, layout: TaskLayout) -> list:
        q = self.quote
        return [f"""CREATE TABLE {q(layout.table)} (
            {q(layout.id_field)} BIGINT NOT NULL AUTO_INCREMENT,
            `url` VARCHAR(2000) NOT NULL,
            {q(layout.state_field)} TINYINT NOT NULL DEFAULT 0,
            {q(layout.time_field)} DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
            PRIMARY KEY ({q(layout.id_field)}),
            KEY {q(check_identifier(f"idx_{layout.state_field}"[:64], "index name"))} ({q(layout.state_field)})
        ) DEFAULT CHARSET=utf8mb4"""]

    # -- loading tasks (backends/task_load.py)
    def column_limit(self, info) -> ColumnLimit:
        """VARCHAR(n) and CHAR(n) take n characters; the TEXT types a number of bytes; LONGTEXT batchd's bound."""
        data_type = info["DATA_TYPE"].lower()
        if data_type in TEXT_BYTES:
            return ColumnLimit(TEXT_BYTES[data_type], "bytes")
        return declared_limit(info["COLUMN_TYPE"])

    def seen_table_statements(self, table: str, column: str, id_column: str) -> list:
        """The key is the SHA-1 of the URL's UTF-8: an index takes no VARCHAR(2000) of utf8mb4 whole, and the
        binary key compares exactly where the column's collation may ignore case. The task id is kept as text
        (whatever the id column's type: TaskLoad.ids_of only hands it back to a lookup)."""
        seen, key = self.quote(SEEN_TABLE), self.quote("url_key")
        return [self.drop_seen_statement(),
                f"CREATE TEMPORARY TABLE {seen} ({key} BINARY(20) NOT NULL, `task_id` VARCHAR(255) NULL, "
                f"PRIMARY KEY ({key}))",
                f"INSERT INTO {seen} ({key}, `task_id`) SELECT UNHEX(SHA1(CONVERT({self.quote(column)} USING "
                f"utf8mb4))), MIN({self.quote(id_column)}) FROM {self.quote(table)} "
                f"WHERE {self.quote(column)} IS NOT NULL GROUP BY 1"]

    def seen_key(self, url: str):
        return hashlib.sha1(url.encode("utf-8")).digest()

    def drop_seen_statement(self) -> str:
        return f"DROP TEMPORARY TABLE IF EXISTS {self.quote(SEEN_TABLE)}"

    def create_default_item_table(self, table: str) -> None:
        self.execute(f"""CREATE TABLE IF NOT EXISTS {self.quote(table)} (
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
