"""The BatchStore port: the task table, the batch record and the items, as a store must keep them.

An ABC rather than a Protocol, because users may write one (`batchd.core.batch_store.BatchStore` is this
class): a subclass implements the abstract methods, and the others have defaults that say what a store
without them does. The SQL stores share backends/sql.py; the memory store is backends/memory/memory_store.py.
The other ports (backends/ports.py) are the queue side of a namespace.
"""
import abc
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Callable, ContextManager, Iterator, Optional, Sequence

from ..errors import ConfigError
from ..model import (BatchOpening, BatchRecord, FailureQuery, ItemRow, PageRecord, Progress, Revisit, SpiderPrint,
                     TaskFailure, TaskLayout)
from ..task import Move
from .task_load import TaskLoad


EXPORT_CHUNK = 2000     # rows an item table is read in at a time for `batchd export`


@dataclass(frozen=True)
class RowStream:
    """An item table's rows as `BatchStore.item_rows` reads them, for `batchd export`: the column names, then the
    rows as tuples in chunks (lists), read as they are asked for, never the table at once."""

    columns: tuple
    chunks: Iterator[list]


def opened_with(walked: int, opening: Optional[BatchOpening]) -> int:
    """The total_count of a batch whose opening walk is over, having walked `walked` rows."""
    return walked if opening is None or opening.opened_with is None else opening.opened_with


