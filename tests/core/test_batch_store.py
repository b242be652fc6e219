"""The seed's own import path, `batchd.core.batch_store` (the seed names it `netspy.core.batch_store`): its
memory-store snippet runs as written but for the package name, and a custom backend subclasses its BatchStore."""

import batchd
from batchd.core import batch_store
from batchd.core.batch_store import MemoryBatchStore
from audited_store import AuditedStore
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


def test_a_custom_backend_subclasses_the_seeds_batch_store(site, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = AuditedStore([{"id": n, "url": site.url(f"/page/{n}")} for n in (1, 2, 3)])
    CrawlTask(batch_store=store).start_monitor(once=True)
    assert [row["batch_status"] for row in store.inner.rows] == [1, 1, 1]
    assert sorted(item["title"] for item in store.inner.items) == ["Title 1", "Title 2", "Title 3"]
    finished = sorted(task_id for name, ids, moved in store.audit if name == "FINISH_DONE" for task_id in ids)
    assert finished == [1, 2, 3]
