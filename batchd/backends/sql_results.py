"""SqlResults: what the tasks leave in an SQL store beside their states, on the dialect's hooks (sql_dialect.py).

    items            the default item table (unique on ITEM_KEY) or the user's own, as upserts; read back
                     by `batchd export` in chunks (the dialect's stream_select)
    failure records  one row per failed task and batch (FAILURE_COLUMNS), for `batchd failures`
    pages            what a re-crawl remembers of each URL (PAGE_COLUMNS): validators, signature
    revisits         when each task is due again (REVISIT_COLUMNS)

Each is written with one upsert over every row (or one per in_chunk of keys read).
"""
from typing import Optional, Sequence

from ..codec import plain_json
from ..errors import ConfigError
from ..model import (COLUMNS_ITEM_KIND, PAGE_URL_MOST, FailureGroup, FailureQuery, ItemRow, PageRecord, Revisit,
                     TaskFailure, task_key, url_key)
from ..task import TaskState
from .sql_dialect import SqlDialect, chunks, where_all
from .store import EXPORT_CHUNK, RowStream

ITEM_KEY = ("batch_id", "task_id", "request_seq", "item_seq")   # the default item table's unique key
FAILURE_COLUMNS = ("batch_id", "task_id", "url", "reason", "status", "error_class", "attempts", "host", "fail_time")
FAILURE_KEY = ("batch_id", "task_id")                           # the failure table's primary key
PARSED_BY = "parsed_by"          # a page table's column added since the first (an older one gets it at open())
PAGE_COLUMNS = ("url_key", "url", "task_id", "etag", "last_modified", "vary", "signature", "whole_at", "seen_in",
                "changed_in", "redirected", PARSED_BY)          # keyed on url_key (model.url_key of the url)
REVISIT_COLUMNS = ("task_id", "interval_s", "next_due", "verdict", "batch_id")   # keyed on task_id