class BatchStore(abc.ABC):
    """The contract a storage backend fulfils. Thread-safe: workers call it from several threads."""

    layout: Optional[TaskLayout] = None
    runs_in_process = False   # True when no other process can reach the store: start_monitor() runs workers too
    backend_name = "memory"   # names the backend in outage lines and STATUS= ("MySQL", "SQLite")
    # Which backend package (batchd/backends/) serves this store's other ports: its own file, its own
    # process, or Redis (a store of the user's own, like MySQL's, is served by Redis).
    served_by = "mysql_redis"
    # True when record_reset keeps a BatchOpening: only then may a batch open otherwise than full, resetting all.
    keeps_openings = False
    # True when the store keeps PageRecords and Revisits (the page and revisit tables): only then may
    # REVALIDATE be on or BATCH_MODE be "due".
    keeps_pages = False

    @property
    def opened_layout(self) -> TaskLayout:
        """The layout open() bound this store to: a store used before open() is a programming error."""
        if self.layout is None:
            raise RuntimeError(f"{self.describe()} is used before open()")
        return self.layout

    def describe(self) -> str:
        """What this store is, fit for a log line (never a password)."""
        return type(self).__name__

    def ping(self) -> None:
        """A cheap round trip; raises BackendUnavailable while the backend is down."""

    def identity(self) -> str:
        """Which data this store is, the same from every host that reaches it and never with a password
        (the server as it names itself and the database, or the file): a queue namespace serves one."""
        return f"{type(self).__name__} {id(self):x}"

    @abc.abstractmethod
    def open(self, layout: TaskLayout) -> None:
        """Bind to a task table: check that it and its three columns exist (else raise ConfigError
        naming the table, the column and the setting), create the batch record table and the default
        item table if missing, and warn (with the statement to run) when the state column has no index.
        Raise BackendUnavailable when the backend cannot be reached."""

    @abc.abstractmethod
    def now(self) -> datetime:
        """The store's clock: every batch date and every staleness test uses it, never the host's."""

    def clock_zone(self) -> Optional[tzinfo]:
        """The zone now() and the batch dates are read in (BATCH_SCHEDULE reads them in BATCH_TIMEZONE,
        batchd/schedule.py); None: the machine's local time, as the memory store's."""
        return None

    def hold_hosts(self, held: Optional[Callable[[str], bool]]) -> bool:
        """Claims from now on take no task of a host for which `held(host)` is true (CRAWL_HOURS: it waits for
        its hours); None: no host waits. True when this store honours it: one whose claims go across hosts
        (BATCH_TASK_HOST_FIELD, hosts/claims.py); a store without is told nothing (False)."""
        host_claim = getattr(self, "host_claim", None)
        if host_claim is None:
            return False
        host_claim.held = held
        return True

    @abc.abstractmethod
    def last_batch(self) -> Optional[BatchRecord]:
        """The most recent batch record, or None before the first batch."""

    def recent_batches(self, count: int) -> list:
        """The `count` most recent batch records, newest first (`batchd status --history`). A store that
        keeps only its last record gives that one."""
        last = self.last_batch()
        return [last] if last is not None else []

    def batch_quality(self, batch_id: int) -> Optional[str]:
        """The quality JSON of one batch (what record_outcome kept), None when it keeps none. A store that
        has nowhere to keep it gives None: its batches' baselines are empty."""
        return None

    @abc.abstractmethod
    def insert_batch(self, interval: int, interval_unit: str, total: int) -> BatchRecord:
        """Open a batch record dated now(), its reset still to walk (reset_cursor [null, 0]); `total` is the
        number of tasks expected (the last batch's) until the reset has counted them."""

    def record_stats(self, batch_id: int, counters: dict) -> None:
        """Keep the batch's counters ({name: n}) in its record, as the master closes it. A store that has
        nowhere to keep them does nothing: the master logs them anyway."""

    def record_spider(self, batch_id: int, spider: SpiderPrint) -> None:
        """Keep the print of the spider the batch opened with (BatchRecord.spider_print), as the master opens it,
        before any of its tasks is claimed: workers read it to know whether the batch trusts validators. A store
        that has nowhere to keep it does nothing: its batches never know that their spider changed."""

    def record_outcome(self, batch_id: int, outcome: str, quality: Optional[str]) -> None:
        """Keep how the batch ended (clean, flagged, failed) and its quality figures (JSON text, or None) in its
        record, as the master closes it and before is_done. A store that has nowhere to keep them does
        nothing: the master logs the flags anyway."""

    def record_failures(self, failures: Sequence[TaskFailure]) -> None:
        """Keep why these tasks failed, stamped with now(): one row per task and batch, a later failure
        replacing an earlier one. Written beside the FINISH_FAILED / MARK_FAILED move of those tasks (before
        it, so a write-back retried after an outage writes them again). A store that has nowhere to keep
        them does nothing: the log lines say why tasks failed anyway."""

    def failures(self, query: FailureQuery, after=None, limit: int = 100) -> list:
        """Up to `limit` TaskFailures that `query` selects, in task id order, after task id `after`."""
        raise ConfigError(f"{self.describe()} keeps no failure records")

    def failure_groups(self, query: FailureQuery) -> list:
        """Every failure `query` selects, counted in FailureGroups (the largest first)."""
        raise ConfigError(f"{self.describe()} keeps no failure records")

    @abc.abstractmethod
    def next_chunk(self, after, size: int) -> Optional[tuple]:
        """The `size` rows that follow id `after` in id order (from the first when None), as (the last
        of their ids, how many); None when no row is left. Reads the primary key, nothing else."""

    @abc.abstractmethod
    def reset_chunk(self, after, upper, move: Move = Move.RESET) -> int:
        """`move` (Move.RESET, or RESET_KEEPING_FAILED) of every row with after < id <= upper (after None:
        from the first row); rows already pending are left alone. Return how many moved. One short statement."""

    @abc.abstractmethod
    def count_chunk(self, after, upper) -> tuple:
        """(rows, done, failed) among the rows with after < id <= upper: a reconciliation walks the table so."""

    def reset_due_chunk(self, after, upper, due_before: float, move: Move = Move.RESET) -> int:
        """A "due" batch's reset: `move` of the rows with after < id <= upper whose revisit is due, i.e.
        with no Revisit or one whose next_due <= due_before; rows already pending, those in the states
        the move keeps, and those not due are left alone. How many moved. One short statement (the
        revisit table is read by its primary key, row by row of the chunk)."""
        raise NotImplementedError(f"{self.describe()} keeps no revisits")

    def hosts_in_chunk(self, after, upper) -> list:
        """[(id, the BATCH_TASK_HOST_FIELD column's value)] of the rows with after < id <= upper, in id order: a
        reparse of one host (`batchd reparse --host`) picks its tasks so. One short statement."""
        raise ConfigError(f"{self.describe()} reads no host column of its tasks")

    # -- what a re-crawl remembers (keeps_pages); a store without it is never asked
    def recall_pages(self, urls: Sequence[str]) -> dict:
        """The PageRecords kept of these URLs, by URL (those never fetched whole are absent)."""
        raise NotImplementedError(f"{self.describe()} keeps no pages")

    def remember_pages(self, pages: Sequence[PageRecord]) -> None:
        """Keep these PageRecords, each replacing the one of its URL: one upsert."""
        raise NotImplementedError(f"{self.describe()} keeps no pages")

    def forget_pages(self, urls: Sequence[str]) -> None:
        """Drop what is kept of these URLs (a page gone: 404 or 410)."""
        raise NotImplementedError(f"{self.describe()} keeps no pages")

    def pages_changed_in(self, batch_id: int) -> list:
        """The PageRecords whose changed_in is `batch_id` (new or changed in that batch), by URL."""
        raise NotImplementedError(f"{self.describe()} keeps no pages")

    def revisits(self, task_ids: Sequence) -> dict:
        """The Revisits kept of these tasks, by task_key(task_id) (tasks never scheduled are absent)."""
        raise NotImplementedError(f"{self.describe()} keeps no revisits")

    def schedule_revisits(self, revisits: Sequence[Revisit]) -> None:
        """Keep these Revisits, each replacing the one of its task: one upsert."""
        raise NotImplementedError(f"{self.describe()} keeps no revisits")

    @abc.abstractmethod
    def record_reset(self, batch_id: int, after, walked: int, finished: bool = False,
                     opening: Optional[BatchOpening] = None) -> None:
        """Keep the opening walk's progress in the batch record: every row up to id `after` is walked (reset,
        or counted), `walked` rows so far. `finished`: no row is left; the cursor is cleared and total_count =
        walked (opening.opened_with when given). `opening`: a batch opened otherwise than full, resetting all,
        keeps its BatchOpening in the same statement (only stores with keeps_openings are given one)."""

    @abc.abstractmethod
    def update_batch(self, batch_id: int, progress: Progress, is_done: bool) -> None:
        """Write the counts of `progress` (and is_done) into the batch record."""

    @abc.abstractmethod
    def claim(self, limit: int, upto=None) -> list:
        """Move at most `limit` PENDING tasks to PROCESSING (lowest ids first; with `upto`, none past that
        id) and return their rows as dicts. A row returned is one this call moved: no two claims ever
        return the same row. Through the state column's index: never a scan of the table. With the layout's
        host_field (BATCH_TASK_HOST_FIELD), the tasks are taken round robin across hosts instead, in the
        order picked (hosts/claims.py)."""

    @abc.abstractmethod
    def move(self, move: Move, ids: Sequence, older_than: Optional[float] = None) -> int:
        """Apply `move` to the rows among `ids` whose state is one of its sources (and, with older_than,
        whose time column is older than that many seconds by now()); return how many rows moved."""

    @abc.abstractmethod
    def stale_processing(self, older_than: float, limit: int) -> list:
        """Ids of up to `limit` PROCESSING tasks whose time column is older than `older_than` seconds."""

    @abc.abstractmethod
    def progress(self) -> Progress:
        """Counts of the whole task table by state: a scan, for the demo, benchmarks and tests. The master
        never asks (it counts as tasks settle: BatchTally)."""

    @abc.abstractmethod
    def unsettled_count(self) -> int:
        """PENDING + PROCESSING rows, through the state column's index: cheap when few are left, which is
        when the master asks (its queue has run dry and nothing is left to claim)."""

    @abc.abstractmethod
    def save_items(self, table: str, kind: str, rows: Sequence[ItemRow], key: Sequence[str] = ()) -> None:
        """Store the rows durably in one transaction, as upserts (a row with the same key replaces the
        old one). `kind` is DEFAULT_ITEM_KIND or COLUMNS_ITEM_KIND. `key`: the columns a column table's
        rows are upserted on (an Item's __unique_key__, a UNIQUE index of the table); empty: any unique
        key the table has. Raise on failure: nothing of the batch counts as stored unless this returns."""

    def item_rows(self, table: str, kind: str, batch_id: Optional[int] = None, batch_column: Optional[str] = None,
                  size: int = EXPORT_CHUNK, as_text: bool = False) -> RowStream:
        """For `batchd export`: the rows of an item table in constant memory, `size` at a time. `kind`
        DEFAULT_ITEM_KIND: the one column `item`, each item's JSON document (text; a dict where the store keeps
        dicts); COLUMNS_ITEM_KIND: every column of the table, in its order. `batch_id`: only that batch's rows,
        the default item table's `batch_id`, or `batch_column` of a column table (ConfigError naming the table
        and the column when it has none). `as_text`: times and decimals may come as the text JSON and CSV write
        (ISO 8601, the exact digits), made by the database, where converting each value here costs more. A store
        that cannot read its items back says so (ConfigError)."""
        raise ConfigError(f"{self.describe()} cannot read its items back (batchd export); read table {table} "
                          "where the store keeps it")

    def create_task_table(self, layout: TaskLayout) -> bool:
        """For `batchd tasks` and the demo: make the seed's task table (primary key, `url`, state and
        time columns, the state indexed) when it does not exist. True when it was made. The table
        stays the user's: batchd never alters one that exists."""
        raise ConfigError(f"{self.describe()} cannot create task tables; create `{layout.table}` yourself")

    def add_tasks(self, layout: TaskLayout, rows: Sequence[dict]) -> int:
        """Insert task rows (keys are column names, each checked) as pending; return how many."""
        raise ConfigError(f"{self.describe()} cannot add tasks; insert them into `{layout.table}` yourself")

    def loading_tasks(self, layout: TaskLayout, column: str, names: Sequence[str],
                      check_duplicates: bool = True) -> ContextManager[TaskLoad]:
        """For `batchd tasks`: a TaskLoad (backends/task_load.py) of the task table, whose URLs are in `column`
        and whose rows name the columns `names` (ConfigError naming the first the table lacks). What it adds
        lands when the context ends, nothing of it when an exception leaves it. `check_duplicates` False:
        known() is never asked."""
        raise ConfigError(f"{self.describe()} cannot add tasks; insert them into `{layout.table}` yourself")

    def missing_state_index(self, layout: TaskLayout) -> Optional[str]:
        """The statement that would index the task table's state column when no index leads with it
        (`batchd check` reports it, open() warns); None when indexed or when the backend cannot tell."""
        return None

    def item_columns(self, table: str, setting: str = "the item table") -> Optional[frozenset]:
        """The columns of a COLUMNS_ITEM_KIND table, so a bad item key is named before a flush fails;
        None when the backend cannot tell (every key is then tried). ConfigError naming `setting` when
        the table does not exist."""
        return None

    def unique_keys(self, table: str) -> Optional[list]:
        """The column sets (frozensets) of the table's primary key and UNIQUE indexes, which an upsert
        on those columns needs; None when the backend cannot tell (or needs none)."""
        return None

    def close(self) -> None:
        """Release connections; the store may be used again afterwards (it reconnects)."""


def store_items(store: BatchStore, destination, rows: Sequence[ItemRow]) -> None:
    """`rows` into `destination` (an ItemDestination): the key goes along only when there is one, so that a
    store of the user's written before Item classes (a save_items without `key`) still takes dicts."""
    if destination.key:
        store.save_items(destination.table, destination.kind, rows, key=destination.key)
    else:
        store.save_items(destination.table, destination.kind, rows)

