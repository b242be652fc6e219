"""Per-batch counters (batchd/stats.py): the collector under threads and its cost, the report line,
items stored and dumped counted through a real worker run on every store (a dump provoked by a real
outage: a stopped MariaDB, a write-locked SQLite file, a MemoryBatchStore told to refuse), the record's
`stats` column added to an old record table, and a flush across a Redis outage whose answer was lost,
sent again and counted once."""
import json
import logging
import re
import signal
import sqlite3
import threading
import time

import pytest

import batchd
from batchd.backends.mysql_redis.redis_client import connect_redis
from batchd.backends.mysql_redis.redis_batch import RedisCounters
from batchd.errors import BackendUnavailable
from batchd.settle.batch_stats import BatchStats, StatsFlusher, report
from batchd.task import TaskState
from harness import InProcessBatch, RefusingMemoryStore, batch_done, create_old_record_table, make_master, wait_for
from servers import PrivateRedis
from spiders.seed import CrawlTask
from taskdb import MemoryBackend, SqliteBackend

D = TaskState.DONE
GATE = threading.Event()
WAITING_FROM = 3      # tasks with this id and above wait in parse() until the test opens GATE
AT_THE_GATE: set[int] = set()


class LateTasksWait(CrawlTask):
    def parse(self, request, response, task):
        if task["id"] >= WAITING_FROM:
            AT_THE_GATE.add(task["id"])
            GATE.wait(60)
        yield from super().parse(request, response, task)


# -- the collector
def test_counts_go_to_the_batch_of_the_calling_threads_task():
    stats = BatchStats()
    stats.inc("dropped/before/any/task")                   # no batch yet: belongs to none
    assert stats.working_on(7) is True and stats.working_on(7) is False
    stats.inc("downloader/request_count")
    stats.inc("downloader/response_bytes", 512)
    other = threading.Thread(target=lambda: (stats.working_on(8), stats.inc("downloader/request_count", 2)))
    other.start()
    other.join()
    stats.inc("item/stored", 3, batch_id=6)                # named explicitly (the pipeline does)
    stats.inc("downloader/request_count")                  # still batch 7 in this thread
    assert stats.take() == {7: {"downloader/request_count": 2, "downloader/response_bytes": 512},
                            8: {"downloader/request_count": 2}, 6: {"item/stored": 3}}
    assert stats.take() == {}


def test_eight_threads_count_exactly():
    stats, threads, per_thread = BatchStats(), 8, 10_000
    start = threading.Barrier(threads + 1)

    def count(batch_id):
        stats.working_on(batch_id)
        start.wait()
        for _ in range(per_thread):
            stats.inc("downloader/request_count")
            stats.inc("downloader/response_status_count/200")

    workers = [threading.Thread(target=count, args=(1 + n % 2,)) for n in range(threads)]
    for t in workers:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in workers:
        t.join()
    contended_ns = (time.perf_counter() - began) / (2 * per_thread * threads) * 1e9
    counts = stats.take()
    assert counts == {b: {"downloader/request_count": 4 * per_thread,
                          "downloader/response_status_count/200": 4 * per_thread} for b in (1, 2)}
    alone = BatchStats()
    alone.working_on(1)
    began = time.perf_counter()
    for _ in range(per_thread):
        alone.inc("downloader/request_count")
    single_ns = (time.perf_counter() - began) / per_thread * 1e9
    print(f"inc(): {single_ns:.0f} ns a call from one thread; {contended_ns:.0f} ns a call overall with {threads} "
          "threads doing nothing else")       # (a figure for the reader: speed is the benchmarks' to judge)


def test_the_report_is_one_readable_line():
    counts = {"downloader/request_count": 5000, "downloader/response_status_count/200": 4980,
              "downloader/response_status_count/404": 10, "retry/reason_count/HTTP 503": 10,
              "retry/reason_count/ReadTimeout": 2, "downloader/response_bytes": 48_123_456,
              "item/stored": 4990, "item/invalid": 3}
    assert report(12, counts) == ("batch 12 done: 5000 requests, 4990 responses (200: 4980, 404: 10), 12 retries "
                                  "(HTTP 503: 10, ReadTimeout: 2), 48.1 MB, 4990 items stored, 0 dumped, 3 invalid")
    assert report(3, {"proxy/failures": 2, "custom/thing": 1}) == \
        "batch 3 done: 0 requests, 0 responses, 0 B, 0 items stored, 0 dumped, 0 invalid, 2 proxy failures, custom/thing 1"


# -- items stored and dumped, through a real worker run, into the record and the master's line
def run_through_a_dump(backend, site, caplog, spider_factory, outage_begins, outage_ends):
    """Tasks 1 and 2 are stored; then the store goes down and tasks 3 to 5 yield their items, which are
    dumped after ITEM_FLUSH_GIVE_UP; the store comes back and the batch ends. A direct inc() of the
    test's own goes with them."""
    GATE.clear()
    AT_THE_GATE.clear()
    with caplog.at_level(logging.INFO, logger="batchd"):
        with InProcessBatch(spider_factory) as batch:
            worker = next(loop for name, _, _, loop in batch.loops if name.startswith("worker"))
            wait_for(lambda: [backend.states()[i] for i in (1, 2)] == [D, D], message="tasks 1 and 2 done")
            # On a busy machine a late task may still be on its way from the queue; one the outage caught
            # there would never yield before the outage ends.
            wait_for(lambda: len(AT_THE_GATE) == 3, message="tasks 3 to 5 in parse()")
            worker.stats.inc("custom/direct", 7)          # from no task's thread: the worker's latest batch
            outage_begins()
            GATE.set()
            wait_for(lambda: dumped(caplog) == 3, timeout=60, message="three items dumped")
            outage_ends()
            wait_for(lambda: batch_done(backend), timeout=60, message="the batch closed")
    record = backend.records()[-1]
    counted = json.loads(record["stats"])
    assert {name: n for name, n in counted.items() if not name.startswith("downloader/")} == {
        "custom/direct": 7, "item/dumped": 3, "item/stored": 2}
    assert counted["downloader/request_count"] == counted["downloader/response_status_count/200"] == 5
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("batch 1 done:")]
    assert lines == [f"batch 1 done: 5 requests, 5 responses (200: 5), {counted['downloader/response_bytes']} B, "
                     "2 items stored, 3 dumped, 0 invalid, custom/direct 7"]


