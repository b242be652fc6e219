"""Test backends: one object per store kind, so a test body can run on each.

Every backend creates the seed's task table, hands out stores for spiders, and reads
back task states, items and batch records straight from where the store keeps them
(SQL for MySQL, the object for memory) — never through the code under test.
"""
import json
import uuid

import batchd

TASK_TABLE_DDL = """CREATE TABLE `{table}` (
  `id` BIGINT NOT NULL AUTO_INCREMENT,
  `url` VARCHAR(500) NOT NULL,
  `batch_status` TINYINT NOT NULL DEFAULT 0,
  `update_time` DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (`id`){index}
)"""

FAST = {"BATCH_MONITOR_INTERVAL": 0.3, "ITEM_FLUSH_INTERVAL": 0.1, "MASTER_LOCK_TIMEOUT": 5.0}


class MemoryBackend:
    kind = "memory"
    multiprocess = False

    def __init__(self, failed_items_path):
        self.failed_items_path = failed_items_path
        self._store = None

    def create_tasks(self, urls, table="crawl_task", index=True, store_class=batchd.MemoryBatchStore):
        self.table = table
        self._store = store_class([{"id": i, "url": url} for i, url in enumerate(urls, start=1)])
        return self._store

    def add_task(self, url):
        next_id = max([r["id"] for r in self._store.rows] + [0]) + 1
        self._store.add_task({"id": next_id, "url": url})

    def store(self):
        return self._store

    def settings(self, **extra):
        return {**FAST, "FAILED_ITEMS_PATH": self.failed_items_path, **extra}

    def states(self):
        return {row["id"]: row["batch_status"] for row in self._store.rows}

    def set_state(self, task_id, state, age_seconds=0):
        from datetime import datetime, timedelta
        for row in self._store._rows:
            if row["id"] == task_id:
                row["batch_status"] = state
                row["update_time"] = datetime.now() - timedelta(seconds=age_seconds)

    def items(self):
        """The default item table's, as the SQL backends read them."""
        return self._store.items_in(f"{self.table}_item")

    def create_table(self, ddl):
        """The memory store has no tables: items of any table land."""

    def table_rows(self, table, columns):
        """The rows of an item table as sorted tuples of `columns` (None for a key an item lacks)."""
        return sorted(tuple(item.get(c) for c in columns) for item in self._store.items_in(table))

    def records(self):
        return [dict(vars(b), quality=self._store.batch_quality(b.id)) for b in self._store.batches]

    def failures(self):
        """The failure records, {(batch id, task id): row as a dict}."""
        return {(f.batch_id, f.task_id): vars(f) for f in self._store._failures.values()}

    def age_last_batch(self, days=0, hours=0):
        from datetime import timedelta
        self._store.batches[-1].batch_date -= timedelta(days=days, hours=hours)

    def reopen_last_batch(self):
        self._store.batches[-1].is_done = False


