"""The records batchd passes between its parts: a task table's layout, a batch record, progress counts,
an item on its way to storage, a lease. Plain data; the ports (batchd/backends/ports.py) move them about.
"""
import hashlib
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Optional

from .codec import dumps, loads
from .config import check_identifier

REPARSE_MODE = "reparse"        # BatchOpening.mode of a batch that replays another's archive (`batchd reparse`)
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
    host_field: Optional[str] = None   # BATCH_TASK_HOST_FIELD: claims interleave hosts; None: id order

    def __post_init__(self):
        check_identifier(self.table, "__task_table__")
        for name in ("id_field", "state_field", "time_field"):
            check_identifier(getattr(self, name), "BATCH_TASK_" + name.upper())
        if self.host_field is not None:
            check_identifier(self.host_field, "BATCH_TASK_HOST_FIELD")
        check_identifier(self.record_table, "the batch record table (__task_table__ + '_batch_record')")
        check_identifier(self.failure_table, "the failure table (__task_table__ + '_failure')")
        check_identifier(self.page_table, "the page table (__task_table__ + '_page')")
        check_identifier(self.revisit_table, "the revisit table (__task_table__ + '_revisit')")
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
    def failure_table(self) -> str:
        return self.table + "_failure"

    @property
    def page_table(self) -> str:
        """What a re-crawl remembers of each URL fetched (PageRecord): batchd's own, beside the task table."""
        return self.table + "_page"

    @property
    def revisit_table(self) -> str:
        """When each task is due again (Revisit): batchd's own, beside the task table."""
        return self.table + "_revisit"

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
    # While the batch's reset walks the task table: JSON [the last id it has reset, rows walked so far]
    # ([null, 0] before the first chunk). None once every row has been reset. Kept in the record, so a
    # master that takes over finishes the walk where the last one stopped.
    reset_cursor: Optional[str] = None
    # The batch's counters (batchd/settle/batch_stats.py) as JSON {name: n}, written when the batch closes; None before.
    stats: Optional[str] = None
    # When the record was last written (the store's clock): a finished batch's is its close.
    update_time: Optional[datetime] = None
    # How the batch opened (BatchOpening as JSON); None: a full batch that reset every task, as batchd always did.
    opening: Optional[str] = None
    # The spider it opened with (SpiderPrint as JSON); None: not known (an older batchd, or a store of the user's).
    spider_print: Optional[str] = None
    # How it ended, written at its close before is_done: clean, flagged (its data, batchd/quality/) or failed
    # (some task); None while open, and for a batch closed by an older batchd or by `open-batch --force`.
    outcome: Optional[str] = None
    # (Its quality figures and flags, quality/verdict.py, are read on their own: BatchStore.batch_quality. A batch
    # of 10,000 hosts keeps MBs there, which no one who reads the record for its state should fetch.)

    @property
    def how_opened(self) -> "BatchOpening":
        return BatchOpening.from_json(self.opening)

    @property
    def calendar_date(self) -> datetime:
        """The date the calendar counts the next batch from: its own opening, or for a reparse (which crawls
        nothing) the date of the crawl it followed, kept in its opening."""
        kept = self.how_opened.calendar_date
        return datetime.fromisoformat(kept) if kept else self.batch_date

    @property
    def spider(self) -> Optional["SpiderPrint"]:
        return SpiderPrint.from_json(self.spider_print)

    @property
    def counters(self) -> dict:
        return loads(self.stats) if self.stats else {}

    @property
    def resetting(self) -> bool:
        return self.reset_cursor is not None

    @property
    def reset_position(self) -> tuple:
        """(the id after which the reset goes on, None from the start; the rows it has walked)."""
        if not self.reset_cursor:
            return None, 0
        after, walked = loads(self.reset_cursor)
        return after, walked


