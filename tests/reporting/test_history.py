"""`batchd status --history`: the last batches from their records, on every store after two real batches
(opened, closed, duration, settled counts, items stored, mean rate), the text table, and a store of a
user's own that keeps only its last record."""
from datetime import datetime, timedelta

from batchd import MemoryBatchStore
from batchd.model import BatchOpening, BatchRecord, TaskLayout
from batchd.backends.store import BatchStore
from batchd.cli.status_text import render_history
from batchd.reporting.status import gather_history, history_entry
from harness import InProcessBatch, batch_done, spider_factory, wait_for
from spiders.seed import CrawlTask


def test_history_lists_the_last_batches_newest_first(backend, site):
    backend.create_tasks([site.url(f"/page/{n}") for n in range(1, 4)] + [site.url("/status/404")])
    with InProcessBatch(spider_factory(backend, CrawlTask, SPIDER_MAX_RETRY_TIMES=0)) as batch:
        wait_for(lambda: batch_done(backend), message="batch 1 closed")
        master = next(loop for name, _, _, loop in batch.loops if name == "master")
        master.leases.ask_open_batch(False)          # batchd open-batch: the second batch without aging the first
        wait_for(lambda: len(backend.records()) == 2 and batch_done(backend), message="batch 2 closed")
    spider = CrawlTask(batch_store=backend.store(), settings=backend.settings())
    newest, oldest = gather_history(spider.runtime, 10)
    assert [newest["id"], oldest["id"]] == [2, 1]
    for entry in (newest, oldest):
        assert (entry["done"], entry["failed"], entry["total"], entry["items"]) == (3, 1, 4, 3)
        assert (entry["mode"], entry["opened_with"]) == ("full", 4)
        assert entry["is_done"] and entry["closed"] >= entry["opened"]
        assert entry["duration_seconds"] < 60
        assert entry["rate"] == 4 / max(entry["duration_seconds"], 1.0)       # a batch under a second: one second
    assert newest["opened"] >= oldest["closed"]
    assert [entry["id"] for entry in gather_history(spider.runtime, 1)] == [2]


def test_the_history_table_has_a_blank_where_a_figure_is_unknown():
    opened = datetime(2026, 12, 1, 3, 0, 0)
    closed = BatchRecord(id=7, batch_date=opened, total_count=100, done_count=90, fail_count=10, is_done=True,
                         stats='{"item/stored": 450, "recrawl/new": 10, "recrawl/changed": 20, "recrawl/unchanged": 60}', update_time=opened + timedelta(seconds=200),
                         opening=BatchOpening(reset_failed=False, kept_failed=5, opened_with=90).to_json())
    running = BatchRecord(id=8, batch_date=opened + timedelta(days=1), total_count=100, done_count=30,
                          opening=BatchOpening(mode="incremental", kept_done=900, opened_with=100).to_json())
    entries = [history_entry(running, opened + timedelta(days=1, seconds=60)), history_entry(closed, opened)]
    assert entries[0]["closed"] is None and entries[0]["items"] is None and entries[0]["rate"] == 0.5
    assert render_history(entries).splitlines() == [
        "batch  mode               opened               closed               duration  opened with  done  failed  total"
        "  items  new  changed  unchanged  gone   rate  spider",
        "    8  incremental        2026-12-02 03:00:00  (running)               1m00s          100    30       0    100"
        "                                        0.5/s",
        "    7  full, failed kept  2026-12-01 03:00:00  2026-12-01 03:03:20     3m20s           90    90      10    100"
        "    450   10       20         60     0  0.5/s"]
    assert entries[1]["found"] == {"new": 10, "changed": 20, "unchanged": 60, "gone": 0}
    assert render_history([]) == "no batch yet (the master opens the first one)"
    unknown = history_entry(BatchRecord(id=6, batch_date=opened, done_count=5, total_count=5, is_done=True), opened)
    assert (unknown["closed"], unknown["duration_seconds"], unknown["rate"]) == (None, None, None)
    assert render_history([unknown]).splitlines()[1].split() == ["6", "full", "2026-12-01", "03:00:00", "5", "0", "5"]


def test_a_store_without_recent_batches_gives_its_last_record():
    """BatchStore's default, for a user's store written before recent_batches() came."""
    store = MemoryBatchStore()
    assert BatchStore.recent_batches(store, 10) == []
    store.open(TaskLayout("crawl_task"))
    store.insert_batch(7, "day", 0)
    store.insert_batch(7, "day", 0)
    assert [record.id for record in BatchStore.recent_batches(store, 10)] == [2]