class MysqlBackend:
    kind = "mysql"
    multiprocess = True

    def __init__(self, mysql_url, redis_url, failed_items_path, sentinel_password=None):
        self.mysql_url, self.redis_url, self.sentinel_password = mysql_url, redis_url, sentinel_password
        self.failed_items_path = failed_items_path
        self.reconnect()
        # A namespace of its own: test runs side by side share one Redis without meeting.
        self.namespace = "t" + uuid.uuid4().hex[:12]

    def reconnect(self):
        import MySQLdb
        from batchd.backends.mysql_redis.mysql import parse_mysql_url
        self.conn = MySQLdb.connect(autocommit=True, **parse_mysql_url(self.mysql_url))

    def close(self):
        from batchd.backends.mysql_redis.redis_client import connect_redis
        client = connect_redis(self.redis_url, timeout=5, sentinel_password=self.sentinel_password)
        keys = list(client.scan_iter(match=f"{self.namespace}:*"))
        if keys:
            client.delete(*keys)
        client.close()
        try:
            self.conn.close()
        except Exception:   # already closed by a test that stopped its server
            pass

    def sql(self, statement, params=()):
        cur = self.conn.cursor()
        cur.execute(statement, params)
        rows = cur.fetchall()
        cur.close()
        return rows

    def create_tasks(self, urls, table="crawl_task", index=True):
        self.table = table
        self.sql(TASK_TABLE_DDL.format(table=table, index=",\n  KEY `idx_state` (`batch_status`)" if index else ""))
        for start in range(0, len(urls), 1000):
            part = urls[start:start + 1000]
            self.conn.cursor().executemany(f"INSERT INTO `{table}` (`url`) VALUES (%s)", [(u,) for u in part])
        return self.store()

    def add_task(self, url):
        self.sql(f"INSERT INTO `{self.table}` (`url`) VALUES (%s)", (url,))

    def store(self):
        return batchd.MysqlBatchStore(self.mysql_url)

    def settings(self, **extra):
        sentinel = {"REDIS_SENTINEL_PASSWORD": self.sentinel_password} if self.sentinel_password else {}
        return {**FAST, "FAILED_ITEMS_PATH": self.failed_items_path, "MYSQL_URL": self.mysql_url,
                "REDIS_URL": self.redis_url, "NAMESPACE": self.namespace, **sentinel, **extra}

    def env(self, **extra):
        """Environment for a batchd subprocess using this backend."""
        env = {f"BATCHD_{k}": str(v) for k, v in self.settings(**extra).items()}
        return env

    def states(self):
        return {i: s for i, s in self.sql(f"SELECT `id`, `batch_status` FROM `{self.table}`")}

    def set_state(self, task_id, state, age_seconds=0):
        self.sql(f"UPDATE `{self.table}` SET `batch_status` = %s, "
                 "`update_time` = NOW() - INTERVAL %s SECOND WHERE `id` = %s", (state, age_seconds, task_id))

    def items(self):
        rows = self.sql(f"SELECT `item` FROM `{self.table}_item` ORDER BY `task_id`, `request_seq`, `item_seq`")
        return [json.loads(r[0]) for r in rows]

    def create_table(self, ddl):
        self.sql(ddl)

    def table_rows(self, table, columns):
        return sql_table_rows(self, table, columns)

    def records(self):
        import MySQLdb
        if not self.sql("SHOW TABLES LIKE %s", (f"{self.table}_batch_record",)):
            return []                      # the master has not started yet
        cur = self.conn.cursor(MySQLdb.cursors.DictCursor)
        cur.execute(f"SELECT * FROM `{self.table}_batch_record` ORDER BY `id`")
        rows = list(cur.fetchall())
        cur.close()
        for row in rows:
            row["is_done"] = bool(row["is_done"])
        return rows

    def failures(self):
        """The failure records, {(batch id, task id): row as a dict}."""
        import MySQLdb
        cur = self.conn.cursor(MySQLdb.cursors.DictCursor)
        cur.execute(f"SELECT * FROM `{self.table}_failure`")
        rows = list(cur.fetchall())
        cur.close()
        for row in rows:
            row["time"] = row.pop("fail_time")
        return {(row["batch_id"], row["task_id"]): row for row in rows}

    def age_last_batch(self, days=0, hours=0):
        self.sql(f"UPDATE `{self.table}_batch_record` SET `batch_date` = `batch_date` - INTERVAL %s HOUR "
                 "ORDER BY `id` DESC LIMIT 1", (days * 24 + hours,))

    def reopen_last_batch(self):
        self.sql(f"UPDATE `{self.table}_batch_record` SET `is_done` = 0 ORDER BY `id` DESC LIMIT 1")


SQLITE_TASK_TABLE_DDL = """CREATE TABLE "{table}" (
  "id" INTEGER PRIMARY KEY AUTOINCREMENT,
  "url" TEXT NOT NULL,
  "batch_status" INTEGER NOT NULL DEFAULT 0,
  "update_time" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
)"""


