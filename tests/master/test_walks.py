"""The master on big tables (issue 10), on every store: the reset walked in chunks while the queue is
fed, progress from the tally, a close that reconciles, and what they rest on in the store."""
import logging
import time

import pytest

from batchd.service.lifecycle import StopFlag
from batchd.task import Move, TaskState
from batchd.master.walks import CHUNK_SECONDS, ChunkPacer
from harness import create_old_record_table, make_master, patrol_until, wait_for, work_off

P, D, R, F = TaskState.PENDING, TaskState.DONE, TaskState.PROCESSING, TaskState.FAILED


def patrol(master):
    return master.patrol(StopFlag())


# -- the pacer
def test_chunks_grow_while_quick_and_shrink_while_slow_at_most_twofold_each_time():
    pacer = ChunkPacer(1000)
    pacer.took(CHUNK_SECONDS / 10, 1000)
    assert pacer.size == 2000
    pacer.took(CHUNK_SECONDS * 10, 2000)
    assert pacer.size == 1000
    pacer.took(CHUNK_SECONDS * 1.25, 1000)
    assert pacer.size == 800
    pacer.took(CHUNK_SECONDS / 10, 5)             # the table's short tail: no lesson
    assert pacer.size == 800 and (pacer.smallest, pacer.largest) == (800, 2000)


# -- what the walks rest on, in every store
def test_a_store_walks_its_table_in_id_order_by_chunks(backend):
    store = backend.create_tasks([f"http://x.invalid/{i}" for i in range(10)])
    master, spider = make_master(backend)
    store = spider.runtime.store
    assert store.next_chunk(None, 4) == (4, 4)
    assert store.next_chunk(4, 4) == (8, 4)
    assert store.next_chunk(8, 4) == (10, 2)
    assert store.next_chunk(10, 4) is None
    backend.set_state(2, D)
    backend.set_state(3, F)
    backend.set_state(6, D)
    assert store.count_chunk(None, 4) == (4, 1, 1)
    assert store.count_chunk(4, 10) == (6, 1, 0)
    assert store.reset_chunk(None, 4) == 2            # rows 2 and 3; the pending ones stay as they are
    assert [backend.states()[i] for i in (2, 3, 6)] == [P, P, D]


def test_a_claim_takes_no_row_past_upto(backend):
    backend.create_tasks([f"http://x.invalid/{i}" for i in range(10)])
    _, spider = make_master(backend)
    store = spider.runtime.store
    assert [row["id"] for row in store.claim(100, upto=3)] == [1, 2, 3]
    assert [row["id"] for row in store.claim(2)] == [4, 5]


def test_the_reset_cursor_is_kept_in_the_record_until_the_reset_is_over(backend):
    backend.create_tasks(["http://x.invalid/1"])
    _, spider = make_master(backend)
    store = spider.runtime.store
    batch = store.insert_batch(1, "day", 7)
    assert batch.resetting and batch.reset_position == (None, 0) and batch.total_count == 7
    store.record_reset(batch.id, 42, 500)
    assert store.last_batch().reset_position == (42, 500)
    store.record_reset(batch.id, 42, 501, finished=True)
    record = store.last_batch()
    assert not record.resetting and record.total_count == 501


def test_an_old_record_table_gets_the_reset_cursor_column(shared_backend):
    shared_backend.create_tasks(["http://x.invalid/1"])
    create_old_record_table(shared_backend)
    _, spider = make_master(shared_backend)
    record = spider.runtime.store.last_batch()
    assert record.id == 1 and record.is_done and not record.resetting


# -- the reset feeds the queue as it goes
@pytest.fixture
def thousands(backend, monkeypatch):
    """3,000 tasks, and a master that walks one chunk per patrol (not WALK_BUDGET seconds of them)."""
    backend.create_tasks([f"http://x.invalid/{i}" for i in range(3000)])
    monkeypatch.setattr("batchd.master.patrol.WALK_BUDGET", 0)
    return backend


def test_the_first_task_is_leased_while_the_reset_still_walks(thousands):
    master, spider = make_master(thousands, BATCH_RESET_CHUNK=1, BATCH_PUSH_LIMIT=50)
    leases = spider.runtime.backend.leases
    started = time.monotonic()
    assert patrol(master) is False
    first = leases.lease("w:1", 60)
    leased_after = time.monotonic() - started
    record = spider.runtime.store.last_batch()
    # What shows the lease came while the reset still walks is `resetting` below; the bound only says no walk of
    # the whole table came first (a patrol of one chunk, which on a busy machine takes a while, nothing like 3,000).
    assert first is not None and leased_after < 5.0
    assert record.resetting and first.task_id <= record.reset_position[0] < 3000
    patrol_until(master, lambda: not master.walking and not spider.runtime.store.last_batch().resetting,
                 message="the end of the reset")
    assert spider.runtime.store.last_batch().total_count == 3000
    claimed = list(thousands.states().values()).count(R)
    assert claimed == leases.pending_count() + leases.leased_count()      # each claimed row queued once


