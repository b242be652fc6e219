"""`batchd pause`, `resume` and `open-batch` (batchd/control/actions.py) on every backend, with a master and a
worker running, and the commands themselves against MariaDB and Redis."""
import logging
import time

import pytest

from batchd.control import actions as control
from batchd.cli.status_text import render_status
from batchd.reporting.status import gather_status
from batchd.reporting.snapshots import status_line
from batchd.task import TaskState
from harness import InProcessBatch, spider_factory, stays_true, wait_for
from spiders.seed import CrawlTask
from supervised import SEED, batchd, one_error_line

D, F, PENDING = TaskState.DONE, TaskState.FAILED, TaskState.PENDING


def counts(backend) -> dict:
    states = list(backend.states().values())
    return {state: states.count(state) for state in set(states)}


def all_done(backend) -> bool:
    return set(backend.states().values()) == {D}


def test_a_paused_namespace_finishes_what_it_holds_and_takes_nothing_until_resumed(backend, site, caplog):
    backend.create_tasks([site.url(f"/slow?seconds=0.1&n={n}") for n in range(30)])
    factory = spider_factory(backend, CrawlTask, SPIDER_THREAD_COUNT=2, BATCH_PUSH_LIMIT=10)
    runtime = factory().runtime
    with caplog.at_level(logging.INFO, logger="batchd"), InProcessBatch(factory) as batch:
        wait_for(lambda: counts(backend).get(D, 0) >= 4, message="a few tasks done")
        assert "paused: no task is claimed or leased" in control.pause(runtime)
        wait_for(lambda: runtime.backend.leases.leased_count() == 0, message="the tasks in hand written back")
        held = counts(backend)
        stays_true(lambda: counts(backend) == held, 1.0, message="nothing moves while paused")
        assert held.get(D, 0) < 30 and not runtime.backend.leases.leased_count()
        status = gather_status(runtime)
        assert status["paused_since"] is not None and "PAUSED   since" in render_status(status)
        master = batch.loops[0][3]
        wait_for(lambda: master.paused_since is not None, message="the master saw the pause")
        assert "already paused" in control.pause(runtime)

        assert "resumed" in control.resume(runtime)
        wait_for(lambda: all_done(backend), message="every task done after resume")
    assert "paused since" in caplog.text and "resumed (batchd resume)" in caplog.text
    assert len(backend.items()) == 30


def test_status_line_says_paused_first():
    snapshot = {"role": "master", "workers_wanted": 0, "unflushed": 0}
    batch = {"batch_id": 3, "batch_is_done": 0, "batch_settled": 1, "batch_total": 9, "batch_rate": 0.5,
             "batch_paused_since": 1_700_000_000.0}
    assert status_line("master", snapshot, batch).startswith("master: paused since 2023-11-")


def test_open_batch_opens_the_next_now_and_refuses_while_one_is_open(backend, site, monkeypatch):
    backend.create_tasks([site.url(f"/page/{n}") for n in range(5)])
    factory = spider_factory(backend, CrawlTask)
    runtime = factory().runtime
    with InProcessBatch(factory):
        wait_for(lambda: backend.records() and backend.records()[-1]["is_done"], message="the first batch done")
        assert control.open_batch(runtime, force=False).startswith("batch 2 opened at")
        wait_for(lambda: len(backend.records()) == 2 and backend.records()[-1]["is_done"], message="batch 2 done")
    assert site.hits("/page/1") == 2

    backend.reopen_last_batch()
    with pytest.raises(control.BatchStillOpen, match="batch 2 is still open .*--force"):
        control.open_batch(runtime, force=False)


def test_open_batch_force_closes_the_open_one_as_it_stands(backend, site, caplog):
    backend.create_tasks([site.url(f"/slow?seconds=0.1&n={n}") for n in range(12)])
    factory = spider_factory(backend, CrawlTask, SPIDER_THREAD_COUNT=1)
    runtime = factory().runtime
    with caplog.at_level(logging.WARNING, logger="batchd"), InProcessBatch(factory):
        wait_for(lambda: counts(backend).get(D, 0) >= 2, message="a few tasks done")
        said = control.open_batch(runtime, force=True)
        assert said.startswith("batch 1 closed as it stood; batch 2 opened"), said
        first = backend.records()[0]
        assert first["is_done"] and first["done_count"] < 12
        wait_for(lambda: len(backend.records()) == 2 and backend.records()[-1]["is_done"], timeout=60,
                 message="batch 2 done")
    assert backend.records()[-1]["done_count"] == 12
    assert "closed by batchd open-batch --force" in caplog.text