class SqliteBackend:
    """One SQLite file holds everything; read back with the stdlib sqlite3, times in UTC like the store."""

    kind = "sqlite"
    multiprocess = True
    namespace = "t_sqlite"    # not the table's name, so the queue's namespace column is put to use

    def __init__(self, path, failed_items_path):
        import sqlite3
        self.path, self.failed_items_path = str(path), failed_items_path
        self.conn = sqlite3.connect(self.path, isolation_level=None, timeout=30)

    def close(self):
        self.conn.close()

    def sql(self, statement, params=()):
        return self.conn.execute(statement, params).fetchall()

    def create_tasks(self, urls, table="crawl_task", index=True):
        self.table = table
        self.sql(SQLITE_TASK_TABLE_DDL.format(table=table))
        if index:
            self.sql(f'CREATE INDEX "idx_{table}_state" ON "{table}" ("batch_status")')
        self.conn.executemany(f'INSERT INTO "{table}" ("url") VALUES (?)', [(u,) for u in urls])
        return self.store()

    def add_task(self, url):
        self.sql(f'INSERT INTO "{self.table}" ("url") VALUES (?)', (url,))

    def store(self):
        return batchd.SqliteBatchStore(self.path)

    def settings(self, **extra):
        return {**FAST, "FAILED_ITEMS_PATH": self.failed_items_path, "NAMESPACE": self.namespace, **extra}

    def env(self, **extra):
        """Environment for a batchd subprocess using this backend."""
        return {f"BATCHD_{k}": str(v) for k, v in self.settings(STORE=f"sqlite:///{self.path}", **extra).items()}

    def states(self):
        return {i: s for i, s in self.sql(f'SELECT "id", "batch_status" FROM "{self.table}"')}

    def set_state(self, task_id, state, age_seconds=0):
        self.sql(f'UPDATE "{self.table}" SET "batch_status" = ?, "update_time" = datetime(\'now\', ?) '
                 'WHERE "id" = ?', (state, f"-{age_seconds} seconds", task_id))

    def items(self):
        rows = self.sql(f'SELECT "item" FROM "{self.table}_item" ORDER BY "task_id", "request_seq", "item_seq"')
        return [json.loads(r[0]) for r in rows]

    def create_table(self, ddl):
        self.sql(ddl)

    def table_rows(self, table, columns):
        return sql_table_rows(self, table, columns)

    def records(self):
        from datetime import datetime
        if not self.sql("SELECT 1 FROM sqlite_master WHERE name = ?", (f"{self.table}_batch_record",)):
            return []                      # the master has not started yet
        cur = self.conn.execute(f'SELECT * FROM "{self.table}_batch_record" ORDER BY "id"')
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, row)) for row in cur.fetchall()]
        for row in rows:
            row["is_done"] = bool(row["is_done"])
            for name in ("batch_date", "create_time", "update_time"):
                row[name] = datetime.fromisoformat(row[name])
        return rows

    def failures(self):
        """The failure records, {(batch id, task id): row as a dict}."""
        from datetime import datetime
        cur = self.conn.execute(f'SELECT * FROM "{self.table}_failure"')
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, row)) for row in cur.fetchall()]
        for row in rows:
            row["time"] = datetime.fromisoformat(row.pop("fail_time"))
        return {(row["batch_id"], row["task_id"]): row for row in rows}

    def age_last_batch(self, days=0, hours=0):
        self.sql(f'UPDATE "{self.table}_batch_record" SET "batch_date" = datetime("batch_date", ?) '
                 f'WHERE "id" = (SELECT MAX("id") FROM "{self.table}_batch_record")', (f"-{days * 24 + hours} hours",))

    def reopen_last_batch(self):
        self.sql(f'UPDATE "{self.table}_batch_record" SET "is_done" = 0 '
                 f'WHERE "id" = (SELECT MAX("id") FROM "{self.table}_batch_record")')


def sql_table_rows(backend, table, columns):
    """The rows of an item table as sorted tuples of `columns` (plain names: the same SQL for both)."""
    return sorted(tuple(row) for row in backend.sql(f"SELECT {', '.join(columns)} FROM {table}"))


def bring_back(backend, task_id):
    """The task comes back in the same batch (reclaimed, say): pending again, and its batch open again if
    it had closed meanwhile (a master closes a batch within a moment of its last write-back)."""
    backend.set_state(task_id, 0)
    backend.reopen_last_batch()
