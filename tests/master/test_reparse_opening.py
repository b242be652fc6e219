"""A reparse batch as the master opens, walks and closes it, on every store (master/reparse_opening.py): the tasks it
takes (all, a host's, one), its figures its own, and a calendar it does not move."""
import pytest

from batchd.model import BatchOpening
from batchd.master.reparse_opening import reparse_request
from batchd.schedule import next_due
from batchd.service.lifecycle import StopFlag
from batchd.task import TaskState
from harness import make_master, patrol_until, work_off

P, D, R, F = TaskState.PENDING, TaskState.DONE, TaskState.PROCESSING, TaskState.FAILED
URLS = ["http://a.example/1", "http://a.example/2", "http://b.example/3", "http://b.example/4"]


def crawled_once(backend, **settings):
    """A master of the seed spider, after a first batch (a crawl) closed: task 4 failed, the others done."""
    backend.create_tasks(URLS)
    master, spider = make_master(backend, **settings)
    master.patrol(StopFlag())
    work_off(spider.runtime, {1: D, 2: D, 3: D, 4: F})
    patrol_until(master, lambda: master.batch.is_done, message="the crawl closed")
    return master, spider


def reparsed(master, spider, opening: BatchOpening, outcomes: dict):
    """The reparse asked, opened, its tasks worked off with `outcomes`, closed: its record."""
    spider.runtime.backend.leases.ask_open_batch(False, opening.to_json())
    patrol_until(master, lambda: master.batch.id == 2 and not master.batch.resetting, message="the reparse opened")
    work_off(spider.runtime, outcomes)
    patrol_until(master, lambda: master.batch.is_done, message="the reparse closed")
    return master.batch


@pytest.mark.parametrize("opening, taken", [(reparse_request(1), {1, 2, 3, 4}),
                                            (reparse_request(1, host="B.example"), {3, 4}),
                                            (reparse_request(1, task="2"), {2})])
def test_a_reparse_takes_its_tasks_and_counts_only_them(backend, opening, taken):
    master, spider = crawled_once(backend, BATCH_TASK_HOST_FIELD="url")
    batch = reparsed(master, spider, opening, {task_id: D for task_id in taken})
    assert batch.how_opened.reparse_of == 1 and batch.how_opened.is_reparse
    assert (batch.total_count, batch.done_count, batch.fail_count) == (len(taken), len(taken), 0)
    untouched = {1: D, 2: D, 3: D, 4: F}
    assert backend.states() == {task_id: D if task_id in taken else untouched[task_id] for task_id in untouched}
    assert backend.records()[-1]["outcome"] == "clean"


def test_a_reparse_moves_no_date_of_the_calendar(backend):
    master, spider = crawled_once(backend)
    backend.age_last_batch(days=3)       # the crawl three days ago, its reparse today: the next crawl as it said
    crawl = master.store.last_batch()
    batch = reparsed(master, spider, reparse_request(1), {1: D, 2: D, 3: D, 4: D})
    assert batch.calendar_date.replace(microsecond=0) == crawl.batch_date.replace(microsecond=0)
    assert batch.batch_date.date() > crawl.batch_date.date()             # opened today
    assert next_due(batch, master.settings, master.store) == next_due(crawl, master.settings, master.store)
