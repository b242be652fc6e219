"""The write-back gate on every store: done waits for the task's items to land; SPEC's three
immediate cases do not wait; a task is done only with its items."""
import errno
import threading

import pytest

import batchd as mw
from batchd.archive.writer import ArchiveWriter
from batchd.task import TaskState
from harness import InProcessBatch, patrol_until, stays_true, wait_for
from taskdb import bring_back
from spiders.seed import CrawlTask

P, D, R, F = TaskState.PENDING, TaskState.DONE, TaskState.PROCESSING, TaskState.FAILED
HELD = {"ITEM_FLUSH_INTERVAL": 30.0, "ITEM_FLUSH_SIZE": 10000}   # items stay in the buffer...
BUSY_SECONDS = 3     # ...while a thread is busy with task 1 (a worker with nothing in hand flushes at once)


def tasks_beside_a_busy_one(backend, site, urls):
    """Task 1 keeps a thread busy for BUSY_SECONDS; the others (ids 2, 3, ...) are `urls`."""
    backend.create_tasks([site.url(f"/slow?seconds={BUSY_SECONDS}")] + urls)


class NoItemSpider(CrawlTask):
    def parse(self, request, response, task):
        self.update_task(task["id"], ok=True)
        return []


class FailWithItemSpider(CrawlTask):
    def parse(self, request, response, task):
        yield {"url": task["url"]}
        self.update_task(task["id"], ok=False)


class FollowUpSpider(CrawlTask):
    """Settles the task in the first callback, then yields an item from a second request."""

    def parse(self, request, response, task):
        self.update_task(task["id"], ok=True)
        yield {"url": task["url"], "part": "list"}
        yield mw.Request(response.url + "?detail=1", callback=self.parse_detail)

    def parse_detail(self, request, response, task):
        yield {"url": task["url"], "part": "detail", "title": response.css("h1::text").get()}


def factory(backend, cls, **settings):
    return lambda: cls(batch_store=backend.store(), settings=backend.settings(**settings))


def worker_of(batch):
    return next(loop for name, _, _, loop in batch.loops if name.startswith("worker"))


def test_done_waits_until_the_items_have_landed(backend, site):
    tasks_beside_a_busy_one(backend, site, [site.url(f"/page/{i}") for i in range(1, 6)])
    with InProcessBatch(factory(backend, CrawlTask, **HELD)) as batch:
        worker = worker_of(batch)
        wait_for(lambda: worker.ledger.totals()["unflushed"] == 5, message="5 items buffered")
        stays_true(lambda: set(backend.states().values()) == {R} and backend.items() == [], 0.5,
                   message="every task in processing, no item stored: none marked done while its items sat in memory",
                   explain=lambda: f"states {backend.states()}, items {backend.items()}")
        batch.stop("worker")                       # warm stop: flush, then write back
    assert set(backend.states().values()) == {D}
    assert len(backend.items()) == 6


def test_a_request_with_no_item_is_written_at_once(backend, site):
    backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 4)])
    with InProcessBatch(factory(backend, NoItemSpider, **HELD)):
        wait_for(lambda: set(backend.states().values()) == {D}, timeout=10, message="done without a flush")


def test_a_failure_is_written_at_once_even_with_items_buffered(backend, site):
    tasks_beside_a_busy_one(backend, site, [site.url("/page/1")])
    with InProcessBatch(factory(backend, FailWithItemSpider, **HELD)) as batch:
        wait_for(lambda: backend.states()[2] == F, timeout=10, message="failed without a flush")
        assert worker_of(batch).ledger.totals()["unflushed"] == 1
    assert len(backend.items()) == 2               # the items still landed at the warm stop


def test_update_task_outside_processing_is_written_at_once(backend):
    backend.create_tasks(["http://x.invalid/1", "http://x.invalid/2"])
    spider = CrawlTask(batch_store=backend.store(), settings=backend.settings())
    spider.update_task(1, ok=True)
    spider.update_task(2, ok=False)
    assert backend.states() == {1: D, 2: F}


def test_items_of_follow_up_requests_hold_the_task_too(backend, site):
    backend.create_tasks([site.url("/page/1"), site.url("/page/2")])
    with InProcessBatch(factory(backend, FollowUpSpider)):
        wait_for(lambda: set(backend.states().values()) == {D}, message="tasks done")
    parts = sorted((item["url"], item["part"]) for item in backend.items())
    assert parts == sorted((site.url(f"/page/{i}"), p) for i in (1, 2) for p in ("list", "detail"))


def test_a_rerun_in_the_same_batch_does_not_duplicate_items(backend, site):
    backend.create_tasks([site.url("/page/1")])
    with InProcessBatch(factory(backend, CrawlTask)):
        wait_for(lambda: backend.states()[1] == D, message="first run done")
    bring_back(backend, 1)                         # the task comes back (say, reclaimed) in the same batch
    with InProcessBatch(factory(backend, CrawlTask)):
        wait_for(lambda: backend.states()[1] == D, message="second run done")
    assert len(backend.items()) == 1


def test_a_stale_holders_write_back_is_ignored(backend):
    backend.create_tasks(["http://x.invalid/1"])
    spider = CrawlTask(batch_store=backend.store(), settings=backend.settings())
    spider.runtime.store.open(spider.runtime.layout)
    master = spider.runtime.master()
    from batchd.service.lifecycle import StopFlag
    master.patrol(StopFlag())
    queue = spider.runtime.backend.leases
    stale = queue.lease("old-holder:1", 0.1)
    patrol_until(master, lambda: queue.leased_count() == 0,              # reclaimed and pushed again
                 message="a patrol reclaiming the expired 0.1 s lease")
    fresh = queue.lease("new-holder:1", 60)
    assert fresh.task_id == stale.task_id
    assert queue.release([stale]) == []            # the old holder's write-back does not count
    assert queue.release([fresh]) == [fresh]


