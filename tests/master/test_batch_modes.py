"""BATCH_MODE and BATCH_RESET_FAILED: what a new batch crawls and counts, on every store (issue 21, point 1)."""
import json
import logging

import pytest

from batchd.errors import ConfigError
from batchd.service.lifecycle import StopFlag
from batchd.task import TaskState
from harness import make_master, wait_for, work_off
from spiders.seed import CrawlTask
from audited_store import AuditedStore

P, D, R, F = TaskState.PENDING, TaskState.DONE, TaskState.PROCESSING, TaskState.FAILED


def patrol(master):
    return master.patrol(StopFlag())


def first_batch(backend, outcomes: dict, **settings):
    """A master of `settings` on tasks 1..len(outcomes), its first batch worked off with `outcomes`, closed."""
    backend.create_tasks([f"http://x.invalid/{i}" for i in range(1, len(outcomes) + 1)])
    master, spider = make_master(backend, **settings)
    patrol(master)

    def worked_off() -> bool:
        # A patrol walks the batch's reset for WALK_BUDGET seconds at most: on a busy machine the first one may
        # leave rows for the next, which queues them.
        work_off(spider.runtime, outcomes)
        return patrol(master)
    wait_for(worked_off, timeout=30, message="the first batch closed")
    return master, spider


def figures(record) -> tuple:
    return record["total_count"], record["done_count"], record["fail_count"]


def opening(record) -> dict:
    return json.loads(record["opening"])


def open_next(master, backend) -> None:
    """Patrols until the new batch's opening walk is over: a patrol walks it for WALK_BUDGET seconds at most, and
    on a busy machine the first one may not reach its end. None of them finishes the batch."""
    def walked() -> bool:
        assert patrol(master) is False
        return opening(backend.records()[-1]).get("opened_with") is not None
    wait_for(walked, timeout=30, message="the opening walk over")


def test_an_incremental_batch_crawls_the_pending_rows_only_and_counts_them_only(backend, caplog):
    master, spider = first_batch(backend, {1: D, 2: F, 3: D}, BATCH_MODE="incremental")
    assert figures(backend.records()[0]) == (3, 2, 1)      # every row was pending: the first batch crawls all
    backend.add_task("http://x.invalid/4")
    backend.age_last_batch(days=7)
    with caplog.at_level(logging.INFO, logger="batchd"):
        open_next(master, backend)
    assert "nothing is reset; the pending tasks of `crawl_task` are crawled" in caplog.text
    assert "1 tasks in the batch; 2 done and 1 failed left as they were" in caplog.text
    assert [state for _, state in sorted(backend.states().items())] == [D, F, D, R]
    second = backend.records()[1]
    assert second["total_count"] == 1 and second["reset_cursor"] is None
    assert opening(second) == {"mode": "incremental", "reset_failed": True, "kept_done": 2, "kept_failed": 1,
                               "opened_with": 1}
    work_off(spider.runtime, {4: D})
    assert patrol(master) is True
    assert figures(backend.records()[1]) == (1, 1, 0)      # the batch's own task, not the table's four


def test_a_full_batch_not_resetting_failed_tasks_leaves_them_outside_the_batch(backend):
    master, spider = first_batch(backend, {1: D, 2: F, 3: D, 4: F}, BATCH_RESET_FAILED=False)
    assert opening(backend.records()[0])["kept_failed"] == 0      # every row was pending
    backend.age_last_batch(days=7)
    open_next(master, backend)
    assert [state for _, state in sorted(backend.states().items())] == [R, F, R, F]
    second = backend.records()[1]
    assert second["total_count"] == 2
    assert opening(second) == {"mode": "full", "reset_failed": False, "kept_done": 0, "kept_failed": 2,
                               "opened_with": 2}
    work_off(spider.runtime, {1: D, 3: F})
    assert patrol(master) is True
    assert figures(backend.records()[1]) == (2, 1, 1)      # tasks 2 and 4 failed in the first batch, not here


def test_a_full_batch_by_default_resets_every_task(backend):
    master, _ = first_batch(backend, {1: D, 2: F})
    backend.age_last_batch(days=7)
    open_next(master, backend)
    assert set(backend.states().values()) == {R}
    second = backend.records()[1]
    assert second["total_count"] == 2
    assert opening(second) == {"mode": "full", "reset_failed": True, "kept_done": 0, "kept_failed": 0,
                               "opened_with": 2}


def test_an_incremental_opening_a_dead_master_left_is_finished_with_its_counts(backend, caplog):
    """The master dies after one chunk of an incremental batch's walk; the next one goes on from the
    record, with the settled rows the first one counted, and the batch's figures are its own."""
    master, spider = first_batch(backend, {i: (F if i % 4 == 0 else D) for i in range(1, 11)},
                                 BATCH_MODE="incremental", BATCH_RESET_CHUNK=3)
    backend.add_task("http://x.invalid/11")
    backend.add_task("http://x.invalid/12")
    backend.age_last_batch(days=7)
    batch = master.open_batch(spider.runtime.store.last_batch())
    assert master.reset.step()                                         # rows 1 to 3: 3 done
    assert opening(backend.records()[-1])["kept_done"] == 3
    successor, _ = make_master(backend, BATCH_MODE="full", BATCH_RESET_CHUNK=3)   # the record rules, not this
    with caplog.at_level(logging.INFO, logger="batchd"):
        patrol(successor)
    assert f"batch {batch.id}: going on with its reset after id 3" in caplog.text
    record = backend.records()[-1]
    assert record["total_count"] == 2 and opening(record)["kept_done"] == 8 and opening(record)["kept_failed"] == 2
    assert [state for _, state in sorted(backend.states().items())][10:] == [R, R]
    work_off(spider.runtime, {11: D, 12: F})
    assert patrol(successor) is True
    assert figures(backend.records()[-1]) == (2, 1, 1)


def test_a_store_that_keeps_no_openings_runs_full_batches_only(site):
    store = AuditedStore([{"id": 1, "url": site.url("/page/1")}])
    spider = CrawlTask(batch_store=store, settings={"BATCH_MODE": "incremental"})
    with pytest.raises(ConfigError, match=r"^BATCH_MODE=incremental, BATCH_RESET_FAILED=True: AuditedStore keeps "
                                          r"no record of how a batch opened"):
        spider.runtime.master()


def test_batch_mode_names_its_choices():
    from batchd.config import Settings, validate
    with pytest.raises(ConfigError, match=r"^setting BATCH_MODE: 'weekly' is not one of full, incremental, due$"):
        validate(Settings(BATCH_MODE="weekly"))