@dataclass(frozen=True)
class BatchOpening:
    """How a batch opened: its BATCH_MODE, whether a full batch reset the failed tasks, and the rows its
    opening walk found settled and left so (`kept_done`, `kept_failed`: none in a full batch that resets
    everything). They are not the batch's: its figures at the close are the table's counts less these.
    `opened_with`: the tasks it opened with, once the walk is over."""

    mode: str = "full"
    reset_failed: bool = True
    kept_done: int = 0
    kept_failed: int = 0
    opened_with: Optional[int] = None
    due_before: Optional[float] = None     # a due batch: tasks whose revisit is due by then (epoch s) are reset
    # A reparse (mode "reparse", `batchd reparse`): the batch whose archive it replays, the tasks it takes (all;
    # those whose BATCH_TASK_HOST_FIELD names `host`; the one `task`), whether it fetches what the archive lacks,
    # and the date of the last crawl, from which the calendar counts on (a reparse is not a crawl).
    reparse_of: Optional[int] = None
    host: Optional[str] = None
    task: Optional[str] = None
    fetch_missing: bool = False
    calendar_date: Optional[str] = None

    @property
    def is_reparse(self) -> bool:
        return self.mode == REPARSE_MODE

    @property
    def is_default(self) -> bool:
        """A full batch resetting everything: nothing to keep in the record (old records read as this)."""
        return self.mode == "full" and self.reset_failed

    @property
    def kept(self) -> int:
        return self.kept_done + self.kept_failed

    def counted(self, done: int, failed: int) -> "BatchOpening":
        """This opening with `done` and `failed` more rows found settled and left so."""
        return replace(self, kept_done=self.kept_done + done, kept_failed=self.kept_failed + failed)

    def to_json(self) -> str:
        kept = asdict(self)
        for name in ("due_before", "reparse_of", "host", "task", "calendar_date"):   # a due batch's, a reparse's
            if kept[name] is None:
                del kept[name]
        if not self.fetch_missing:
            del kept["fetch_missing"]
        return dumps(kept)

    @classmethod
    def from_json(cls, text: Optional[str]) -> "BatchOpening":
        return cls(**loads(text)) if text else cls()


@dataclass(frozen=True)
class SpiderPrint:
    """The fingerprint of the spider a batch opened with (recrawl/spider_print.py makes it): `code`, a digest of
    the spider's source; `settings`, of the settings that shape what it parses. `changed`: which of the two
    differ from the batch before's ("code", "settings"); `forced`: `batchd run --refetch` asked. Either way the
    batch trusts no validator: it fetches every page whole and runs every callback (docs/recrawl.md)."""

    code: str
    settings: str
    changed: tuple = ()
    forced: bool = False

    @property
    def refetches(self) -> bool:
        return bool(self.changed) or self.forced

    @property
    def digest(self) -> str:
        """Code and settings in one, as a page record keeps the spider that parsed it (PageRecord.parsed_by)."""
        return hashlib.sha1(f"{self.code} {self.settings}".encode()).hexdigest()

    def against(self, before: Optional["SpiderPrint"], forced: bool) -> "SpiderPrint":
        """This print as a batch opening after one with `before` keeps it (None: no batch before, or one whose
        spider is not known: nothing to say changed)."""
        changed = () if before is None else tuple(part for part in ("code", "settings")
                                                  if getattr(self, part) != getattr(before, part))
        return replace(self, changed=changed, forced=forced)

    def to_json(self) -> str:
        return dumps(asdict(self))

    @classmethod
    def from_json(cls, text: Optional[str]) -> Optional["SpiderPrint"]:
        if not text:
            return None
        kept = loads(text)
        return cls(kept["code"], kept["settings"], tuple(kept.get("changed", ())), bool(kept.get("forced")))


def reset_cursor(after, walked: int) -> str:
    """The record's reset_cursor for a reset that has walked `walked` rows, up to id `after`."""
    return dumps([after, walked])


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

    @classmethod
    def from_counters(cls, total: int, done: int, failed: int, in_flight: int) -> "Progress":
        """Progress as the master keeps it without counting rows: the batch's total, the settled tasks its
        tally counted, and the tasks in the queue or under a lease as processing. Rows added mid-batch
        raise the total once they are counted."""
        total = max(total, done + failed + in_flight)
        return cls(total=total, done=done, failed=failed, processing=in_flight,
                   pending=total - done - failed - in_flight)


@dataclass(frozen=True)
class ItemDestination:
    """Where an item is stored: a table, its kind, and the columns it is upserted on (empty: any unique
    key of the table for a column table, batchd's own key for the default item table)."""

    table: str
    kind: str
    key: tuple = ()


@dataclass
class ItemRow:
    """One yielded item on its way to storage, keyed so that a re-run upserts instead of duplicating."""

    batch_id: int
    task_id: object
    request_seq: int
    item_seq: int
    data: dict = field(default_factory=dict)
    # `data` as the default item table's JSON document, made once where the item was checked (the worker's
    # pipeline); None: the store makes it (codec.plain_json).
    document: Optional[str] = field(default=None, compare=False, repr=False)


# What a failure record keeps of each text, at most (characters).
URL_MOST, REASON_MOST, CLASS_MOST, HOST_MOST = 2048, 500, 128, 255
# What a page record keeps, at most (characters): its URL, and each text of it (the page table's columns).
PAGE_URL_MOST = 2000
PAGE_TEXT_MOST = {"etag": 1024, "last_modified": 64, "vary": 1024, "signature": 40}


