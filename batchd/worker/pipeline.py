"""Items on their way to storage, and the write-back gate that waits for them.

One thread per worker process (the lander, under the thread guard) does both jobs, each turn:
1. flush the buffered items as one batch (ITEM_FLUSH_SIZE reached, ITEM_FLUSH_INTERVAL passed,
   or a thread short of ledger slots asked for it), one group per table (an Item class's own, or the
   spider's item table for dicts), each group landing or dumped on its own:
   - an outage is waited out with backoff, waking the moment the backend is back, for up to
     ITEM_FLUSH_GIVE_UP seconds; then the items go to FAILED_ITEMS_PATH, which counts as
     landed, and the lander replays that file by itself once the database takes items again;
   - a batch the database refuses is split until the item(s) at fault are found: the others
     land, and each refused item fails its task, named in one line with the key and the reason;
2. take the landed counts off the ledger;
3. write back every settled task: failed (at once, its failure record written just before: one
   upsert for the turn, batchd/settle/failures.py), or done / back to pending (its requests ended without
   update_task) once none of its items is left unflushed. The worker's batch counters are
   flushed first (batchd/settle/batch_stats.py: a batch's counts reach the backend before its last task settles).
   With ARCHIVE, the records written so far are fsynced once for the turn before any task is written done
   (batchd/archive/writer.py: every record of a task was appended before its requests ended).
   The leases are renewed, then what re-crawls remember of the tasks' pages kept (recrawl/page_memory.py),
   then the tasks written, then the leases released, then the tasks added to the
   batch's tally: a task whose lease was reclaimed meanwhile is not written (its new holder owns it now),
   a task is never without its lease while its row still says processing (the master would take it for
   lost and crawl it again), and never counted settled while still in the queue (settle/settler.py).
Items stored and dumped are counted ("item/stored", "item/dumped") per batch of their tasks, and the
counters are flushed every STATS_FLUSH_INTERVAL besides.
Items are checked as they are buffered: a value the table cannot store fails its task (BadItem); an Item
whose required field has no value is dropped, told (InvalidItems) and counted ("item/invalid"); an Item
class is checked against its table the first time it comes (ConfigError stops the worker).
A dump raises the items_dumped alert of each batch it holds items of (batchd/alerts/alerts.py).
A write-back that meets an outage is kept and tried again, never dropped. A warm stop does not
wait out an outage: what is left is given back through the leases, never marked done.
"""
import collections
import logging
import re
import threading
import time
from collections.abc import Mapping
from typing import Any, Callable, Optional

from ..settle import failures
from ..settle.settler import Settler
from ..recrawl.page_memory import PageMemory
from ..recrawl.pages import settled_unchanged
from ..errors import BackendUnavailable, ConfigError
from ..alerts.alerts import Alerts
from ..archive.writer import ArchiveWriter
from .dumps import FailedItemsFile
from ..item import Item
from .item_checks import InvalidItems, check_batch_column, check_item, check_item_table, item_document
from .task_run import CheckedItem, TaskRun, count_nothing
from ..service.lifecycle import Backoff
from ..model import COLUMNS_ITEM_KIND, ItemDestination, ItemRow, TaskFailure
from ..service.outages import OutageWatch, retry_through_outages
from ..backends.ports import WorkerPorts
from ..backends.store import store_items
from ..settle.batch_stats import StatsFlusher
from ..task import TaskState, settling_move
from ..service.systemd import failure_line
from ..service.threads import check_in, guard, start_thread

log = logging.getLogger("batchd.pipeline")

IDLE_CHECK_IN = 1.0       # the lander's longest wait for work: it checks in at least this often
REPLAY_DISK_RETRY = 60.0  # a replay the disk refused is tried again this much later
ARCHIVE_RETRY = 1.0       # s: an fsync of the archive that failed is tried again this much later
COLUMN_IN_MESSAGE = re.compile(r"""(?:column|field)\s+['"]?((?:`[^`]+`\.?)+|[A-Za-z0-9_$]+)""", re.IGNORECASE)