def test_a_stopping_worker_gives_back_the_leases_it_took_ahead(backend, site):
    backend.create_tasks([site.url(f"/slow?seconds=0.2&n={i}") for i in range(1, 201)])
    with InProcessBatch(factory(backend, CrawlTask, SPIDER_THREAD_COUNT=1)) as batch:
        worker = worker_of(batch)
        ahead = wait_for(lambda: [lease.task_id for lease in worker.prefetch.waiting()], message="leases taken ahead")
        batch.stop("worker")
        assert worker.prefetch.waiting() == []
        leases = worker.leases
        wait_for(lambda: leases.leased_count() == 0 and leases.known([str(i) for i in ahead]) == {str(i) for i in ahead},
                 timeout=10, message="the leases taken ahead given back, their tasks requeued and queued again")
        assert all(backend.states()[task_id] != D for task_id in ahead)


def test_the_last_tasks_of_a_batch_are_flushed_without_waiting_for_the_flush_interval(backend, site):
    backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 6)])
    with InProcessBatch(factory(backend, CrawlTask, ITEM_FLUSH_INTERVAL=30.0)):
        wait_for(lambda: set(backend.states().values()) == {D}, timeout=5,
                 message="every task done long before ITEM_FLUSH_INTERVAL=30 s: the queue ran dry, so they flushed")
    assert len(backend.items()) == 5


def test_a_task_keeps_its_lease_until_its_row_is_settled(backend, site):
    """The master takes a task in processing that neither the queue nor a lease holds for lost, and
    crawls it again: a write-back never opens such a moment, its lease ends only after its row moved."""
    tasks_beside_a_busy_one(backend, site, [site.url(f"/page/{i}") for i in range(1, 6)])
    held_while_settled = []
    with InProcessBatch(factory(backend, CrawlTask, **HELD)) as batch:
        worker = worker_of(batch)
        settler = wait_for(lambda: worker.pipeline and worker.pipeline.settler, message="the worker serving")
        settle = settler.settle

        def watched(move, batch_id, task_ids, **kwargs):
            keys = [str(task_id) for task_id in task_ids]
            held_while_settled.append((sorted(task_ids), sorted(worker.leases.known(keys))))
            return settle(move, batch_id, task_ids, **kwargs)

        settler.settle = watched
        wait_for(lambda: set(backend.states().values()) == {D}, message="every task done")
    assert sorted(t for got, _ in held_while_settled for t in got) == [1, 2, 3, 4, 5, 6]
    assert all(known == [str(t) for t in got] for got, known in held_while_settled), held_while_settled
    assert worker.leases.leased_count() == 0


def test_a_task_is_added_to_the_tally_only_once_its_lease_is_given_back(backend, site):
    """The master reads the tally, then the queue: a task counted settled while its lease was still
    held was counted twice, and raised the batch's total past its rows."""
    tasks_beside_a_busy_one(backend, site, [site.url(f"/page/{i}") for i in range(1, 6)])
    settling, held_when_tallied = [], []
    with InProcessBatch(factory(backend, CrawlTask, **HELD)) as batch:
        worker = worker_of(batch)
        settler = wait_for(lambda: worker.pipeline and worker.pipeline.settler, message="the worker serving")
        settle, add_settled = settler.settle, settler.tally.add_settled

        def watched_settle(move, batch_id, task_ids, **kwargs):
            settling[:] = [str(task_id) for task_id in task_ids]
            return settle(move, batch_id, task_ids, **kwargs)

        def watched_add(batch_id, done, failed):
            held_when_tallied.append((list(settling), sorted(worker.leases.known(settling))))
            return add_settled(batch_id, done, failed)

        settler.settle, settler.tally.add_settled = watched_settle, watched_add
        wait_for(lambda: set(backend.states().values()) == {D}, message="every task done")
    assert sorted(int(t) for got, _ in held_when_tallied for t in got) == [1, 2, 3, 4, 5, 6]
    assert all(known == [] for _, known in held_when_tallied), held_when_tallied


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
def test_done_waits_until_the_archive_records_are_on_disk(backend, site, tmp_path, monkeypatch, caplog):
    """ARCHIVE: a task is written done only once its records are fsynced (one fsync a turn)."""
    refusing, synced = threading.Event(), ArchiveWriter.make_durable
    refusing.set()

    def make_durable(writer):
        if refusing.is_set():
            raise OSError(errno.EIO, "the disk refused the fsync")
        synced(writer)
    monkeypatch.setattr(ArchiveWriter, "make_durable", make_durable)
    backend.create_tasks([site.url(f"/page/{i}") for i in (1, 2, 3)])
    with InProcessBatch(factory(backend, CrawlTask, ARCHIVE="warc", ARCHIVE_PATH=str(tmp_path))):
        wait_for(lambda: len(backend.items()) == 3, message="the items stored")
        stays_true(lambda: D not in backend.states().values(), 0.3,
                   message="no task done while its records are not durable", explain=lambda: str(backend.states()))
        refusing.clear()
        wait_for(lambda: set(backend.states().values()) == {D}, message="every task done once they are")
    refused = [r.getMessage() for r in caplog.records if "cannot be made durable" in r.getMessage()]
    assert len(refused) == 1 and "the disk refused the fsync" in refused[0]
