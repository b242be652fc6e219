"""SqlBatchStore: what the SQL stores share, written once; a dialect fills in the hooks (sql_dialect.py).

The task-table checks, the compare-and-set state moves, the claim, the chunked reset and the batch
record live here; the items, failure records, pages and revisits in sql_results.py.
"""
import logging
from contextlib import contextmanager, nullcontext
from dataclasses import fields
from typing import Callable, Iterable, Iterator, Optional, Sequence

from ..codec import plain_json
from ..errors import ConfigError
from ..task import Move, TaskState
from ..model import BatchOpening, BatchRecord, Progress, SpiderPrint, TaskLayout, reset_cursor
from ..hosts.claims import HostClaim
from .sql_dialect import chunks, where_all
from .sql_results import FAILURE_COLUMNS, PAGE_COLUMNS, PARSED_BY, REVISIT_COLUMNS, SqlResults
from .store import opened_with
from .sql_task_load import SqlTaskLoad

log = logging.getLogger("batchd.store")

RECORD_COLUMNS = ("id", "batch_date", "total_count", "done_count", "fail_count", "interval",
                  "interval_unit", "is_done", "create_time", "update_time")
RESET_CURSOR = "reset_cursor"     # batchd's own column of the record: where an unfinished reset stands
STATS = "stats"                   # batchd's own column of the record: the batch's counters, at its close
OPENING = "opening"               # batchd's own column of the record: how the batch opened (model.BatchOpening)
SPIDER_PRINT = "spider_print"     # batchd's own column of the record: the spider it opened with (model.SpiderPrint)
OUTCOME = "outcome"               # batchd's own column of the record: clean, flagged or failed, at its close
QUALITY = "quality"               # batchd's own column of the record: its quality figures and flags (batchd/quality/)
RECORD_FIELDS = tuple(f.name for f in fields(BatchRecord))      # the columns last_batch() reads
TASK_COLUMNS = (("id_field", "BATCH_TASK_ID_FIELD"), ("state_field", "BATCH_TASK_STATE_FIELD"),
                ("time_field", "BATCH_TASK_TIME_FIELD"), ("host_field", "BATCH_TASK_HOST_FIELD"))


