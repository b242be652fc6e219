"""A worker's view of reparse batches (worker/replays.py): which batch is one, read once per batch from the store's
record; its archive opened once and closed when a later batch comes; a record out of reach is no guess."""
import pytest

from batchd.master.reparse_opening import reparse_request
from batchd.model import TaskLayout
from batchd.worker.replays import BatchUnknown, Replays
from harness import RefusingMemoryStore


class Archives:
    """What Replays opens: each batch's archive source, and which were closed."""

    def __init__(self):
        self.opened, self.closed = [], []

    def open(self, batch_id):
        archives = self

        class Source:
            def find(self, method, url):
                return None

            def close(self):
                archives.closed.append(batch_id)

        self.opened.append(batch_id)
        return Source()


def test_a_reparse_batch_is_known_once_and_its_archive_closed_when_a_later_batch_comes():
    store = RefusingMemoryStore([{"id": 1, "url": "http://x.invalid/1"}])
    store.open(TaskLayout("crawl_task"))
    archives = Archives()

    def last_batch():           # as a store down answers: not at all
        store.ping()
        return store.last_batch()

    replays = Replays(last_batch, archives.open, lambda name, n, batch: None)
    store.insert_batch(7, "day", 1)                             # batch 1: a crawl
    assert replays.of(1) is None
    reparse = store.insert_batch(7, "day", 1)                   # batch 2: a reparse of 1
    store.record_reset(reparse.id, None, 0, opening=reparse_request(1))
    assert [replays.of(2).opening.reparse_of for _ in range(3)] == [1, 1, 1] and archives.opened == [1]
    store.insert_batch(7, "day", 1)                             # batch 3: a crawl again
    assert replays.of(3) is None and archives.closed == [1]
    store.down.set()
    with pytest.raises(BatchUnknown, match="the record of batch 4 was not read"):
        replays.of(4)
    assert replays.of(3) is None                               # known already: no read