def dumped(caplog) -> int:
    return sum(int(m.group(1)) for r in caplog.records
               if (m := re.match(r"(\d+) items of \d+ tasks (?:for `\w+` )?written to", r.getMessage())))


def spider_factory(backend, make_store, **settings):
    settings = backend.settings(SPIDER_THREAD_COUNT=5, ITEM_FLUSH_GIVE_UP=1, **settings)
    return lambda: LateTasksWait(batch_store=make_store(), settings=settings)


def test_items_stored_and_dumped_are_counted_in_memory(failed_items_path, site, caplog):
    backend = MemoryBackend(failed_items_path)
    store = backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 6)], store_class=RefusingMemoryStore)
    run_through_a_dump(backend, site, caplog, spider_factory(backend, lambda: store), store.down.set, store.down.clear)


def test_items_stored_and_dumped_are_counted_in_sqlite(tmp_path, failed_items_path, site, caplog):
    shared_backend = SqliteBackend(tmp_path / "batchd.db", failed_items_path)
    shared_backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 6)])
    locker = sqlite3.connect(shared_backend.path, isolation_level=None)

    def make_store():         # a short busy timeout: the test's write lock is an outage within 0.3 s
        return batchd.SqliteBatchStore(shared_backend.path, busy_timeout=0.3)

    try:
        run_through_a_dump(shared_backend, site, caplog, spider_factory(shared_backend, make_store),
                           lambda: locker.execute("BEGIN EXCLUSIVE"), lambda: locker.execute("ROLLBACK"))
    finally:
        locker.close()
        shared_backend.close()


def test_items_stored_and_dumped_are_counted_in_mysql(private_mysql, site, caplog):
    db, backend = private_mysql
    backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 6)])

    def outage_begins():
        backend.conn.close()
        db.stop()

    def outage_ends():
        db.start()
        backend.reconnect()

    run_through_a_dump(backend, site, caplog, spider_factory(backend, backend.store), outage_begins, outage_ends)


# -- the record's column
def test_an_old_record_table_gets_the_stats_column(shared_backend, caplog):
    shared_backend.create_tasks(["http://x.invalid/1"])
    create_old_record_table(shared_backend)
    with caplog.at_level(logging.INFO, logger="batchd"):
        _, spider = make_master(shared_backend)
    store = spider.runtime.store
    assert store.last_batch().counters == {}
    store.record_stats(1, {"item/stored": 1, "retry/reason_count/HTTP 503": 2})
    assert store.last_batch().counters == {"item/stored": 1, "retry/reason_count/HTTP 503": 2}
    assert json.loads(shared_backend.records()[0]["stats"]) == {"item/stored": 1, "retry/reason_count/HTTP 503": 2}
    added = sorted(r.getMessage() for r in caplog.records if "added the column" in r.getMessage())
    assert len(added) == 6 and "opening" in added[0] and "outcome" in added[1] and "quality" in added[2]
    assert "reset_cursor" in added[3] and "spider_print" in added[4] and "counters" in added[5]


# -- a flush across a Redis outage
def test_a_flush_whose_answer_was_lost_is_sent_again_and_counted_once():
    """Redis frozen (SIGSTOP) mid-flush: the call times out, so the worker does not know that Redis, once
    thawed, ran it. The flush is kept and sent again under its number: Redis applies it once. Counts made
    during the outage go in the next flush, and a batch not reached by the failed try is not lost."""
    with PrivateRedis() as server:
        url = server.url()
        reader = RedisCounters(url, "tstats", connect_redis(url))
        flusher_client = connect_redis(url, timeout=0.5)
        stats = BatchStats()
        flusher = StatsFlusher(stats, RedisCounters(url, "tstats", flusher_client), "host:1:abcd1234:", 60)
        stats.inc("item/stored", 3, batch_id=1)
        flusher.flush()
        assert reader.counts(1) == {"item/stored": 3}
        stats.inc("item/stored", 2, batch_id=1)
        stats.inc("item/dumped", 1, batch_id=2)
        server.process.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(BackendUnavailable):
                flusher.flush()
            stats.inc("item/stored", 10, batch_id=1)    # counted during the outage
        finally:
            server.process.send_signal(signal.SIGCONT)
        wait_for(lambda: reader.counts(1) == {"item/stored": 5}, message="the timed-out flush run by Redis")
        assert reader.counts(2) == {}, "the failed try never reached batch 2"
        flusher.flush()
        assert reader.counts(1) == {"item/stored": 15} and reader.counts(2) == {"item/dumped": 1}
        flusher.flush()                                  # nothing left: nothing sent
        assert reader.counts(1) == {"item/stored": 15}
        flusher_client.close()