class SqlBatchStore(SqlResults):
    """A BatchStore on an SQL database; a dialect subclass sets the attributes and fills in the hooks."""

    keeps_openings = True
    keeps_pages = True

    def __init__(self):
        self._item_columns: dict = {}
        self.host_claim: Optional[HostClaim] = None
        self._host_column = self._range_hint = ""       # quoted; set by open() when BATCH_TASK_HOST_FIELD is

    # -- loading tasks (batchd tasks add / import, the demo)
    def create_task_table(self, layout: TaskLayout) -> bool:
        if self.table_columns(layout.table):
            return False
        for statement in self.task_table_statements(layout):
            self.execute(statement)
        log.info("created task table %s (%s, url, %s, %s)", self.quote(layout.table), layout.id_field,
                 layout.state_field, layout.time_field)
        return True

    def add_tasks(self, layout: TaskLayout, rows: Sequence[dict]) -> int:
        columns = self._task_columns(layout, {name for row in rows for name in row})
        with self.transaction():
            self.insert_tasks(layout.table, columns, rows)
        return len(rows)

    @contextmanager
    def loading_tasks(self, layout: TaskLayout, column: str, names: Sequence[str],
                      check_duplicates: bool = True) -> Iterator[SqlTaskLoad]:
        columns = self._task_columns(layout, [*names, column])
        with self.transaction():
            load = SqlTaskLoad(self, layout, column, columns, check_duplicates)
            yield load
            load.close()

    def _task_columns(self, layout: TaskLayout, names: Iterable[str]) -> dict:
        """The task table's columns, once sure that each of `names` is one of them."""
        columns = self.table_columns(layout.table)
        if not columns:
            raise ConfigError(f"task table {self.quote(layout.table)} not found in {self.location()} (__task_table__)")
        for name in names:
            if name not in columns:
                raise ConfigError(f"task table {self.quote(layout.table)} has no column {self.quote(name)}")
        return columns

    def insert_tasks(self, table: str, columns: dict, rows: Sequence[dict]) -> None:
        """INSERT the rows, a statement per set of columns, inside the caller's transaction (`columns`: the
        table's, which _task_columns found to hold every column the rows name)."""
        by_columns: dict = {}
        for row in rows:
            by_columns.setdefault(tuple(row), []).append(row)
        for names, group in by_columns.items():
            self.execute_many(f"INSERT INTO {self.quote(table)} ({', '.join(map(self.quote, names))}) "
                              f"VALUES ({self.marks(len(names))})",
                              [[self.column_value(row[n]) for n in names] for row in group])

    # -- binding to a task table
    def open(self, layout: TaskLayout) -> None:
        table = self.quote(layout.table)
        # Every table's columns in one read (each process opens the store as it starts); batchd's own tables
        # are made only when missing.
        item_table = layout.item_table or layout.default_item_table
        found = self.tables_columns(list(dict.fromkeys((layout.table, layout.record_table, item_table,
                                                        layout.failure_table, layout.page_table,
                                                        layout.revisit_table))))
        columns = found[layout.table]
        if not columns:
            raise ConfigError(f"task table {table} not found in {self.location()} (__task_table__)")
        for field, setting in TASK_COLUMNS:
            name = getattr(layout, field)
            if name is not None and name not in columns:
                raise ConfigError(f"task table {table} has no column {self.quote(name)} ({setting})")
        self.check_task_columns(layout, columns)
        self.layout = layout
        self.host_claim, self._host_column, self._range_hint = None, "", ""
        if layout.host_field:
            self.host_claim = HostClaim(self._pending_hosts, self._last_pending)
            self._host_column, self._range_hint = self.quote(layout.host_field), self.state_range_hint(layout)
        self._warn_unindexed_state(layout)
        record_columns = self._table_with(layout.record_table, RECORD_COLUMNS, "batch record table",
                                          self._made(self.create_record_table, layout.record_table, found))
        self._add_own_columns(layout.record_table, "batch record table", record_columns, self._own_record_columns())
        if layout.item_table:
            if found[item_table]:
                self._item_columns[item_table] = frozenset(found[item_table])
            self.item_columns(item_table, setting="__item_table__")
        else:
            self._made(self.create_default_item_table, item_table, found)
        tables = {made: self._table_with(made, required, what, self._made(create, made, found))
                  for create, made, required, what in (
                      (self.create_failure_table, layout.failure_table, FAILURE_COLUMNS, "failure table"),
                      (self.create_page_table, layout.page_table, [c for c in PAGE_COLUMNS if c != PARSED_BY],
                       "page table"),
                      (self.create_revisit_table, layout.revisit_table, REVISIT_COLUMNS, "revisit table"))}
        self._add_own_columns(layout.page_table, "page table", tables[layout.page_table],
                              ((PARSED_BY, self.print_type, "the spider that last parsed each page"),))

    def _made(self, create: Callable[[str], None], table: str, found: dict) -> dict:
        """The columns of one of batchd's tables, made first when `found` (tables_columns) has none."""
        if found[table]:
            return found[table]
        create(table)
        return self.table_columns(table)

    def _table_with(self, table: str, required: Sequence[str], what: str, columns: dict) -> dict:
        """The columns of a table batchd made, once it is sure none it needs is missing (a table of the same
        name made by something else, or by an older batchd that kept other columns)."""
        missing = [c for c in required if c not in columns]
        if missing:
            raise ConfigError(f"{what} {self.quote(table)} exists without column {self.quote(missing[0])}; rename "
                              "the old table so batchd can create its own")
        return columns

    def _own_record_columns(self) -> tuple:
        """batchd's own columns of the record, beside the contract's: (name, type, what it keeps)."""
        return ((RESET_CURSOR, self.cursor_type, "where an unfinished reset stands"),
                (STATS, self.stats_type, "the batch's counters"),
                (OPENING, self.cursor_type, "how the batch opened: its mode, the rows it left settled"),
                (SPIDER_PRINT, self.cursor_type, "the fingerprint of the spider it opened with"),
                (OUTCOME, self.outcome_type, "how the batch ended: clean, flagged or failed"),
                (QUALITY, self.stats_type, "the batch's quality figures and flags"))

    def _add_own_columns(self, table: str, what: str, columns: dict, own: Sequence[tuple]) -> None:
        """A table made by an older batchd gets the columns of `own` (name, type, what it keeps) it lacks, NULL,
        which is what every old row means: no reset going on, no counters kept, no spider known."""
        for column, column_type, meaning in own:
            if column in columns:
                continue
            statement = f"ALTER TABLE {self.quote(table)} ADD COLUMN {self.quote(column)} {column_type} NULL"
            try:
                self.execute(statement)
            except ConfigError as e:
                raise ConfigError(f"{what} {self.quote(table)} needs the column {self.quote(column)} "
                                  f"and batchd may not add it ({e}); run: {statement}") from None
            log.info("%s %s: added the column %s (%s)", what, self.quote(table), self.quote(column), meaning)

    def _warn_unindexed_state(self, layout: TaskLayout) -> None:
        fix = self.missing_state_index(layout)
        if fix:
            log.warning("task table %s: column %s has no index, so every patrol scans the whole table; run: %s",
                        self.quote(layout.table), self.quote(layout.state_field), fix)

    def missing_state_index(self, layout: TaskLayout) -> Optional[str]:
        if self.has_leading_index(layout.table, layout.state_field):
            return None
        return self.index_statement(layout.table, layout.state_field)

    def item_columns(self, table: str, setting: str = "the item table") -> Optional[frozenset]:
        if table not in self._item_columns:
            columns = self.table_columns(table)
            if not columns:
                raise ConfigError(f"item table {self.quote(table)} not found in {self.location()} ({setting})")
            self._item_columns[table] = frozenset(columns)
        return self._item_columns[table]

    # -- batches
    def last_batch(self) -> Optional[BatchRecord]:
        records = self.recent_batches(1)
        return records[0] if records else None

    def recent_batches(self, count: int) -> list:
        names = ", ".join(self.quote(c) for c in RECORD_FIELDS)
        rows = self.fetch(f"SELECT {names} FROM {self.quote(self.opened_layout.record_table)} "
                          f"ORDER BY {self.quote('id')} DESC LIMIT {self.placeholder}", [count], dicts=True)
        return [self._record(row) for row in rows]

    def batch_quality(self, batch_id: int) -> Optional[str]:
        rows = self.fetch(f"SELECT {self.quote(QUALITY)} FROM {self.quote(self.opened_layout.record_table)} "
                          f"WHERE {self.quote('id')} = {self.placeholder}", [batch_id])
        return rows[0][0] if rows else None

    def _record(self, row: dict) -> BatchRecord:
        row["batch_date"] = self.time_from_db(row["batch_date"])
        row["update_time"] = self.time_from_db(row["update_time"]) if row["update_time"] is not None else None
        row["is_done"] = bool(row["is_done"])
        return BatchRecord(**row)

    def insert_batch(self, interval: int, interval_unit: str, total: int) -> BatchRecord:
        now, now_values = self.now_term()
        stamped = self.stamped_on_insert
        names = ", ".join(self.quote(c) for c in stamped + ("total_count", "interval", "interval_unit", RESET_CURSOR))
        self.execute(f"INSERT INTO {self.quote(self.opened_layout.record_table)} ({names}) "
                     f"VALUES ({', '.join([now] * len(stamped))}, {self.marks(4)})",
                     now_values * len(stamped) + [total, interval, interval_unit, reset_cursor(None, 0)])
        record = self.last_batch()
        if record is None:      # the row just inserted is gone: someone emptied the table meanwhile
            raise RuntimeError(f"the batch record inserted into {self.quote(self.opened_layout.record_table)} "
                               "is not there")
        return record

    def record_reset(self, batch_id: int, after, walked: int, finished: bool = False,
                     opening: Optional[BatchOpening] = None) -> None:
        p = self.placeholder
        values: list
        if finished:
            sets = f"{self.quote(RESET_CURSOR)} = NULL, {self.quote('total_count')} = {p}"
            values = [opened_with(walked, opening)]
        else:
            sets, values = f"{self.quote(RESET_CURSOR)} = {p}", [reset_cursor(after, walked)]
        if opening is not None:
            sets, values = f"{sets}, {self.quote(OPENING)} = {p}", values + [opening.to_json()]
        self.execute(f"UPDATE {self.quote(self.opened_layout.record_table)} SET {sets} WHERE {self.quote('id')} = {p}",
                     values + [batch_id])

    def record_stats(self, batch_id: int, counters: dict) -> None:
        self._set_in_record(batch_id, STATS, plain_json(counters))

    def record_spider(self, batch_id: int, spider: SpiderPrint) -> None:
        self._set_in_record(batch_id, SPIDER_PRINT, spider.to_json())

    def _set_in_record(self, batch_id: int, column: str, value: str) -> None:
        p = self.placeholder
        self.execute(f"UPDATE {self.quote(self.opened_layout.record_table)} SET {self.quote(column)} = {p} "
                     f"WHERE {self.quote('id')} = {p}", [value, batch_id])

    def record_outcome(self, batch_id: int, outcome: str, quality: Optional[str]) -> None:
        p = self.placeholder
        self.execute(f"UPDATE {self.quote(self.opened_layout.record_table)} SET {self.quote(OUTCOME)} = {p}, "
                     f"{self.quote(QUALITY)} = {p} WHERE {self.quote('id')} = {p}", [outcome, quality, batch_id])

    def update_batch(self, batch_id: int, progress: Progress, is_done: bool) -> None:
        now, now_values = self.now_term()
        p = self.placeholder
        sets = [f"{self.quote(c)} = {p}" for c in ("total_count", "done_count", "fail_count", "is_done")]
        sets += [f"{self.quote(c)} = {now}" for c in self.stamped_on_update]
        self.execute(f"UPDATE {self.quote(self.opened_layout.record_table)} SET {', '.join(sets)} "
                     f"WHERE {self.quote('id')} = {p}",
                     [progress.total, progress.done, progress.failed, int(is_done)]
                     + now_values * len(self.stamped_on_update) + [batch_id])

    # -- walking the table in primary-key chunks (the reset, the reconciliation)
    def next_chunk(self, after, size: int) -> Optional[tuple]:
        table, key, _ = self._quoted_task_table()
        conditions, params = self._id_range(after, None)
        rows = self.fetch(f"SELECT MAX(chunk_id), COUNT(*) FROM (SELECT {key} AS chunk_id FROM {table}"
                          f"{where_all(conditions)} ORDER BY {key} LIMIT {self.placeholder}) AS chunk", params + [size])
        last, count = rows[0]
        return (last, count) if count else None

    def reset_chunk(self, after, upper, move: Move = Move.RESET) -> int:
        """Rows already pending, and those in the states the move keeps, are left alone (NULL states are
        not: every such row ends pending)."""
        return self._apply(move, *self._resetting(after, upper, move))

    def reset_due_chunk(self, after, upper, due_before: float, move: Move = Move.RESET) -> int:
        """reset_chunk's rows whose revisit is due: the revisit table is read by its primary key, once for
        each row of the chunk that the reset would move (MariaDB's EXPLAIN: a dependent subquery, eq_ref on PRIMARY)."""
        table, key, _ = self._quoted_task_table()
        where, params = self._resetting(after, upper, move)
        revisit, task_id = self.quote(self.opened_layout.revisit_table), self.quote("task_id")
        not_due = (f"SELECT 1 FROM {revisit} AS r WHERE r.{task_id} = {table}.{key} "
                   f"AND r.{self.quote('next_due')} > {self.placeholder}")
        return self._apply(move, f"{where} AND NOT EXISTS ({not_due})", params + [due_before])

    def _resetting(self, after, upper, move: Move) -> tuple:
        """(condition, values) of the rows with after < id <= upper that `move`, a reset, moves: not those
        already pending, nor those in the states it keeps."""
        _, _, state = self._quoted_task_table()
        conditions, params = self._id_range(after, upper)
        left = [int(move.target)] + [int(kept) for kept in move.keeps]
        moving = f"({state} NOT IN ({self.marks(len(left))}) OR {state} IS NULL)"
        return " AND ".join(conditions + [moving]), params + left

    def count_chunk(self, after, upper) -> tuple:
        table, _, state = self._quoted_task_table()
        conditions, params = self._id_range(after, upper)
        p = self.placeholder
        rows, done, failed = self.fetch(f"SELECT COUNT(*), COALESCE(SUM(CASE WHEN {state} = {p} THEN 1 ELSE 0 END), 0), "
                                        f"COALESCE(SUM(CASE WHEN {state} = {p} THEN 1 ELSE 0 END), 0) FROM {table}"
                                        f"{where_all(conditions)}", [int(TaskState.DONE), int(TaskState.FAILED)] + params)[0]
        return int(rows), int(done), int(failed)

    def hosts_in_chunk(self, after, upper) -> list:
        table, key, _ = self._quoted_task_table()
        conditions, params = self._id_range(after, upper)
        return [tuple(row) for row in self.fetch(f"SELECT {key}, {self._host_column} FROM {table}"
                                                 f"{where_all(conditions)} ORDER BY {key}", params)]

    def _id_range(self, after, upper) -> tuple:
        """(conditions, values) of after < id <= upper; either end open when None."""
        _, key, _ = self._quoted_task_table()
        p = self.placeholder
        conditions, params = [], []
        if after is not None:
            conditions.append(f"{key} > {p}")
            params.append(after)
        if upper is not None:
            conditions.append(f"{key} <= {p}")
            params.append(upper)
        return conditions, params

    def _apply(self, move: Move, where: str, params: list) -> int:
        """One compare-and-set statement of the state machine (batchd/task.py): the rows where `where` holds
        and whose state is one of the move's sources go to its target, their time column to now()."""
        table, _, state = self._quoted_task_table()
        now, now_values = self.now_term()
        sources = [int(s) for s in move.sources]
        source_test = f" AND {state} IN ({self.marks(len(sources))})" if sources else ""
        time_column = self.quote(self.opened_layout.time_field)
        return self.execute(f"UPDATE {table} SET {state} = {self.placeholder}, {time_column} = "
                            f"{now} WHERE {where}{source_test}", [int(move.target)] + now_values + params + sources)

    # -- task states
    def claim(self, limit: int, upto=None) -> list:
        _, key, _ = self._quoted_task_table()
        with self.transaction():
            if self.host_claim is None:
                source, params = self._pending_in(None, upto)
                rows = self.fetch(f"SELECT * {source} ORDER BY {key} LIMIT {self.placeholder}{self.claim_lock}",
                                  params + [limit], dicts=True)
            else:
                rows = self._pending_rows(self.host_claim.pick(limit, upto))
            for part in chunks([row[self.opened_layout.id_field] for row in rows], self.in_chunk):
                self._apply(Move.CLAIM, f"{key} IN ({self.marks(len(part))})", part)
        for row in rows:
            row[self.opened_layout.state_field] = int(Move.CLAIM.target)
        return rows

    def _pending_in(self, after, upto) -> tuple:
        """(FROM ... WHERE ..., values) of the pending rows with after < id <= upto (either end open when None)."""
        table, _, state = self._quoted_task_table()
        conditions, params = self._id_range(after, upto)
        return (f"FROM {table}{self._range_hint}{where_all([f'{state} = {self.placeholder}'] + conditions)}",
                [int(TaskState.PENDING)] + params)

    def _pending_hosts(self, after, upto, n: int) -> list:
        """HostClaim's read: up to n pending (id, host column) rows in id order, after < id <= upto."""
        _, key, _ = self._quoted_task_table()
        source, params = self._pending_in(after, upto)
        return self.fetch(f"SELECT {key}, {self._host_column} {source} ORDER BY {key} LIMIT {self.placeholder}",
                          params + [n])

    def _last_pending(self, upto):
        """HostClaim's other read: the highest pending id up to `upto`, or None."""
        _, key, _ = self._quoted_task_table()
        source, params = self._pending_in(None, upto)
        rows = self.fetch(f"SELECT {key} {source} ORDER BY {key} DESC LIMIT 1", params)
        return rows[0][0] if rows else None

    def _pending_rows(self, ids: list) -> list:
        """The rows of the ids HostClaim picked that are still pending, locked for the claim, in the order picked.
        The state is tested here, not in the statement: with it MariaDB may read `id IN (...)` as a ref on the
        state index, which walks every pending row (115 ms for 953 ids of a million rows, 5 ms without)."""
        table, key, _ = self._quoted_task_table()
        layout = self.opened_layout
        rows: list = []
        for part in chunks(ids, self.in_chunk):
            rows += self.fetch(f"SELECT * FROM {table} WHERE {key} IN ({self.marks(len(part))}){self.claim_lock}",
                               part, dicts=True)
        position = {task_id: n for n, task_id in enumerate(ids)}
        return sorted((row for row in rows if row[layout.state_field] == TaskState.PENDING),
                      key=lambda row: position[row[layout.id_field]])

    def move(self, move: Move, ids: Sequence, older_than: Optional[float] = None) -> int:
        _, key, _ = self._quoted_task_table()
        age_test, age_values = "", []
        if older_than is not None:
            age_sql, age_values = self.older_than_term(self.opened_layout.time_field, older_than)
            age_test = f" AND {age_sql}"
        moved = 0
        with self.transaction() if self.move_in_one_transaction else nullcontext():
            for part in chunks(list(ids), self.in_chunk):
                moved += self._apply(move, f"{key} IN ({self.marks(len(part))}){age_test}", part + age_values)
        return moved

    def stale_processing(self, older_than: float, limit: int) -> list:
        table, key, state = self._quoted_task_table()
        age_sql, age_values = self.older_than_term(self.opened_layout.time_field, older_than)
        rows = self.fetch(f"SELECT {key} FROM {table} WHERE {state} = {self.placeholder} AND {age_sql} "
                          f"LIMIT {self.placeholder}", [int(TaskState.PROCESSING)] + age_values + [limit])
        return [row[0] for row in rows]

    def progress(self) -> Progress:
        table, _, state = self._quoted_task_table()
        counts = {value: n for value, n in self.fetch(f"SELECT {state}, COUNT(*) FROM {table} GROUP BY {state}")}
        return Progress(total=sum(counts.values()), done=counts.get(int(TaskState.DONE), 0),
                        failed=counts.get(int(TaskState.FAILED), 0),
                        pending=counts.get(int(TaskState.PENDING), 0),
                        processing=counts.get(int(TaskState.PROCESSING), 0))

    def unsettled_count(self) -> int:
        table, _, state = self._quoted_task_table()
        return self.fetch(f"SELECT COUNT(*) FROM {table} WHERE {state} IN ({self.marks(2)})",
                          (int(TaskState.PENDING), int(TaskState.PROCESSING)))[0][0]

