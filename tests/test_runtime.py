"""The batch engine end to end, on every store: the seed's spider, a whole batch, the states."""
import threading


import batchd as mw
from batchd.task import TaskState
from spiders.seed import CrawlTask


def run_batch(backend, spider_cls=CrawlTask, timeout=60, **settings):
    """Master with once=True, and for a shared store a worker thread beside it."""
    spider = spider_cls(batch_store=backend.store(), settings=backend.settings(**settings))
    if backend.multiprocess:
        worker = spider_cls(batch_store=backend.store(), settings=backend.settings(**settings))
        thread = threading.Thread(target=worker.start, daemon=True)   # keep_alive=False: ends with the batch
        thread.start()
    spider.start_monitor(once=True)
    if backend.multiprocess:
        thread.join(timeout)
        assert not thread.is_alive(), "the keep_alive=False worker did not return after the batch"
    return spider


def test_seed_spider_runs_a_whole_batch(backend, site):
    urls = [site.url(f"/page/{i}") for i in range(1, 31)]
    backend.create_tasks(urls)
    run_batch(backend)
    assert set(backend.states().values()) == {TaskState.DONE}
    items = backend.items()
    assert sorted(item["title"] for item in items) == sorted(f"Title {i}" for i in range(1, 31))
    assert {item["url"] for item in items} == set(urls)
    record = backend.records()[-1]
    assert (record["total_count"], record["done_count"], record["fail_count"], record["is_done"]) == (30, 30, 0, True)


def test_memory_store_runs_the_batch_in_process(site, failed_items_path):
    store = mw.MemoryBatchStore([{"id": 1, "url": site.url("/page/1")}, {"id": 2, "url": site.url("/page/2")}])
    CrawlTask(batch_store=store, settings={"FAILED_ITEMS_PATH": failed_items_path,
                                           "BATCH_MONITOR_INTERVAL": 0.2}).start_monitor(once=True)
    assert sorted(i["title"] for i in store.items) == ["Title 1", "Title 2"]
    assert [r["batch_status"] for r in store.rows] == [1, 1]
