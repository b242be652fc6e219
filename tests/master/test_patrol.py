"""Each step of the master's patrol, on every store (SPEC Part 1 "One patrol", Part 3 "Batches")."""
import logging
import threading
from datetime import datetime

import pytest

from batchd.config import Settings
from batchd.master.patrol import FIRST_CLAIM
from batchd.service.lifecycle import StopFlag
from batchd.schedule import next_due
from batchd.model import BatchRecord
from batchd.task import TaskState
from harness import InProcessBatch, make_master, patrol_until, stays_true, wait_for, work_off
from spiders.seed import CrawlTask

P, D, R, F = TaskState.PENDING, TaskState.DONE, TaskState.PROCESSING, TaskState.FAILED


def patrol(master):
    return master.patrol(StopFlag())


def test_claims_at_most_push_limit_and_keeps_the_queue_just_ahead(backend):
    backend.create_tasks([f"http://x.invalid/{i}" for i in range(10)])
    master, spider = make_master(backend, BATCH_PUSH_LIMIT=3)
    queue = spider.runtime.backend.leases
    patrol(master)
    assert sorted(backend.states().values()) == [P] * 7 + [R] * 3
    assert queue.pending_count() == 3
    patrol(master)                       # the queue is full: nothing more is claimed
    assert list(backend.states().values()).count(R) == 3
    lease = queue.lease("test-token", 60)
    assert lease.task_id == 1 and lease.task["url"] == "http://x.invalid/0"
    patrol(master)                       # one slot freed in the queue: one more claimed
    assert list(backend.states().values()).count(R) == 4
    assert queue.pending_count() == 3


def test_an_empty_queue_is_fed_a_first_small_claim_then_the_rest(backend, monkeypatch):
    backend.create_tasks([f"http://x.invalid/{i}" for i in range(FIRST_CLAIM + 300)])
    master, spider = make_master(backend, BATCH_PUSH_LIMIT=FIRST_CLAIM + 200)
    claims = []
    claim = master.store.claim
    monkeypatch.setattr(master.store, "claim", lambda limit, upto=None: claims.append(limit) or claim(limit, upto))
    patrol(master)
    assert claims == [FIRST_CLAIM, 200]        # the workers start on the first while the rest is claimed
    assert spider.runtime.backend.leases.pending_count() == FIRST_CLAIM + 200
    spider.runtime.backend.leases.lease("test-token", 60)
    patrol(master)                             # a queue that is not empty: one claim of what it has room for
    assert claims == [FIRST_CLAIM, 200, 1]


def test_expired_lease_goes_back_to_pending_and_is_pushed_again(backend, caplog):
    backend.create_tasks(["http://x.invalid/1", "http://x.invalid/2"])
    master, spider = make_master(backend)
    queue = spider.runtime.backend.leases
    patrol(master)
    held = queue.lease("holder-1", 0.2)
    with caplog.at_level(logging.WARNING, logger="batchd"):
        patrol_until(master, lambda: queue.leased_count() == 0, message="a patrol reclaiming the expired 0.2 s lease")
    assert "reclaimed 1 tasks whose lease expired" in caplog.text
    assert queue.leased_count() == 0
    assert queue.known([str(held.task_id)]) == {str(held.task_id)}      # pushed again
    assert queue.release([held]) == []                                   # the old holder no longer owns it
    assert queue.count_attempts([held.task_id]) == [3]                   # two leases so far, +1 now


def test_processing_rows_no_queue_knows_are_reset_once_stale(backend, caplog):
    backend.create_tasks(["http://x.invalid/1", "http://x.invalid/2", "http://x.invalid/3"])
    master, spider = make_master(backend, BATCH_LOST_TASK_STALE=60, BATCH_PUSH_LIMIT=1)
    patrol(master)                                   # task 1 claimed and queued
    backend.set_state(1, R, age_seconds=120)         # queued for long: waiting, not lost
    backend.set_state(2, R, age_seconds=120)         # Redis lost it (restarted empty)
    backend.set_state(3, R, age_seconds=5)           # lost too, but not stale yet
    with caplog.at_level(logging.WARNING, logger="batchd"):
        patrol(master)
    states = backend.states()
    assert states[1] == R and states[3] == R
    assert states[2] == P                            # reset (the queue is full, so not re-claimed)
    assert "reset 1 tasks in processing that no queue holds" in caplog.text