class Abandoned(Exception):
    """The lander gave up mid-turn (a stop met an outage): what it held stays for the leases."""


class Pipeline:
    def __init__(self, ports: WorkerPorts, ledger, settings, destination: ItemDestination, watch: OutageWatch,
                 settler: Settler, failed_items: FailedItemsFile, on_written=lambda runs: None,
                 count: Callable[[str, int, Any], None] = count_nothing, stats_flusher: Optional[StatsFlusher] = None,
                 alerts: Optional[Alerts] = None, memory: Optional[PageMemory] = None,
                 archive: Optional[ArchiveWriter] = None):
        """`destination`: where a spider's dicts go; `settler`: the one settle path, counting in `ledger`;
        `failed_items`: FAILED_ITEMS_PATH; `on_written(runs)` hears each write-back; `count(name, n, batch
        id)` the pipeline's figures; `memory`: what re-crawls remember of pages (None: nothing); `archive`: where
        the responses are kept (None: ARCHIVE off), made durable before a task is written done."""
        self.store, self.leases, self.tally = ports.store, ports.leases, ports.tally
        self.memory, self.archive = memory, archive
        self.ledger, self.watch, self.alerts, self.stats_flusher = ledger, watch, alerts, stats_flusher
        self.batch_column: Optional[str] = settings.ITEM_BATCH_COLUMN
        self._batch_column = frozenset([self.batch_column] if self.batch_column else [])
        self.flush_size = settings.ITEM_FLUSH_SIZE
        self.flush_interval = settings.ITEM_FLUSH_INTERVAL
        self.give_up = settings.ITEM_FLUSH_GIVE_UP
        self.lease_seconds = settings.BATCH_LOST_TASK_STALE
        self.failed_items = failed_items
        self.spider_destination = destination
        self.on_written, self.count = on_written, count
        self.invalid = InvalidItems()
        self._checked_classes: set = set()      # the Item classes found fit for their tables
        self._cond = threading.Condition()
        self._buffer: list = []            # (run, ItemRow, ItemDestination)
        # Runs ready to write, in the order they came (a dict: the gate asks whether a run is in it for each
        # task a flush lands, and a list's scan made each turn quadratic in the tasks it settled).
        self._writebacks: dict = {}
        self._runs: set = set()            # runs not yet written back, for lease renewal
        self._flush_now = False
        self._stopping = False
        self._abandon = False
        self._no_waiting = threading.Event()   # set by stop(): an outage is no longer waited out
        self._replay_due = False               # items were dumped: replay them once the database is back
        self._disk_refused = False             # FAILED_ITEMS_PATH refused the last dump (said once)
        self._archive_refused = False          # the archive's fsync failed last time (said once)
        self._replay_after = 0.0
        self._flush_outage_since: Optional[float] = None   # the flush's groups share one ITEM_FLUSH_GIVE_UP
        self._thread: Optional[threading.Thread] = None
        self._columns: Optional[frozenset] = None    # of a columns item table, read at the start
        self.settler = settler

    # -- called by the fetch threads
    def track(self, run: TaskRun) -> None:
        with self._cond:
            self._runs.add(run)

    def forget(self, run: TaskRun) -> None:
        """A task handed back to the queue before it sent anything: no longer this worker's to write."""
        with self._cond:
            self._runs.discard(run)
            if run.slot >= 0:
                self.ledger.release_slot(run.slot)
                run.slot = -1

    def add_item(self, run: TaskRun, request_seq: int, item_seq: int, item: Mapping) -> None:
        """Buffer a copy of an item (a dict, or an Item); BadItem (nothing buffered) when its destination
        could not store it. An Item without a required field is dropped and counted, its task unharmed."""
        checked = self.check_item(run, item)
        if checked is not None:
            self.buffer_item(run, request_seq, item_seq, checked)

    def check_item(self, run: TaskRun, item: Mapping) -> Optional[CheckedItem]:
        """add_item's checks, where the item is yielded, for an item the run holds a while (its page judged, or
        compared with the page's items before): BadItem or ConfigError as add_item; None for an Item without a
        required field (dropped and counted)."""
        destination, columns = self.spider_destination, self._columns
        if isinstance(item, Item):
            missing = item.missing_required()
            if missing is not None:
                self.invalid.report(run.task_id, type(item).__name__, missing, present=missing in item)
                self.count("item/invalid", 1, run.lease.batch_id)
                return None
            destination = type(item).destination(self.spider_destination)
            if destination is not self.spider_destination:
                self._check_class(type(item))
                columns = frozenset(type(item).__fields__) | self._batch_column  # (checked to be the table's)
        data = dict(item)
        if columns is None:     # a JSON document: checked as it is made, here, not again in the flush
            return CheckedItem(data, item_document(data), destination)
        if self.batch_column is not None:     # ITEM_BATCH_COLUMN: the batch that wrote the row (batchd export)
            data[self.batch_column] = run.lease.batch_id
        check_item(data, columns, destination.table)
        return CheckedItem(data, None, destination)

    def buffer_item(self, run: TaskRun, request_seq: int, item_seq: int, checked: CheckedItem) -> None:
        """Buffer an item check_item passed."""
        data, document, destination = checked
        row = ItemRow(batch_id=run.lease.batch_id, task_id=run.task_id, request_seq=request_seq,
                      item_seq=item_seq, data=data, document=document)
        self.ledger.add(run.slot, 1)
        with self._cond:
            self._buffer.append((run, row, destination))
            if len(self._buffer) >= self.flush_size:
                self._cond.notify_all()

    def _check_class(self, item_class: type) -> None:
        """The first item of a class with a table of its own: check the table (an outage is waited out, a
        stop cuts the wait short and leaves the check to the next item); ConfigError if unfit. Threads that
        meet a new class together may each check it: a few reads, where a lock would hold them unseen by
        the thread guard for as long as an outage lasts."""
        if item_class not in self._checked_classes:
            retry_through_outages(lambda: self._pass_class(item_class), self.watch, self._no_waiting)

    def _pass_class(self, item_class: type) -> None:
        check_item_table(self.store, item_class, self.batch_column)
        self._checked_classes.add(item_class)

    def record_outcome(self, run: TaskRun, ok: bool, failure: Optional[TaskFailure] = None) -> None:
        """update_task() during processing: failure (and why: `failure`, else the spider's word) is written at
        once, done waits for the gate."""
        with self._cond:
            if run.outcome == TaskState.FAILED or run.settled:
                return
            run.outcome = TaskState.DONE if ok else TaskState.FAILED
            if not ok:
                run.failure = failure or failures.marked(run.task_id, run.lease.batch_id)
                self._queue_writeback(run)

    def finish_requests(self, run: TaskRun) -> None:
        """The task's last request has ended; settle it now if nothing holds it back."""
        with self._cond:
            run.requests_finished = True
            if run.outcome is None and settled_unchanged(run.visits):
                run.outcome = TaskState.DONE       # a page found unchanged: its callback was not called
            if run.outcome is None:
                log.warning("task %s: its requests ended without update_task(); it goes back to pending at "
                            "once (one of its BATCH_TASK_MAX_ATTEMPTS)", run.task_id)
                run.outcome = TaskState.PENDING
            if run.outcome != TaskState.FAILED:
                self._settle_if_landed(run)
            self._free_slot_if_empty(run)

    def put_back(self, run: TaskRun) -> None:
        """Its page was a block page, or its batch's record could not be read (task_run.py): the task goes back to
        pending once its requests end, whatever the spider said of it (a failure is written at once: it stays)."""
        with self._cond:
            if run.outcome != TaskState.FAILED and not run.settled:
                run.outcome = TaskState.PENDING

    def ask_flush(self) -> None:
        with self._cond:
            self._flush_now = True
            self._cond.notify_all()

    def flush_when_idle(self) -> None:
        """The worker has no task in hand and none to lease: what is buffered need not wait for
        ITEM_FLUSH_INTERVAL (at a batch's end, its last tasks are written back at once)."""
        with self._cond:
            if self._buffer and not self._flush_now:
                self._flush_now = True
                self._cond.notify_all()

    def held_leases(self) -> list:
        """The leases to renew: every task not yet written back, but those TASK_TIMEOUT failed."""
        with self._cond:
            return [run.lease for run in self._runs if not run.timed_out]

    def in_flight(self) -> int:
        with self._cond:
            return len(self._runs) + len(self._buffer)

    def unwritten_leases(self) -> list:
        """After a stop: the leases of tasks that were not written back (for give_back)."""
        with self._cond:
            return [run.lease for run in self._runs if not run.written and not run.lease_lost]

    # -- the lander thread
    def start(self) -> None:
        """Land from now on (the store is open: a columns item table's columns are read here)."""
        if self.spider_destination.kind == COLUMNS_ITEM_KIND:
            self._columns = self.store.item_columns(self.spider_destination.table)
            check_batch_column(self._columns, self.batch_column, self.spider_destination.table)
        self._thread = start_thread(self._land_loop, "batchd-lander")

    def stop(self, timeout: float, abandon: bool = False) -> bool:
        """Flush and write back what is left (warm), or leave it to the leases (abandon = cold).
        True when everything landed and was written in time."""
        self._no_waiting.set()
        with self._cond:
            self._stopping, self._abandon = True, abandon
            self._cond.notify_all()
        if self._thread:
            self._thread.join(timeout)
            if self._thread.is_alive():
                with self._cond:
                    self._abandon = True
                    self._cond.notify_all()
                self._thread.join(5)
        with self._cond:
            left = len(self._buffer) + len(self._writebacks)
        self.invalid.summary()
        if self.archive is not None:
            self.archive.close()
        if left:
            log.warning("stopped with %d items / write-backs not landed; their tasks are not marked done and "
                        "come back through their leases", left)
        return left == 0

    def _land_loop(self) -> None:
        last_flush, backoff = time.monotonic(), Backoff()
        while True:
            with self._cond:
                wait = min(IDLE_CHECK_IN, self._time_to_flush(last_flush))
                check_in(within=wait + 1)
                self._cond.wait_for(lambda: self._has_work(last_flush), timeout=wait)
                if self._abandon or (self._stopping and not self._buffer and not self._writebacks):
                    return
                batch = self._take_batch(last_flush)
            check_in()
            if batch is not None:
                last_flush = time.monotonic()
            try:
                self._turn(batch, backoff)
            except Abandoned:
                return

    def _turn(self, batch: Optional[list], backoff: Backoff) -> None:
        """Land a batch, then write back what is settled; an outage of the write-backs is waited out."""
        if batch:
            self._land(batch)
        try:
            if self._write_ready():
                backoff.reset()
            self._replay_if_due()
            if self.stats_flusher is not None:
                self.stats_flusher.flush_if_due()
        except BackendUnavailable as e:     # the write-backs stay queued for the next turn
            self.watch.failed(e)
            if self.watch.wait(backoff.next_delay(), e.backend, self._no_waiting):
                raise Abandoned() from None

    def _has_work(self, last_flush: float) -> bool:
        return bool(self._abandon or self._stopping or self._writebacks or self._flush_now
                    or len(self._buffer) >= self.flush_size
                    or (self._buffer and self._time_to_flush(last_flush) <= 0))

    def _time_to_flush(self, last_flush: float) -> float:
        return max(0.01, self.flush_interval - (time.monotonic() - last_flush))

    def _take_batch(self, last_flush: float) -> Optional[list]:
        """The items to flush this turn (called with the lock held); None when it is not time yet."""
        due = self._flush_now or self._stopping or len(self._buffer) >= self.flush_size \
            or time.monotonic() - last_flush >= self.flush_interval
        if not (self._buffer and due):
            return None
        batch = self._buffer[:self.flush_size]
        del self._buffer[:len(batch)]
        self._flush_now = self._flush_now and bool(self._buffer)
        return batch

    def _put_back(self, destination: ItemDestination, entries: list) -> None:
        with self._cond:
            self._buffer[:0] = [(run, row, destination) for run, row in entries]

    # -- landing a batch
    def _land(self, batch: list) -> None:
        """Store a batch (or dump it), one group per destination; only what landed is taken off the
        ledger. A stop that cuts a group short puts it back with the groups not tried yet."""
        self._flush_outage_since = None
        groups: dict = {}
        for run, row, destination in batch:
            groups.setdefault(destination, []).append((run, row))
        todo = list(groups.items())
        while todo:
            destination, entries = todo[0]
            try:
                landed, refused = self._store_through_outages(destination, entries)
            except Abandoned:
                for later, rest in todo[1:]:
                    self._put_back(later, rest)
                raise
            del todo[0]
            self._take_off_ledger(destination, landed, refused)

    def _take_off_ledger(self, destination: ItemDestination, landed: list, refused: list) -> None:
        per_run: dict = {}
        for run, _ in landed:
            per_run[run] = per_run.get(run, 0) + 1
        with self._cond:
            for (run, row), error in refused:
                self._refuse(run, row, destination.table, error)
            for run, n in per_run.items():
                self.ledger.sub(run.slot, n)
                self.ledger.count(items=n)
                if run.requests_finished and run.outcome in (TaskState.DONE, TaskState.PENDING):
                    self._settle_if_landed(run)
                self._free_slot_if_empty(run)

    def _store_through_outages(self, destination: ItemDestination, batch: list) -> tuple:
        """(entries landed, (entry, the database's error) refused): stored, or, once an outage outlasts ITEM_FLUSH_GIVE_UP,
        appended to FAILED_ITEMS_PATH: whichever of the database and the disk takes them first (a disk that
        refuses too leaves the database tried again, with backoff). Abandoned when a stop cuts the wait
        short (the batch is put back: its tasks are not written)."""
        backoff = Backoff()
        while True:
            try:
                landed = self._save_splitting(destination, batch)
            except BackendUnavailable as e:
                self.watch.failed(e)
                self._flush_outage_since = self._flush_outage_since or time.monotonic()
                if self._no_waiting.is_set():
                    self._give_up_on(destination, batch)
                if time.monotonic() - self._flush_outage_since >= self.give_up and self._dumped(
                        destination, batch, f"{e} (for more than ITEM_FLUSH_GIVE_UP={self.give_up:g} s)"):
                    self._count_items("item/dumped", batch)
                    return batch, []
                if self.watch.wait(backoff.next_delay(), e.backend, self._no_waiting):
                    self._give_up_on(destination, batch)
                continue
            self.watch.ok(self.store.backend_name)
            self._count_items("item/stored", landed[0])
            return landed

    def _count_items(self, name: str, entries: list) -> None:
        for batch_id, n in _per_batch(entries):
            self.count(name, n, batch_id)

    def _give_up_on(self, destination: ItemDestination, batch: list) -> None:
        self._put_back(destination, batch)
        raise Abandoned()

    def _save_splitting(self, destination: ItemDestination, entries: list, retried: bool = False) -> tuple:
        """Store `entries` in one transaction; when the database refuses the group, halve it until the
        refused item(s) are found, so that one bad item never holds the others back."""
        try:
            store_items(self.store, destination, [row for _, row in entries])
            return entries, []
        except (BackendUnavailable, ConfigError):
            raise
        except Exception as e:   # the database refused something in this group: find what
            if len(entries) > 1:
                middle = len(entries) // 2
                first = self._save_splitting(destination, entries[:middle])
                second = self._save_splitting(destination, entries[middle:])
                return first[0] + second[0], first[1] + second[1]
            if not retried:      # a single item once more: a deadlock or a lock timeout passes
                return self._save_splitting(destination, entries, retried=True)
            return [], [(entries[0], e)]

    def _refuse(self, run: TaskRun, row: ItemRow, table: str, error: Exception) -> None:
        """An item the database will not store fails its task (called with the lock held)."""
        reason = f"{type(error).__name__}: {error}"
        refused = f"item {row.item_seq} of its request {row.request_seq} was refused by `{table}`"
        log.error("%s", failure_line(f"task {run.task_id} failed: {refused}: {_culprit_key(row.data, reason)}: "
                                     f"{reason}"))
        self.ledger.sub(run.slot, 1)
        self.record_outcome(run, ok=False, failure=failures.failure(
            run.task_id, run.lease.batch_id, f"{refused}: {reason}", error_class=type(error).__name__))
        self._free_slot_if_empty(run)

    def _dumped(self, destination: ItemDestination, batch: list, error: str) -> bool:
        """Append the items to FAILED_ITEMS_PATH (they count as landed); False when the disk refuses them
        (one line until it takes items again): they stay in memory, their tasks unwritten."""
        records = [FailedItemsFile.record(destination.table, destination.kind, row, error, destination.key)
                   for _, row in batch]
        try:
            self.failed_items.append(records)
        except OSError as e:
            if not self._disk_refused:
                self._disk_refused = True
                log.error("cannot append %d items to %s: %s; their tasks wait, the items stay in memory, and the "
                          "database is tried again meanwhile", len(records), self.failed_items.path, e)
            return False
        if self._disk_refused:
            self._disk_refused = False
            log.info("%s takes items again", self.failed_items.path)
        tasks = len({id(run) for run, _ in batch})
        log.error("%d items of %d tasks for `%s` written to %s instead (%s); this worker stores them once the "
                  "database is back (or run: batchd retry --items)", len(records), tasks, destination.table,
                  self.failed_items.path, error)
        self._replay_due = True
        if self.alerts is not None:
            for batch_id, n in _per_batch(batch):
                self.alerts.items_dumped(batch_id, n, self.failed_items.path, error)
        return True

    def _replay_if_due(self) -> None:
        """Items dumped during an outage are stored by the worker itself once the database is back
        (the replay logs its own summary); a disk that refuses the replay is tried again later."""
        if not self._replay_due or self.watch.is_down(self.store.backend_name) or time.monotonic() < self._replay_after:
            return
        result = self.failed_items.replay(self.store)
        self._replay_due = result.interrupted_by_outage or result.disk_error is not None
        if result.disk_error is not None:
            self._replay_after = time.monotonic() + REPLAY_DISK_RETRY

    # -- the gate (called with self._cond held)
    def _settle_if_landed(self, run: TaskRun) -> None:
        if not run.settled and self.ledger.unflushed(run.slot) == 0:
            self._queue_writeback(run)

    def _queue_writeback(self, run: TaskRun) -> None:
        run.settled = True
        self._writebacks[run] = None
        self._cond.notify_all()

    def _free_slot_if_empty(self, run: TaskRun) -> None:
        """A slot is freed once nothing of its task can still change: requests over, write-back queued
        and done, every item landed."""
        if (run.slot >= 0 and run.requests_finished and run.settled and run not in self._writebacks
                and self.ledger.unflushed(run.slot) == 0):
            self.ledger.release_slot(run.slot)
            run.slot = -1

    # -- write-backs
    def _write_ready(self) -> int:
        """Write back the runs waiting (how many); BackendUnavailable leaves them queued for the next turn."""
        with self._cond:
            runs = list(self._writebacks)
        if not runs:
            return 0
        unchecked = [r for r in runs if not r.lease_checked]
        if unchecked:
            self._check_leases(unchecked)
            self.watch.ok(self.leases.backend_name)      # a write that worked: an outage still open is over
        unwritten = [r for r in runs if not r.lease_lost and not r.written]
        if not self._archive_durable(unwritten):
            return 0
        if self.memory is not None:
            self.memory.count_found(unwritten)     # with the batch's counters, flushed before the tasks settle
        if self.stats_flusher is not None:
            self.stats_flusher.flush()
        if self.memory is not None:
            self.memory.keep(unwritten)     # what re-crawls remember: its items landed, its row not moved yet
        for (outcome, batch_id), owned in _by_outcome_and_batch(unwritten).items():
            def release(owned=owned) -> None:
                for run in owned:
                    run.written = True
                self.leases.release([r.lease for r in owned])
            self.settler.settle(settling_move(outcome), batch_id, [r.task_id for r in owned],
                                failures=[r.failure for r in owned if r.failure is not None], release=release)
            self.watch.ok(self.store.backend_name)  # (and the replay of dumped items may start)
        # Leases of tasks written in an earlier turn whose release did not get through.
        self.leases.release([r.lease for r in runs if not r.lease_lost and r not in unwritten])
        self._forget(runs)
        return len(runs)

    def _archive_durable(self, runs: list) -> bool:
        """The gate's archive half: the records of the tasks about to be written done are on disk, one fsync for
        the turn. A disk that refuses it holds every write-back (said once), tried again ARCHIVE_RETRY later; a
        stop does not wait for it (the tasks come back through their leases)."""
        if self.archive is None or not any(r.outcome == TaskState.DONE for r in runs):
            return True
        try:
            self.archive.make_durable()
        except OSError as e:
            if not self._archive_refused:
                log.error("archive: the records of %d tasks cannot be made durable (%s); no task is written done "
                          "until they are, tried again every %g s", len(runs), e, ARCHIVE_RETRY)
            self._archive_refused = True
            with guard.waiting(ARCHIVE_RETRY + IDLE_CHECK_IN):
                if self._no_waiting.wait(ARCHIVE_RETRY):
                    raise Abandoned() from None
            return False
        if self._archive_refused:
            self._archive_refused = False
            log.info("archive: records are made durable again; the tasks waiting are written")
        return True

    def _check_leases(self, runs: list) -> None:
        """Renewed for the write ahead (a lease the keeper has not renewed lately could expire during it);
        a lease reclaimed already is another holder's now."""
        owned = set(map(id, self.leases.renew([r.lease for r in runs], self.lease_seconds)))
        for run in runs:
            run.lease_checked = True
            if id(run.lease) not in owned:
                log.info("task %s: its lease was reclaimed before the write-back; the new holder owns it",
                         run.task_id)
                run.lease_lost = True

    def _forget(self, runs: list) -> None:
        with self._cond:
            for run in runs:
                del self._writebacks[run]
                self._runs.discard(run)
                self._free_slot_if_empty(run)
        self.on_written(runs)


def _by_outcome_and_batch(runs) -> dict:
    """(outcome, batch id) -> runs: one write-back statement, and one tally, each."""
    groups: dict = {}
    for run in runs:
        groups.setdefault((run.outcome, run.lease.batch_id), []).append(run)
    return groups


def _culprit_key(item: dict, reason: str) -> str:
    """The key (column) the database's message names ("for column `db`.`t`.`price`", "Field 'extra'"),
    else every key of the item, for the log line."""
    named = COLUMN_IN_MESSAGE.search(reason)
    if named:
        return f"key {named.group(1).replace('`', '').split('.')[-1]!r}"
    return f"keys {', '.join(map(repr, item))}"


def _per_batch(entries: list) -> list:
    """(batch id, how many) of the (run, ItemRow) entries."""
    return list(collections.Counter(row.batch_id for _, row in entries).items())