class SqlResults(SqlDialect):
    """The items, failure records, pages and revisits of an SQL store."""

    # -- items
    def save_items(self, table: str, kind: str, rows: Sequence[ItemRow], key: Sequence[str] = ()) -> None:
        if not rows:
            return
        with self.transaction():
            if kind == COLUMNS_ITEM_KIND:
                self._save_column_items(table, rows, key)
            else:
                self._upsert(table, ITEM_KEY + ("item",), ("item",), ITEM_KEY,
                             [(r.batch_id, r.task_id, r.request_seq, r.item_seq,
                               plain_json(r.data) if r.document is None else r.document) for r in rows])

    def _save_column_items(self, table: str, rows: Sequence[ItemRow], key: Sequence[str]) -> None:
        by_columns: dict = {}
        for row in rows:
            by_columns.setdefault(tuple(row.data), []).append(row.data)
        for columns, items in by_columns.items():
            # An Item's __unique_key__ is the conflict target where the dialect names one (SQLite); no key:
            # like MySQL's ON DUPLICATE KEY, any unique key of the user's table counts.
            self._upsert(table, columns, columns, tuple(key) or None,
                         [[self.column_value(item[c]) for c in columns] for item in items])

    def item_rows(self, table: str, kind: str, batch_id: Optional[int] = None, batch_column: Optional[str] = None,
                  size: int = EXPORT_CHUNK, as_text: bool = False) -> RowStream:
        columns = self.table_columns(table)
        if not columns:
            raise ConfigError(f"item table {self.quote(table)} not found in {self.location()}")
        names = tuple(columns) if kind == COLUMNS_ITEM_KIND else ("item",)
        conditions, params = [], []       # type: list, list
        if batch_id is not None:
            column = batch_column if kind == COLUMNS_ITEM_KIND else "batch_id"
            if column is None or column not in columns:
                raise ConfigError(f"item table {self.quote(table)} has no column for the batch of a row: "
                                  + ("set ITEM_BATCH_COLUMN to one the worker fills" if column is None else
                                     f"{self.quote(column)} is not one of its columns (ITEM_BATCH_COLUMN)"))
            conditions.append(f"{self.quote(column)} = {self.placeholder}")
            params.append(batch_id)
        selected = [self.exported_column(name, columns[name], as_text) for name in names]
        return RowStream(names, self.stream_select(table, selected, conditions, params, size))

    # -- failure records
    def record_failures(self, failures: Sequence[TaskFailure]) -> None:
        """One upsert over every row: a single statement (mysqlclient sends the rows as one INSERT)."""
        if not failures:
            return
        now = self.column_value(self.now())     # bound, not now_term(): every row's VALUES stays plain markers
        self._upsert(self.opened_layout.failure_table, FAILURE_COLUMNS, FAILURE_COLUMNS[2:], FAILURE_KEY,
                     [(f.batch_id, f.task_id, f.url, f.reason, f.status, f.error_class, f.attempts, f.host, now)
                      for f in failures])

    def failures(self, query: FailureQuery, after=None, limit: int = 100) -> list:
        source, conditions, params = self._failure_source(query)
        if after is not None:
            conditions.append(f"f.{self.quote('task_id')} > {self.placeholder}")
            params.append(after)
        names = ", ".join(f"f.{self.quote(c)}" for c in FAILURE_COLUMNS)
        rows = self.fetch(f"SELECT {names} {source}{where_all(conditions)} ORDER BY f.{self.quote('task_id')} "
                          f"LIMIT {self.placeholder}", params + [limit], dicts=True)
        return [self._failure_from_db(row) for row in rows]

    def _failure_from_db(self, row: dict) -> TaskFailure:
        written = row.pop("fail_time")
        return TaskFailure(**row, time=self.time_from_db(written))

    def failure_groups(self, query: FailureQuery) -> list:
        source, conditions, params = self._failure_source(query)
        status, error_class, reason = (f"f.{self.quote(c)}" for c in ("status", "error_class", "reason"))
        alone = f"CASE WHEN {status} IS NULL AND {error_class} IS NULL THEN {reason} END"
        rows = self.fetch(f"SELECT {status}, {error_class}, MIN({reason}), COUNT(*) {source}{where_all(conditions)} "
                          f"GROUP BY {status}, {error_class}, {alone} ORDER BY COUNT(*) DESC", params)
        return [FailureGroup(status=row[0], error_class=row[1], sample=row[2], count=int(row[3])) for row in rows]

    def _failure_source(self, query: FailureQuery) -> tuple:
        """(FROM ..., conditions, values) of the failure records `query` selects (the table is `f`)."""
        p = self.placeholder
        source = f"FROM {self.quote(self.opened_layout.failure_table)} AS f"
        conditions, params = [f"f.{self.quote('batch_id')} = {p}"], [query.batch_id]   # type: list, list
        if query.still_failed:
            table, key, state = self._quoted_task_table()
            source += f" JOIN {table} AS t ON t.{key} = f.{self.quote('task_id')}"
            conditions.append(f"t.{state} = {p}")
            params.append(int(TaskState.FAILED))
        if query.reason:
            conditions.append(f"INSTR(LOWER(f.{self.quote('reason')}), {p}) > 0")
            params.append(query.reason.lower())
        return source, conditions, params

    # -- what a re-crawl remembers: pages and revisits
    def remember_pages(self, pages: Sequence[PageRecord]) -> None:
        """One upsert over every page, as PageRecord.fitted() keeps it: a text longer than its column (an
        etag or vary over 1,024 characters, say) is stored as NULL, so that page is not revalidated; a page
        whose URL is over PAGE_URL_MOST characters is not stored."""
        kept = [fitted for fitted in (page.fitted() for page in pages) if fitted is not None]
        if kept:
            self._upsert(self.opened_layout.page_table, PAGE_COLUMNS, PAGE_COLUMNS[1:], PAGE_COLUMNS[:1],
                         [(url_key(p.url), p.url, p.task_id, p.etag, p.last_modified, p.vary, p.signature,
                           p.whole_at, p.seen_in, p.changed_in, int(p.redirected), p.parsed_by) for p in kept])

    def recall_pages(self, urls: Sequence[str]) -> dict:
        rows = self._rows_keyed(self.opened_layout.page_table, PAGE_COLUMNS, "url_key",
                                [url_key(url) for url in dict.fromkeys(urls) if len(url) <= PAGE_URL_MOST])
        return {row["url"]: self._page_from_db(row) for row in rows}

    def forget_pages(self, urls: Sequence[str]) -> None:
        keys = [url_key(url) for url in dict.fromkeys(urls)]
        for part in chunks(keys, self.in_chunk):
            self.execute(f"DELETE FROM {self.quote(self.opened_layout.page_table)} "
                         f"WHERE {self.quote('url_key')} IN ({self.marks(len(part))})", part)

    def pages_changed_in(self, batch_id: int) -> list:
        names = ", ".join(self.quote(c) for c in PAGE_COLUMNS)
        rows = self.fetch(f"SELECT {names} FROM {self.quote(self.opened_layout.page_table)} "
                          f"WHERE {self.quote('changed_in')} = {self.placeholder} ORDER BY {self.quote('url')}",
                          [batch_id], dicts=True)
        return [self._page_from_db(row) for row in rows]

    def _page_from_db(self, row: dict) -> PageRecord:
        del row["url_key"]
        return PageRecord(**dict(row, whole_at=float(row["whole_at"]), redirected=bool(row["redirected"])))

    def schedule_revisits(self, revisits: Sequence[Revisit]) -> None:
        if revisits:
            self._upsert(self.opened_layout.revisit_table, REVISIT_COLUMNS, REVISIT_COLUMNS[1:], REVISIT_COLUMNS[:1],
                         [(r.task_id, r.interval, r.next_due, r.verdict, r.batch_id) for r in revisits])

    def revisits(self, task_ids: Sequence) -> dict:
        rows = self._rows_keyed(self.opened_layout.revisit_table, REVISIT_COLUMNS, "task_id",
                                list(dict.fromkeys(task_ids)))
        return {task_key(row["task_id"]): Revisit(task_id=row["task_id"], interval=float(row["interval_s"]),
                                                  next_due=float(row["next_due"]), verdict=row["verdict"],
                                                  batch_id=row["batch_id"]) for row in rows}

    def _rows_keyed(self, table: str, columns: Sequence[str], key: str, values: list) -> list:
        """The rows (dicts of `columns`) of `table` whose `key` is one of `values`: one SELECT per in_chunk."""
        names = ", ".join(self.quote(c) for c in columns)
        rows: list = []
        for part in chunks(values, self.in_chunk):
            rows += self.fetch(f"SELECT {names} FROM {self.quote(table)} WHERE {self.quote(key)} "
                               f"IN ({self.marks(len(part))})", part, dicts=True)
        return rows

    def _upsert(self, table: str, columns: Sequence[str], updated: Sequence[str],
                key: Optional[Sequence[str]], values: list) -> None:
        names = ", ".join(self.quote(c) for c in columns)
        self.execute_many(f"INSERT INTO {self.quote(table)} ({names}) VALUES ({self.marks(len(columns))}) "
                          f"{self.upsert_clause(updated, key)}", values)