def test_open_batch_without_a_master_opens_it_at_once(backend, site, caplog):
    """Issue 34: with no master running, open-batch waited 30 s for one and ended 69. It is the master for a
    moment: the record, the reset and the first claims, the lock let go; a master that starts later runs it."""
    backend.create_tasks([site.url("/page/1"), site.url("/page/2")])
    factory = spider_factory(backend, CrawlTask)
    runtime = factory().runtime
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="batchd"):
        said = control.open_batch(runtime, force=False)
    assert time.monotonic() - started < 5, "no wait for a master"
    assert said.startswith("batch 1 opened at") and "no master is running" in said, said
    assert "batchd open-batch: the next batch opens now" in caplog.text, "through the master's own path"
    assert runtime.backend.locks.lock_holder() is None, "the lock let go"
    assert [r["id"] for r in backend.records()] == [1] and not backend.records()[0]["is_done"]
    assert runtime.backend.leases.pending_count() == 2, "its tasks claimed into the queue"
    with InProcessBatch(factory):     # a master and a worker that start later run it
        wait_for(lambda: backend.records()[-1]["is_done"], message="the batch done")
    assert len(backend.records()) == 1 and set(backend.states().values()) == {D}


def test_open_batch_waits_for_a_master_holding_the_lock(backend, site, monkeypatch):
    """A master holds the lock but does not answer (stalled): the request stays, and the command says so."""
    backend.create_tasks([site.url("/page/1")])
    factory = spider_factory(backend, CrawlTask)
    monkeypatch.setattr(control, "OPEN_WAIT_LEAST", 0.5)
    runtime = factory().runtime
    lock = runtime.backend.locks.master_lock("elsewhere:1", 30.0)
    assert lock.acquire()
    try:
        with pytest.raises(control.NoMasterAnswered, match=r"\(elsewhere:1\) did not open the batch"):
            control.open_batch(runtime, force=False)
        assert backend.records() == []
    finally:
        lock.release()
    with InProcessBatch(factory):     # a master that starts later takes the request
        wait_for(lambda: backend.records() and backend.records()[-1]["is_done"], message="the batch done")


def test_the_commands_pause_resume_and_open_batch(mysql_backend):
    mysql_backend.create_tasks(["http://x.invalid/1"])
    paused = batchd("pause", SEED, backend=mysql_backend)
    assert paused.returncode == 0 and "paused" in paused.stdout
    status = batchd("status", SEED, backend=mysql_backend)
    assert "PAUSED   since" in status.stdout
    resumed = batchd("resume", SEED, backend=mysql_backend)
    assert resumed.returncode == 0 and "resumed" in resumed.stdout
    assert "PAUSED" not in batchd("status", SEED, backend=mysql_backend).stdout

    with InProcessBatch(spider_factory(mysql_backend, CrawlTask), workers=0):    # a master, no worker
        wait_for(lambda: mysql_backend.records(), message="the first batch opened")
        refused = batchd("open-batch", SEED, backend=mysql_backend)
        assert refused.returncode == 1 and "batch 1 is still open" in one_error_line(refused)
        forced = batchd("open-batch", "--force", SEED, backend=mysql_backend)
        assert forced.returncode == 0 and "batch 1 closed as it stood; batch 2 opened" in forced.stdout, forced.stderr


def test_the_command_open_batch_without_a_master_answers_at_once(mysql_backend):
    mysql_backend.create_tasks(["http://x.invalid/1"])
    started = time.monotonic()
    opened = batchd("open-batch", SEED, backend=mysql_backend)
    assert opened.returncode == 0 and "batch 1 opened at" in opened.stdout, opened.stderr
    assert "no master is running" in opened.stdout and time.monotonic() - started < 15
    assert mysql_backend.states() == {1: TaskState.PROCESSING}, "claimed into the queue"
