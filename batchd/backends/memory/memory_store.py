"""MemoryBatchStore: a real backend held in this process's memory.

No other process can reach it, so its other ports live in this process too
(batchd/backends/memory/local_queue.py) and `start_monitor(once=True)` runs the whole batch here. The items end in
`store.items` (`store.items_in(table)` for one table), in the order they landed; a re-run of a task
replaces its items, and an Item with a `__unique_key__` replaces the one with the same key.
"""
import bisect
import collections
import contextlib
import dataclasses
import threading
from datetime import datetime
from typing import Iterable, Iterator, Optional, Sequence

from ...codec import plain_json
from ...errors import ConfigError
from ...model import (COLUMNS_ITEM_KIND, BatchOpening, BatchRecord, FailureGroup, FailureQuery, ItemRow, PageRecord,
                      Progress, Revisit,
                      SpiderPrint, TaskFailure, TaskLayout, reset_cursor, task_key)
from ...hosts.claims import HostClaim
from ..store import EXPORT_CHUNK, BatchStore, RowStream, opened_with
from ..task_load import UNDECLARED_MOST, ColumnLimit, TaskLoad
from ...task import Move, TaskState


class MemoryBatchStore(BatchStore):
    runs_in_process = True
    served_by = "memory"
    keeps_openings = True
    keeps_pages = True

    def __init__(self, rows: Iterable[dict] = ()):
        self._rows = [dict(row) for row in rows]
        self._by_id: dict = {}
        self._batches: list = []
        self._items: dict = {}     # (table, key) -> item, insertion-ordered
        self._failures: dict = {}  # (batch id, task key) -> TaskFailure
        self._pages: dict = {}     # url -> PageRecord
        self._revisits: dict = {}  # task key -> Revisit
        self._quality: dict = {}   # batch id -> its quality JSON
        self._lock = threading.RLock()
        self.host_claim: Optional[HostClaim] = None

    # -- what users read after a run
    @property
    def items(self) -> list:
        with self._lock:
            return [item for (table, _), item in self._items.items()]

    def items_in(self, table: str) -> list:
        """The items stored in one table (an Item's __table__, or the spider's item table)."""
        with self._lock:
            return [item for (where, _), item in self._items.items() if where == table]

    @property
    def rows(self) -> list:
        with self._lock:
            return [dict(row) for row in self._rows]

    @property
    def batches(self) -> list:
        with self._lock:
            return list(self._batches)

    def add_task(self, row: dict) -> None:
        """Add a task mid-batch, as an INSERT into a task table would."""
        with self._lock:
            row = dict(row)
            if self.layout:
                self._index(row)
            self._rows.append(row)

    def create_task_table(self, layout: TaskLayout) -> bool:
        return False      # the rows given at construction are the table

    def add_tasks(self, layout: TaskLayout, rows) -> int:
        with self._lock:
            next_id = max([row[layout.id_field] for row in self._rows if isinstance(row[layout.id_field], int)] + [0])
            for offset, row in enumerate(rows, start=1):
                self.add_task({layout.id_field: next_id + offset, **row})
        return len(rows)

    @contextlib.contextmanager
    def loading_tasks(self, layout: TaskLayout, column: str, names: Sequence[str],
                      check_duplicates: bool = True) -> Iterator[TaskLoad]:
        """The rows are the table: a load sees the values of `column` they hold, and adds its rows at its end."""
        with self._lock:
            load = MemoryTaskLoad({row.get(column): row.get(layout.id_field) for row in reversed(self._rows)}
                                  if check_duplicates else {})
            yield load
            self.add_tasks(layout, load.rows)

    # -- the contract
    def open(self, layout: TaskLayout) -> None:
        with self._lock:
            self.layout = layout
            self.host_claim = HostClaim(self._pending_hosts, self._last_pending) if layout.host_field else None
            self._by_id = {}
            for row in self._rows:
                self._index(row)

    def _index(self, row: dict) -> None:
        layout = self.opened_layout
        if layout.id_field not in row:
            raise ConfigError(f"MemoryBatchStore: a task row has no {layout.id_field!r} "
                              f"(BATCH_TASK_ID_FIELD): {row!r}")
        if layout.host_field and layout.host_field not in row:
            raise ConfigError(f"MemoryBatchStore: task {row[layout.id_field]!r} of task table {layout.table!r} has "
                              f"no {layout.host_field!r} (BATCH_TASK_HOST_FIELD)")
        row.setdefault(layout.state_field, int(TaskState.PENDING))
        row.setdefault(layout.time_field, self.now())
        self._by_id[task_key(row[layout.id_field])] = row   # queues hand ids back as keys

    def now(self) -> datetime:
        return datetime.now()

    def last_batch(self) -> Optional[BatchRecord]:
        with self._lock:
            return self._batches[-1] if self._batches else None

    def recent_batches(self, count: int) -> list:
        with self._lock:
            return self._batches[::-1][:count]

    def insert_batch(self, interval: int, interval_unit: str, total: int) -> BatchRecord:
        with self._lock:
            now = self.now()
            record = BatchRecord(id=len(self._batches) + 1, batch_date=now, total_count=total, interval=interval,
                                 interval_unit=interval_unit, reset_cursor=reset_cursor(None, 0), update_time=now)
            self._batches.append(record)
            return record

    def record_reset(self, batch_id: int, after, walked: int, finished: bool = False,
                     opening: Optional[BatchOpening] = None) -> None:
        with self._lock:
            record = self._batch(batch_id)
            if finished:
                record.reset_cursor = None
                record.total_count = opened_with(walked, opening)
            else:
                record.reset_cursor = reset_cursor(after, walked)
            if opening is not None:
                record.opening = opening.to_json()

    def update_batch(self, batch_id: int, progress: Progress, is_done: bool) -> None:
        with self._lock:
            record = self._batch(batch_id)
            record.total_count, record.done_count = progress.total, progress.done
            record.fail_count, record.is_done = progress.failed, is_done
            record.update_time = self.now()

    def record_stats(self, batch_id: int, counters: dict) -> None:
        with self._lock:
            self._batch(batch_id).stats = plain_json(counters)

    def record_spider(self, batch_id: int, spider: SpiderPrint) -> None:
        with self._lock:
            self._batch(batch_id).spider_print = spider.to_json()

    def batch_quality(self, batch_id: int) -> Optional[str]:
        with self._lock:
            return self._quality.get(batch_id)

    def record_outcome(self, batch_id: int, outcome: str, quality: Optional[str]) -> None:
        with self._lock:
            self._batch(batch_id).outcome = outcome
            self._quality[batch_id] = quality

    def _batch(self, batch_id: int) -> BatchRecord:
        return next(b for b in self._batches if b.id == batch_id)

    def next_chunk(self, after, size: int) -> Optional[tuple]:
        with self._lock:
            ids = self._ids_in(after, None)[:size]
            return (ids[-1], len(ids)) if ids else None

    def reset_chunk(self, after, upper, move: Move = Move.RESET) -> int:
        with self._lock:
            return self._apply(move, self._resetting(after, upper, move))

    def reset_due_chunk(self, after, upper, due_before: float, move: Move = Move.RESET) -> int:
        with self._lock:
            return self._apply(move, [row for row in self._resetting(after, upper, move) if self._due(row, due_before)])

    def _due(self, row: dict, due_before: float) -> bool:
        revisit = self._revisits.get(task_key(row[self.opened_layout.id_field]))
        return revisit is None or revisit.next_due <= due_before

    def _resetting(self, after, upper, move: Move) -> list:
        """The rows with after < id <= upper that are not pending already (_apply leaves those the move keeps)."""
        state = self.opened_layout.state_field
        rows = [self._by_id[task_key(i)] for i in self._ids_in(after, upper)]
        return [row for row in rows if row[state] != move.target]

    def count_chunk(self, after, upper) -> tuple:
        with self._lock:
            states = [self._by_id[task_key(i)][self.opened_layout.state_field] for i in self._ids_in(after, upper)]
            return len(states), states.count(TaskState.DONE), states.count(TaskState.FAILED)

    def hosts_in_chunk(self, after, upper) -> list:
        with self._lock:
            host = self.opened_layout.host_field
            return [(i, self._by_id[task_key(i)][host]) for i in self._ids_in(after, upper)]

    def _ids_in(self, after, upper) -> list:
        """The ids with after < id <= upper, in order (either end open when None)."""
        ids = sorted(row[self.opened_layout.id_field] for row in self._rows)
        start = 0 if after is None else bisect.bisect_right(ids, after)
        end = len(ids) if upper is None else bisect.bisect_right(ids, upper)
        return ids[start:end]

    def claim(self, limit: int, upto=None) -> list:
        with self._lock:
            if self.host_claim is None:
                pending = self._pending(None, upto)[:limit]
            else:
                pending = [self._by_id[task_key(i)] for i in self.host_claim.pick(limit, upto)]
            self._apply(Move.CLAIM, pending)
            return [dict(row) for row in pending]

    def _pending(self, after, upto) -> list:
        """The pending rows with after < id <= upto, in id order (either end open when None)."""
        state, key = self.opened_layout.state_field, self.opened_layout.id_field
        return sorted((row for row in self._rows if row[state] == TaskState.PENDING
                       and (after is None or row[key] > after) and (upto is None or row[key] <= upto)),
                      key=lambda row: row[key])

    def _pending_hosts(self, after, upto, n: int) -> list:
        key, host = self.opened_layout.id_field, self.opened_layout.host_field
        return [(row[key], row[host]) for row in self._pending(after, upto)[:n]]

    def _last_pending(self, upto):
        pending = self._pending(None, upto)
        return pending[-1][self.opened_layout.id_field] if pending else None

    def move(self, move: Move, ids: Sequence, older_than: Optional[float] = None) -> int:
        with self._lock:
            rows = [self._by_id[task_key(i)] for i in ids if task_key(i) in self._by_id]
            rows = [row for row in rows if older_than is None or self._older_than(row, older_than)]
            return self._apply(move, rows)

    def stale_processing(self, older_than: float, limit: int) -> list:
        with self._lock:
            state, key = self.opened_layout.state_field, self.opened_layout.id_field
            return [row[key] for row in self._rows
                    if row[state] == TaskState.PROCESSING and self._older_than(row, older_than)][:limit]

    def progress(self) -> Progress:
        with self._lock:
            counts = {s: 0 for s in TaskState}
            for row in self._rows:
                state = row[self.opened_layout.state_field]
                if state in counts:
                    counts[TaskState(state)] += 1
            return Progress(total=len(self._rows), done=counts[TaskState.DONE],
                            failed=counts[TaskState.FAILED], pending=counts[TaskState.PENDING],
                            processing=counts[TaskState.PROCESSING])

    def unsettled_count(self) -> int:
        progress = self.progress()
        return progress.total - progress.settled

    def save_items(self, table: str, kind: str, rows: Sequence[ItemRow], key: Sequence[str] = ()) -> None:
        with self._lock:
            for row in rows:
                if key:       # an Item's __unique_key__: the item with the same values there is replaced
                    at = ("key",) + tuple(row.data.get(column) for column in key)
                else:
                    at = (row.batch_id, row.task_id, row.request_seq, row.item_seq)
                self._items[(table, at)] = row.data

    def item_rows(self, table: str, kind: str, batch_id: Optional[int] = None, batch_column: Optional[str] = None,
                  size: int = EXPORT_CHUNK, as_text: bool = False) -> RowStream:
        """The items are already in memory: a list of the table's is taken at once (the items themselves are not
        copied), then given out in chunks made as they are asked for. A column table's columns are every key its
        items hold, in the order first met. A table never written is empty (the memory store has no tables).
        `as_text` changes nothing: the items are objects already, which the writers turn into text."""
        if batch_id is not None and kind == COLUMNS_ITEM_KIND and batch_column is None:
            raise ConfigError(f"item table {table!r} has no column for the batch of a row: set ITEM_BATCH_COLUMN "
                              "to one the worker fills")
        with self._lock:
            held = [(at, item) for (where, at), item in self._items.items() if where == table]
        if kind != COLUMNS_ITEM_KIND:
            picked = [item for at, item in held if batch_id is None or at[0] == batch_id]
            return RowStream(("item",), _in_chunks(picked, None, size))
        picked = [item for _, item in held if batch_id is None or item.get(batch_column) == batch_id]
        columns = tuple(dict.fromkeys(key for item in picked for key in item))
        return RowStream(columns, _in_chunks(picked, columns, size))

    def record_failures(self, failures: Sequence[TaskFailure]) -> None:
        with self._lock:
            now = self.now()
            for failure in failures:
                self._failures[(failure.batch_id, task_key(failure.task_id))] = dataclasses.replace(failure, time=now)

    def failures(self, query: FailureQuery, after=None, limit: int = 100) -> list:
        with self._lock:
            chosen = sorted((f for f in self._selected(query) if after is None or f.task_id > after),
                            key=lambda f: f.task_id)
            return [dataclasses.replace(f) for f in chosen[:limit]]

    def failure_groups(self, query: FailureQuery) -> list:
        with self._lock:
            groups = collections.defaultdict(list)
            for f in self._selected(query):
                alone = f.reason if f.status is None and f.error_class is None else None
                groups[(f.status, f.error_class, alone)].append(f.reason)
            return sorted((FailureGroup(status=status, error_class=error_class, sample=min(reasons), count=len(reasons))
                           for (status, error_class, _), reasons in groups.items()), key=lambda g: -g.count)

    # -- what a re-crawl remembers: pages and revisits, as the SQL stores keep them (PageRecord.fitted)
    def remember_pages(self, pages: Sequence[PageRecord]) -> None:
        with self._lock:
            for page in pages:
                fitted = page.fitted()
                if fitted is not None:
                    self._pages[fitted.url] = fitted

    def recall_pages(self, urls: Sequence[str]) -> dict:
        with self._lock:
            return {url: self._pages[url] for url in urls if url in self._pages}

    def forget_pages(self, urls: Sequence[str]) -> None:
        with self._lock:
            for url in urls:
                self._pages.pop(url, None)

    def pages_changed_in(self, batch_id: int) -> list:
        with self._lock:
            return sorted((page for page in self._pages.values() if page.changed_in == batch_id), key=lambda p: p.url)

    def schedule_revisits(self, revisits: Sequence[Revisit]) -> None:
        with self._lock:
            for revisit in revisits:
                self._revisits[task_key(revisit.task_id)] = revisit

    def revisits(self, task_ids: Sequence) -> dict:
        with self._lock:
            keys = [task_key(task_id) for task_id in task_ids]
            return {key: self._revisits[key] for key in keys if key in self._revisits}

    def _selected(self, query: FailureQuery) -> list:
        state = self.opened_layout.state_field
        return [f for (batch_id, key), f in self._failures.items() if batch_id == query.batch_id
                and (not query.still_failed or (key in self._by_id and self._by_id[key][state] == TaskState.FAILED))
                and (not query.reason or query.reason.lower() in f.reason.lower())]

    def _apply(self, move: Move, rows: list) -> int:
        """The state machine's compare-and-set (batchd/task.py) on these rows: those in a source state move
        to the target, their time to now(); how many moved."""
        now, moved = self.now(), [row for row in rows if move.allows(row[self.opened_layout.state_field])]
        for row in moved:
            row[self.opened_layout.state_field] = int(move.target)
            row[self.opened_layout.time_field] = now
        return len(moved)

    def _older_than(self, row: dict, seconds: float) -> bool:
        return (self.now() - row[self.opened_layout.time_field]).total_seconds() > seconds


class MemoryTaskLoad(TaskLoad):
    """A MemoryBatchStore's TaskLoad: its values have no declared length, so batchd's bound holds."""

    limit = ColumnLimit(UNDECLARED_MOST, declared=False)

    def __init__(self, ids: dict):
        self.ids = ids          # the table's URLs, each with its (first) task's id; None for the rows added
        self.rows: list = []

    def known(self, urls: Sequence[str]) -> set:
        return {url for url in urls if url in self.ids}

    def ids_of(self, urls: Sequence[str]) -> dict:
        return {url: self.ids[url] for url in urls if self.ids.get(url) is not None}

    def add(self, rows: Sequence[dict], urls: Optional[Sequence[str]] = None) -> None:
        self.rows += rows
        self.ids.update(dict.fromkeys(urls or ()))


def _in_chunks(items: list, columns: Optional[tuple], size: int) -> Iterator[list]:
    """The items as rows of `columns` (None: the item itself, a default item table's document)."""
    for start in range(0, len(items), size):
        part = items[start:start + size]
        yield [(item,) for item in part] if columns is None else [tuple(item.get(c) for c in columns) for item in part]
