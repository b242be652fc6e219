"""The BatchStore contract: where tasks, batch records and items live.

A backend subclasses `BatchStore` and implements every abstract method with the
guarantee written in its docstring. batchd ships three: `MysqlBatchStore` (the
default), `MemoryBatchStore` (one process, the items end in `store.items`) and
`SqliteBatchStore` (one host, no server).

Ids: a task id is whatever the task table's primary key holds (int or str). States
are `batchd.task.TaskState`; every state change is a `batchd.task.Move`, applied as one
compare-and-set whose moved-row count is returned.
"""
import abc
from dataclasses import dataclass, field
from datetime import datetime
from typing import Iterator, Optional, Sequence

from ..config import check_identifier
from ..errors import ConfigError
from ..task import Move

DEFAULT_ITEM_KIND = "default"   # <task_table>_item: one JSON document per item
COLUMNS_ITEM_KIND = "columns"   # the spider's __item_table__: item keys are columns


@dataclass(frozen=True)
class TaskLayout:
    """Names of the user's task table and its columns, validated as SQL identifiers."""

    table: str
    id_field: str = "id"
    state_field: str = "batch_status"
    time_field: str = "update_time"
    item_table: Optional[str] = None   # the spider's __item_table__; None: the default item table

    def __post_init__(self):
        check_identifier(self.table, "__task_table__")
        for name in ("id_field", "state_field", "time_field"):
            check_identifier(getattr(self, name), "BATCH_TASK_" + name.upper())
        check_identifier(self.record_table, "the batch record table (__task_table__ + '_batch_record')")
        if self.item_table is not None:
            check_identifier(self.item_table, "__item_table__")
        else:
            check_identifier(self.default_item_table, "the item table (__task_table__ + '_item')")

    @property
    def record_table(self) -> str:
        return self.table + "_batch_record"

    @property
    def default_item_table(self) -> str:
        return self.table + "_item"

    @property
    def item_destination(self) -> tuple:
        """(table, kind) where this spider's items are stored."""
        if self.item_table:
            return self.item_table, COLUMNS_ITEM_KIND
        return self.default_item_table, DEFAULT_ITEM_KIND


@dataclass
class BatchRecord:
    id: int
    batch_date: datetime
    total_count: int = 0
    done_count: int = 0
    fail_count: int = 0
    interval: int = 0
    interval_unit: str = "day"
    is_done: bool = False


@dataclass(frozen=True)
class Progress:
    total: int
    done: int
    failed: int
    pending: int
    processing: int

    @property
    def settled(self) -> int:
        return self.done + self.failed

    @property
    def finished(self) -> bool:
        return self.settled >= self.total


@dataclass
class ItemRow:
    """One yielded item on its way to storage, keyed so that a re-run upserts instead of duplicating."""

    batch_id: int
    task_id: object
    request_seq: int
    item_seq: int
    data: dict = field(default_factory=dict)


class BatchStore(abc.ABC):
    """The contract a storage backend fulfils. Thread-safe: workers call it from several threads."""

    layout: Optional[TaskLayout] = None
    runs_in_process = False   # True when no other process can reach the store: start_monitor() runs workers too
    backend_name = "memory"   # names the backend in outage lines and STATUS= ("MySQL", "SQLite")

    def embedded_queue(self, namespace: str, settings):
        """A queue living beside the data, for stores no Redis should serve; None means use Redis."""
        return None

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

    @abc.abstractmethod
    def last_batch(self) -> Optional[BatchRecord]:
        """The most recent batch record, or None before the first batch."""

    @abc.abstractmethod
    def reset_tasks(self, chunk_size: int) -> Iterator[int]:
        """Move every task to PENDING, `chunk_size` rows per short transaction, yielding the number
        reset by each chunk. Idempotent: running it again after an interruption finishes the job."""

    @abc.abstractmethod
    def insert_batch(self, interval: int, interval_unit: str, total: int) -> BatchRecord:
        """Open a batch record dated now(); called only once the reset has finished."""

    @abc.abstractmethod
    def update_batch(self, batch_id: int, progress: Progress, is_done: bool) -> None:
        """Write the counts of `progress` (and is_done) into the batch record."""

    @abc.abstractmethod
    def claim(self, limit: int) -> list:
        """Move at most `limit` PENDING tasks to PROCESSING (lowest ids first) and return their rows as
        dicts. A row returned is one this call moved: no two claims ever return the same row."""

    @abc.abstractmethod
    def move(self, move: Move, ids: Sequence, older_than: Optional[float] = None) -> int:
        """Apply `move` to the rows among `ids` whose state is one of its sources (and, with older_than,
        whose time column is older than that many seconds by now()); return how many rows moved."""

    @abc.abstractmethod
    def stale_processing(self, older_than: float, limit: int) -> list:
        """Ids of up to `limit` PROCESSING tasks whose time column is older than `older_than` seconds."""

    @abc.abstractmethod
    def progress(self) -> Progress:
        """Counts of the task table by state; total is every row."""

    @abc.abstractmethod
    def unsettled_count(self) -> int:
        """PENDING + PROCESSING rows: cheap, asked often to see whether a batch has finished."""

    @abc.abstractmethod
    def save_items(self, table: str, kind: str, rows: Sequence[ItemRow]) -> None:
        """Store the rows durably in one transaction, as upserts (a row with the same key replaces the
        old one). `kind` is DEFAULT_ITEM_KIND or COLUMNS_ITEM_KIND. Raise on failure: nothing of the
        batch counts as stored unless this returns."""

    def create_task_table(self, layout: TaskLayout) -> bool:
        """For `batchd tasks` and the demo: make the seed's task table (primary key, `url`, state and
        time columns, the state indexed) when it does not exist. True when it was made. The table
        stays the user's: batchd never alters one that exists."""
        raise ConfigError(f"{self.describe()} cannot create task tables; create `{layout.table}` yourself")

    def add_tasks(self, layout: TaskLayout, rows: Sequence[dict]) -> int:
        """Insert task rows (keys are column names, each checked) as pending; return how many."""
        raise ConfigError(f"{self.describe()} cannot add tasks; insert them into `{layout.table}` yourself")

    def missing_state_index(self, layout: TaskLayout) -> Optional[str]:
        """The statement that would index the task table's state column when no index leads with it
        (`batchd check` reports it, open() warns); None when indexed or when the backend cannot tell."""
        return None

    def item_columns(self, table: str) -> Optional[frozenset]:
        """The columns of a COLUMNS_ITEM_KIND table, so a bad item key is named before a flush fails;
        None when the backend cannot tell (every key is then tried)."""
        return None

    def close(self) -> None:
        """Release connections; the store may be used again afterwards (it reconnects)."""