def test_progress_is_written_to_the_record_and_logged(backend, caplog):
    backend.create_tasks([f"http://x.invalid/{i}" for i in range(5)])
    master, spider = make_master(backend)
    with caplog.at_level(logging.INFO, logger="batchd"):
        patrol(master)
    assert "批次进度 0/5" in caplog.text
    work_off(spider.runtime, {1: D, 2: F})
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="batchd"):
        patrol(master)
    assert "批次进度 2/5" in caplog.text
    record = backend.records()[-1]
    assert (record["total_count"], record["done_count"], record["fail_count"], record["is_done"]) == (5, 1, 1, False)


def test_rows_added_mid_batch_join_the_total(backend, caplog):
    backend.create_tasks(["http://x.invalid/1"])
    master, _ = make_master(backend)
    patrol(master)
    backend.add_task("http://x.invalid/2")
    with caplog.at_level(logging.INFO, logger="batchd"):
        patrol(master)
    assert "批次进度 0/2" in caplog.text
    assert backend.records()[-1]["total_count"] == 2


def test_batch_closes_when_every_task_is_settled(backend):
    backend.create_tasks(["http://x.invalid/1", "http://x.invalid/2"])
    master, spider = make_master(backend)
    assert patrol(master) is False
    work_off(spider.runtime, {1: D, 2: F})
    assert patrol(master) is True
    record = backend.records()[-1]
    assert record["is_done"] and (record["done_count"], record["fail_count"]) == (1, 1)
    assert spider.runtime.backend.leases.is_done()


def test_a_due_batch_resets_every_task_and_clears_the_queue(backend):
    backend.create_tasks(["http://x.invalid/1", "http://x.invalid/2", "http://x.invalid/3"])
    master, spider = make_master(backend, BATCH_INTERVAL=7)
    patrol(master)
    work_off(spider.runtime, {1: D, 2: F, 3: D})
    assert patrol(master) is True
    backend.age_last_batch(days=6)
    assert patrol(master) is True and len(backend.records()) == 1      # not due yet
    backend.age_last_batch(days=1)
    assert patrol(master) is False
    records = backend.records()
    assert len(records) == 2 and not records[-1]["is_done"] and records[-1]["total_count"] == 3
    assert sorted(backend.states().values()) == [R, R, R]          # reset, then claimed again
    assert not spider.runtime.backend.leases.is_done()


def test_an_unfinished_batch_past_its_interval_is_overdue_not_replaced(backend, caplog):
    backend.create_tasks(["http://x.invalid/1"])
    master, _ = make_master(backend, BATCH_INTERVAL=1)
    patrol(master)
    backend.age_last_batch(days=2)
    with caplog.at_level(logging.WARNING, logger="batchd"):
        patrol(master)
    assert "overdue" in caplog.text
    assert len(backend.records()) == 1


