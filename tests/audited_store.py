"""A custom backend, as the seed says a user writes one: a subclass of batchd.core.batch_store.BatchStore
(tests/core/test_batch_store.py), which other tests use as a store batchd does not know."""
import threading

from batchd.core.batch_store import BatchStore, MemoryBatchStore


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
