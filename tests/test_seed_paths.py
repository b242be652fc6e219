"""The seed's own import path, `batchd.core.batch_store` (the seed names it `netspy.core.batch_store`): its
memory-store snippet runs as written but for the package name, and a custom backend subclasses its BatchStore."""
import threading

import batchd
from batchd.core import batch_store
from batchd.core.batch_store import BatchStore, MemoryBatchStore
from spiders.seed import CrawlTask


def test_the_seed_names_are_batchds_own_classes():
    assert (batch_store.BatchStore, batch_store.MemoryBatchStore, batch_store.MysqlBatchStore,
            batch_store.SqliteBatchStore) == (batchd.BatchStore, batchd.MemoryBatchStore, batchd.MysqlBatchStore,
                                              batchd.SqliteBatchStore)


def test_the_seeds_memory_store_snippet_runs_as_written(site, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)        # FAILED_ITEMS_PATH's default, ./failed_items.jsonl, lands here
    # The seed's snippet, its URLs those of the test's site:
    store = MemoryBatchStore([{"id": 1, "url": site.url("/page/1")}, {"id": 2, "url": site.url("/page/2")}])
    CrawlTask(batch_store=store).start_monitor(once=True)
    assert sorted(item["title"] for item in store.items) == ["Title 1", "Title 2"]
    assert [row["batch_status"] for row in store.rows] == [1, 1]


class AuditedStore(BatchStore):
    """A custom backend, as the seed says a user writes one: a subclass of batchd.core.batch_store.BatchStore.
    It keeps its tasks in a MemoryBatchStore and writes down every state move it is asked for (an audit trail):
    each method of the contract, written out."""

    runs_in_process = True       # no other process reaches it: start_monitor() runs its worker beside it
    served_by = "memory"         # its other ports (queue, leases, tally) are the in-process ones

    def __init__(self, rows):
        self.inner = MemoryBatchStore(rows)
        self.audit: list = []
        self._lock = threading.Lock()

    def open(self, layout):
        self.layout = layout
        self.inner.open(layout)

    def now(self):
        return self.inner.now()

    def last_batch(self):
        return self.inner.last_batch()

    def insert_batch(self, interval, interval_unit, total):
        return self.inner.insert_batch(interval, interval_unit, total)

    def next_chunk(self, after, size):
        return self.inner.next_chunk(after, size)

    def reset_chunk(self, after, upper):
        return self.inner.reset_chunk(after, upper)

    def count_chunk(self, after, upper):
        return self.inner.count_chunk(after, upper)

    def record_reset(self, batch_id, after, walked, finished=False):
        self.inner.record_reset(batch_id, after, walked, finished)

    def update_batch(self, batch_id, progress, is_done):
        self.inner.update_batch(batch_id, progress, is_done)

    def claim(self, limit, upto=None):
        return self.inner.claim(limit, upto)

    def move(self, move, ids, older_than=None):
        moved = self.inner.move(move, ids, older_than)
        with self._lock:
            self.audit.append((move.name, sorted(ids), moved))
        return moved

    def stale_processing(self, older_than, limit):
        return self.inner.stale_processing(older_than, limit)

    def progress(self):
        return self.inner.progress()

    def unsettled_count(self):
        return self.inner.unsettled_count()

    def save_items(self, table, kind, rows, key=()):
        self.inner.save_items(table, kind, rows, key)


def test_a_custom_backend_subclasses_the_seeds_batch_store(site, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = AuditedStore([{"id": n, "url": site.url(f"/page/{n}")} for n in (1, 2, 3)])
    CrawlTask(batch_store=store).start_monitor(once=True)
    assert [row["batch_status"] for row in store.inner.rows] == [1, 1, 1]
    assert sorted(item["title"] for item in store.inner.items) == ["Title 1", "Title 2", "Title 3"]
    finished = sorted(task_id for name, ids, moved in store.audit if name == "FINISH_DONE" for task_id in ids)
    assert finished == [1, 2, 3]