@dataclass
class TaskFailure:
    """Why a task failed in a batch: a row of `<task_table>_failure`, the latest failure of the task in that
    batch (batchd/settle/failures.py makes them). `status`: the HTTP status of the response it failed with;
    `error_class`: the exception's class; `attempts`: the failing request's attempts, or the task's leases;
    `time`: the store's clock when it was written (None until then)."""

    task_id: object
    batch_id: int
    reason: str
    url: Optional[str] = None
    status: Optional[int] = None
    error_class: Optional[str] = None
    attempts: Optional[int] = None
    host: str = ""
    time: Optional[datetime] = None


@dataclass(frozen=True)
class PageRecord:
    """What a re-crawl remembers of one URL a task fetched whole (a row of `<task_table>_page`, keyed by
    the URL): the validators of its last 2xx (`etag`, `last_modified`: the headers as sent), `vary`: the
    request headers its Vary named, as sent then (JSON {lower-case name: value}; "*": Vary: *, never
    revalidated), `signature`: of what its request yielded (or of its body), `whole_at`: when it was
    last fetched whole (epoch seconds), `seen_in` / `changed_in`: the batch that last fetched it and the
    last one that found it new or changed (what a consumer looks for), `redirected`: its last 2xx came
    through a redirect (its validators belong to where it landed: it is fetched whole), `parsed_by`: the
    SpiderPrint.digest of the spider whose callback last ran on it (None: not known, kept by an older
    batchd): another spider does not trust its validators (recrawl/page_memory.py)."""

    url: str
    task_id: object
    etag: Optional[str] = None
    last_modified: Optional[str] = None
    vary: Optional[str] = None
    signature: Optional[str] = None
    whole_at: float = 0.0
    seen_in: int = 0
    changed_in: int = 0
    redirected: bool = False
    parsed_by: Optional[str] = None

    def fitted(self) -> Optional["PageRecord"]:
        """This record as every store keeps it: a text longer than its column (PAGE_TEXT_MOST) as None, so
        that an upsert never fails on it (an etag or vary so: the page is fetched whole, not revalidated);
        None when its URL is longer than PAGE_URL_MOST: such a page is not kept, and found new at each crawl."""
        if len(self.url) > PAGE_URL_MOST:
            return None
        cut: dict = {name: None for name, most in PAGE_TEXT_MOST.items()
               if getattr(self, name) is not None and len(getattr(self, name)) > most}
        return replace(self, **cut) if cut else self


@dataclass(frozen=True)
class Revisit:
    """When a task is due again (a row of `<task_table>_revisit`, keyed by the task): `interval` seconds
    after its last crawl, grown when it was unchanged and shrunk when it changed (batchd/recrawl/);
    `verdict`: what its last crawl found (new, changed, unchanged, gone), in batch `batch_id`."""

    task_id: object
    interval: float
    next_due: float
    verdict: str
    batch_id: int


@dataclass(frozen=True)
class FailureQuery:
    """Which failure records of a batch: with `reason`, those whose reason holds it (any case); with
    `still_failed`, those whose task is failed now (not requeued since)."""

    batch_id: int
    reason: Optional[str] = None
    still_failed: bool = True


@dataclass(frozen=True)
class FailureGroup:
    """Failures that share an HTTP status and an exception class (or, with neither, a reason): `sample` is
    one of their reasons."""

    status: Optional[int]
    error_class: Optional[str]
    sample: str
    count: int


@dataclass
class Lease:
    """A task held by one worker: `token` is this lease's own, so a write-back counts only while the
    lease is still the holder's (see LeaseQueue.release)."""

    task_id: object
    batch_id: int
    task: dict
    token: str
    queue_left: int = -1      # tasks left in the pending list right after this lease

    @property
    def key(self) -> str:
        return task_key(self.task_id)

    @classmethod
    def of_payload(cls, payload: dict, token: str, queue_left: int) -> "Lease":
        """The lease of a queued task: its payload as the queue holds it (codec.encode_task)."""
        return cls(task_id=payload["id"], batch_id=payload["batch"], task=payload["task"], token=token,
                   queue_left=queue_left)


def task_key(task_id) -> str:
    """Ids are kept as strings in queues; the payload carries the typed id."""
    return str(task_id)


def url_key(url: str) -> str:
    """The page table's key of a URL: its sha1 in hex (a URL may run to thousands of characters)."""
    return hashlib.sha1(url.encode("utf-8")).hexdigest()