def test_a_stopped_master_leaves_the_reset_where_it_stood(thousands, caplog):
    master, spider = make_master(thousands, BATCH_RESET_CHUNK=100)
    stop = StopFlag()
    claims = []
    claim = master.store.claim
    master.store.claim = lambda limit, upto=None: claims.append(upto) or claim(limit, upto)
    master._heartbeat = stop.request        # stopped right after the patrol's chunk
    with caplog.at_level(logging.INFO, logger="batchd"):
        assert master.patrol(stop) is False
    after, walked = spider.runtime.store.last_batch().reset_position
    assert (after, walked) == (100, 100)
    assert "the next master goes on from id" in caplog.text
    assert claims == []                      # a stopped master claims nothing more


# -- progress from the tally, exact at close
def test_progress_counts_write_backs_not_rows_and_the_close_counts_the_table(backend, caplog):
    backend.create_tasks([f"http://x.invalid/{i}" for i in range(6)])
    master, spider = make_master(backend)
    patrol(master)
    work_off(spider.runtime, {1: D, 2: F})
    backend.set_state(3, D)                  # settled behind batchd's back: no tally saw it
    with caplog.at_level(logging.INFO, logger="batchd"):
        patrol(master)
    assert "批次进度 2/6" in caplog.text
    runtime = spider.runtime
    lease = runtime.backend.leases.lease("w:dies", 60)
    while lease is not None:                 # a holder that dies between its write-back and its tally
        runtime.backend.leases.release([lease])
        runtime.store.move(Move.FINISH_DONE, [lease.task_id])
        lease = runtime.backend.leases.lease("w:dies", 60)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="batchd"):
        assert patrol(master) is True
    assert "the tally said 1 done, 1 failed; the table holds 5 and 1" in caplog.text
    record = backend.records()[-1]
    assert (record["total_count"], record["done_count"], record["fail_count"], record["is_done"]) == (6, 5, 1, True)
    assert runtime.backend.tally.settled(record["id"]) == (5, 1)


def test_a_lost_tally_is_restored_from_the_record(mysql_backend, caplog):
    mysql_backend.create_tasks([f"http://x.invalid/{i}" for i in range(4)])
    master, spider = make_master(mysql_backend)
    patrol(master)
    work_off(spider.runtime, {1: D, 2: D})
    patrol(master)                            # the record says 2 done
    import redis
    with redis.Redis.from_url(mysql_backend.redis_url) as client:        # Redis restarted empty
        client.delete(f"{mysql_backend.namespace}:tally:1")
    patrol(master)
    work_off(spider.runtime, {3: D})
    with caplog.at_level(logging.WARNING, logger="batchd"):
        patrol(master)
    assert "its tally of settled tasks was lost" in caplog.text
    assert spider.runtime.backend.tally.settled(1) == (3, 0)


def test_a_master_that_lost_the_lock_mid_reset_forgets_its_walk_once_another_finished_it(thousands):
    master, spider = make_master(thousands, BATCH_RESET_CHUNK=100)
    patrol(master)
    assert master.walking
    successor, _ = make_master(thousands)
    patrol_until(successor, lambda: not spider.runtime.store.last_batch().resetting, message="the successor's reset")
    patrol(master)                           # the lock back: its walk is over, so patrols wait again
    assert master.reset is None and not master.walking


def test_a_batch_closes_soon_after_its_last_write_back_whatever_the_patrol_interval(backend, site):
    """The last write-back wakes the master (a patrol every 60 s here): the batch closes within half a second on
    an idle machine, within two on a busy one (both read by the test's polling, which a busy machine delays too),
    thirty times sooner than the patrol would."""
    from harness import InProcessBatch
    from spiders.seed import CrawlTask
    backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 41)])
    spider = lambda: CrawlTask(batch_store=backend.store(), settings=backend.settings(BATCH_MONITOR_INTERVAL=60))  # noqa: E731
    with InProcessBatch(spider):
        wait_for(lambda: set(backend.states().values()) == {D}, timeout=30, interval=0.01, message="every task done")
        all_done = time.monotonic()
        wait_for(lambda: backend.records() and backend.records()[-1]["is_done"], timeout=30, interval=0.01,
                 message="the batch closed")
        assert time.monotonic() - all_done < 2.0