def test_an_interrupted_reset_is_finished_by_the_next_master_before_it_claims(backend, caplog):
    backend.create_tasks([f"http://x.invalid/{i}" for i in range(10)])
    master, spider = make_master(backend, BATCH_RESET_CHUNK=3)
    patrol(master)
    work_off(spider.runtime, {task_id: D for task_id in range(1, 11)})
    assert patrol(master) is True
    backend.age_last_batch(days=7)
    batch = master.open_batch(spider.runtime.store.last_batch())     # the master dies after a chunk and a claim
    assert master.reset.step() and master.refill(batch, upto=master.reset.after) == 3
    record = backend.records()[-1]
    assert len(backend.records()) == 2 and record["reset_cursor"] == "[3,3]"
    assert [state for _, state in sorted(backend.states().items())] == [R] * 3 + [D] * 7

    successor, _ = make_master(backend, BATCH_RESET_CHUNK=3)
    calls = []
    spy_on_resets_and_claims(successor, calls)
    with caplog.at_level(logging.INFO, logger="batchd"):
        patrol(successor)
    assert "going on with its reset after id 3 (3 rows walked" in caplog.text
    # Rows 1 to 3, claimed already, are not reset again; nothing is claimed before the reset is over.
    *resets, claim = calls
    assert resets[0][0] == 3 and resets[-1][1] == 10 and claim == ("claim", None)
    assert all(upper == next_after for (_, upper), (next_after, _) in zip(resets, resets[1:]))
    record = backend.records()[-1]
    assert record["reset_cursor"] is None and record["total_count"] == 10
    assert set(backend.states().values()) == {R}
    assert spider.runtime.backend.leases.pending_count() == 10       # each task queued once


def spy_on_resets_and_claims(master, calls: list) -> None:
    """Note each chunk a master resets, and each claim it makes (in order, on the same list)."""
    store = master.store
    reset_chunk, claim = store.reset_chunk, store.claim
    store.reset_chunk = lambda after, upper: calls.append((after, upper)) or reset_chunk(after, upper)
    store.claim = lambda limit, upto=None: calls.append(("claim", upto)) or claim(limit, upto)


@pytest.mark.parametrize("opened, interval, unit, due", [
    (datetime(2026, 3, 1, 23, 59), 1, "day", datetime(2026, 3, 2, 0, 0)),
    (datetime(2026, 3, 1, 2, 0), 7, "day", datetime(2026, 3, 8, 0, 0)),
    (datetime(2026, 3, 1, 10, 45), 2, "hour", datetime(2026, 3, 1, 12, 0)),
    (datetime(2026, 12, 31, 23, 30), 1, "hour", datetime(2027, 1, 1, 0, 0)),
])
def test_next_batch_is_due_by_calendar(opened, interval, unit, due):
    settings = Settings(BATCH_INTERVAL=interval, BATCH_INTERVAL_UNIT=unit)
    assert next_due(BatchRecord(id=1, batch_date=opened), settings, store=None) == due


class HeldSpider(CrawlTask):
    """Each callback waits for the test's word: the worker's threads hold their leases meanwhile."""
    go_on = threading.Event()

    def parse(self, request, response, task):
        self.go_on.wait(30)
        yield from super().parse(request, response, task)


def test_a_worker_wakes_the_master_once_half_the_queue_is_leased(backend, site):
    backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 21)])
    master, _ = make_master(backend, BATCH_PUSH_LIMIT=20)
    queue, wake = master.leases, master.wake
    patrol_until(master, lambda: queue.pending_count() == 20, message="the batch's 20 tasks in the queue")
    while wake.wait_for_wake(0):
        pass                     # the wake-ups before the workers' are not this test's
    HeldSpider.go_on.clear()

    def spider(threads):
        # A place at the host for every thread: a task finding none would be set aside, and its thread
        # would lease another (hosts/set_aside.py), so a slow fetch would lease more than one per thread.
        return lambda: HeldSpider(batch_store=backend.store(),
                                  settings=backend.settings(BATCH_PUSH_LIMIT=20, SPIDER_THREAD_COUNT=threads,
                                                            CONCURRENT_REQUESTS_PER_DOMAIN=16))

    with InProcessBatch(spider(9), master=False) as batch:
        try:
            wait_for(lambda: queue.pending_count() == 11, message="9 tasks leased, one per thread")
            stays_true(lambda: not wake.wait_for_wake(0), 0.5, message="no wake-up with 11 of 20 left")
            batch.spider_factory = spider(1)
            batch.start_worker("worker 10")
            wait_for(lambda: queue.pending_count() <= 10, message="the tenth lease")
            assert wake.wait_for_wake(5), "the lease that left 10 of 20 woke the master"
        finally:
            HeldSpider.go_on.set()
