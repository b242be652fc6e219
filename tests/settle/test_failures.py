"""Failure records (`<task_table>_failure`), on every store, end to end through a worker: each way a task
fails leaves its reason, a later failure of the task in the batch replaces the earlier one, `batchd failed`
lists and counts them, and `batchd requeue --failed` puts the failed tasks of the open batch back to be
crawled again: through the commands' functions on every store, and the commands themselves against MariaDB
and Redis."""
import json
import socket
import threading

import pytest

from batchd.errors import ConfigError
from batchd.control.requeue import requeue_failed
from batchd.cli.failed_text import render_text
from batchd.reporting.failed_tasks import NoSuchBatch, failed_tasks
from batchd.task import TaskState
from harness import InProcessBatch, batch_done, settle, spider_factory, wait_for
from spiders.faulty import SpinningCrawlTask
from spiders.seed import CrawlTask
from supervised import SEED, batchd, one_error_line
from taskdb import bring_back

D, F = TaskState.DONE, TaskState.FAILED
CLOSED_PORT = "http://127.0.0.1:9/nothing"      # discard: nothing listens, the connection is refused


class FailingSpider(CrawlTask):
    """Fails each task its own way, chosen by the task's URL."""

    def task_requests(self, task):
        if "errback" in task["url"]:
            yield task_request(task, errback=self.gone)
        else:
            yield task_request(task)

    def parse(self, request, response, task):
        url = task["url"]
        if url.endswith("/page/2"):
            raise ValueError("no title here")
        if url.endswith("/page/3"):
            yield {"url": url, "value": object()}          # not JSON: BadItem where it is yielded
        elif url.endswith("/page/4"):
            self.update_task(task["id"], ok=False)
        else:
            yield from super().parse(request, response, task)

    def gone(self, request, failure, task):
        self.update_task(task["id"], ok=False)


def task_request(task, **options):
    import batchd
    return batchd.Request(task["url"], callback="parse", **options)


def test_every_way_a_task_fails_leaves_its_reason(backend, site):
    backend.create_tasks([site.url("/status/404"), site.url("/page/2"), site.url("/page/3"), site.url("/page/4"),
                          site.url("/status/500"), CLOSED_PORT, site.url("/status/410?errback"), site.url("/page/1")])
    states = settle(backend, FailingSpider, SPIDER_MAX_RETRY_TIMES=1)
    assert states == {1: F, 2: F, 3: F, 4: F, 5: F, 6: F, 7: F, 8: D}
    records = {task_id: row for (batch_id, task_id), row in backend.failures().items() if batch_id == 1}
    assert sorted(records) == [1, 2, 3, 4, 5, 6, 7], "one record per failed task, none for the task done"
    shown = {task_id: (row["reason"], row["status"], row["error_class"], row["attempts"])
             for task_id, row in records.items()}
    assert shown[1] == ("HTTP 404", 404, None, 1)
    assert shown[2] == ("ValueError: no title here", None, "ValueError", None)
    assert shown[3][0].startswith("BadItem: ") and shown[3][2] == "BadItem"
    assert shown[4] == ("marked failed by the spider", None, None, None)
    assert shown[5] == ("HTTP 500 after 2 attempts", 500, None, 2)
    assert shown[6][0].startswith("ConnectionError after 2 attempts: ") and shown[6][1:] == (None, "ConnectionError", 2)
    assert shown[7] == ("HTTP 410", 410, None, 1), "an errback's update_task(ok=False): the request at hand"
    assert records[1]["url"] == site.url("/status/404") and records[2]["url"] == site.url("/page/2")
    assert records[4]["url"] is None
    assert {row["host"] for row in records.values()} == {socket.gethostname()}
    assert all(row["time"] is not None for row in records.values())


def test_task_timeout_leaves_its_reason(backend, site, monkeypatch):
    monkeypatch.setenv("TEST_FAULT_TASK", "1")
    backend.create_tasks([site.url("/page/1"), site.url("/page/2")])
    assert settle(backend, SpinningCrawlTask, TASK_TIMEOUT=1) == {1: F, 2: D}
    (key, timed_out), = backend.failures().items()
    assert key == (1, 1)
    assert (timed_out["reason"], timed_out["error_class"]) == ("still being processed after TASK_TIMEOUT=1 s",
                                                               "TaskTimedOut")
    assert timed_out["url"] == site.url("/page/1")


class ForgetfulSpider(CrawlTask):
    def parse(self, request, response, task):
        yield {"url": task["url"]}                 # ... and never update_task()


def test_the_attempt_limit_leaves_its_reason(backend, site):
    backend.create_tasks([site.url("/page/1")])
    assert settle(backend, ForgetfulSpider, BATCH_TASK_MAX_ATTEMPTS=2) == {1: F}
    record = backend.failures()[(1, 1)]
    assert (record["reason"], record["attempts"], record["url"]) == (
        "leased 2 times without a write-back (BATCH_TASK_MAX_ATTEMPTS=2)", 2, None)


class MoodySpider(CrawlTask):
    """Fails task 1 with another error at each run."""

    runs = 0

    def parse(self, request, response, task):
        MoodySpider.runs += 1
        raise RuntimeError(f"run {MoodySpider.runs}")


def test_a_later_failure_in_the_batch_replaces_the_earlier_one(backend, site):
    MoodySpider.runs = 0
    backend.create_tasks([site.url("/page/1")])
    assert settle(backend, MoodySpider) == {1: F}
    bring_back(backend, 1)
    assert settle(backend, MoodySpider) == {1: F}
    assert [row["reason"] for row in backend.failures().values()] == ["RuntimeError: run 2"]


def test_update_task_outside_a_worker_records_the_spiders_word(backend, site):
    backend.create_tasks([site.url("/page/1"), site.url("/page/2")])
    assert settle(backend, CrawlTask) == {1: D, 2: D}
    spider = spider_factory(backend, CrawlTask)()
    spider.update_task(2, ok=False)      # DONE is no source of MARK_FAILED: nothing moves, nothing recorded
    assert backend.states() == {1: D, 2: D} and not backend.failures()
    backend.set_state(2, 0)
    spider.update_task(2, ok=False)
    assert backend.states()[2] == F
    assert backend.failures()[(1, 2)]["reason"] == "marked failed by the spider"


class HolderSpider(CrawlTask):
    """Even tasks fail by update_task(ok=False), odd ones succeed by update_task(ok=True); each says which
    worker's gate the runtime's index found holding it, and whether its run is the one in this thread."""

    found: dict = {}

    def parse(self, request, response, task):
        gate, run = self.runtime.held.find(task["id"])
        HolderSpider.found[task["id"]] = (gate, run.thread_ident == threading.get_ident() and run.task_id == task["id"])
        yield from super().parse(request, response, task)
        self.update_task(task["id"], ok=task["id"] % 2 == 1)


def test_update_task_reaches_the_worker_holding_the_task_through_the_index(backend, site):
    """Three workers of one spider (one runtime) in a process: each task's update_task goes to the worker
    whose thread holds it, found by the task's key, and the index is empty once they have settled."""
    HolderSpider.found = {}
    backend.create_tasks([site.url(f"/page/{n}") for n in range(1, 13)])
    spider = spider_factory(backend, HolderSpider, SPIDER_THREAD_COUNT=2)()
    with InProcessBatch(lambda: spider, workers=3) as batch:
        wait_for(lambda: set(backend.states().values()) <= {D, F}, message="every task settled")
        gates = {loop.pipeline for name, _, _, loop in batch.loops if name.startswith("worker")}
    assert backend.states() == {n: (D if n % 2 else F) for n in range(1, 13)}
    assert all(own and gate in gates for gate, own in HolderSpider.found.values()), HolderSpider.found
    assert len(HolderSpider.found) == 12 and spider.runtime.held.find(1) is None
    assert {row["reason"] for row in backend.failures().values()} == {"marked failed by the spider"}


class GatedSpider(CrawlTask):
    """Task 1 fails the first time only; task 3 waits at the gate, holding the batch open."""

    gate = threading.Event()

    def parse(self, request, response, task):
        if task["id"] == 3:
            while not self.gate.wait(0.05):
                pass
        yield from super().parse(request, response, task)


def test_requeue_during_an_open_batch_crawls_the_failed_tasks_again(backend, site):
    GatedSpider.gate.clear()
    backend.create_tasks([site.url("/flaky/a?fail=1&status=404"), site.url("/flaky/b?fail=1&status=410"),
                          site.url("/page/3"), site.url("/status/404")])
    make = spider_factory(backend, GatedSpider, SPIDER_THREAD_COUNT=2)
    runtime = make().runtime
    with InProcessBatch(make):
        try:
            wait_for(lambda: [backend.states()[i] for i in (1, 2, 4)] == [F, F, F], message="three tasks failed")
            report = failed_tasks(runtime)
            assert (report["batch"], report["open"], report["total"]) == (1, True, 3)
            assert report["kinds"] == [{"kind": "HTTP 404", "count": 2}, {"kind": "HTTP 410", "count": 1}]
            assert [f["task_id"] for f in report["failures"]] == [1, 2, 4]
            assert "batch 1 (open): 3 failed tasks: 2 HTTP 404, 1 HTTP 410" in render_text(report)
            assert failed_tasks(runtime, reason="http 41")["total"] == 1
            assert failed_tasks(runtime, limit=1)["failures"][0]["task_id"] == 1

            assert requeue_failed(runtime, reason="/flaky/") == "batch 1: 0 failed tasks whose reason holds '/flaky/' " \
                                                               "back to pending", "the reason, not the URL"
            said = requeue_failed(runtime, reason="HTTP 4")
            assert said == "batch 1: 3 failed tasks whose reason holds 'HTTP 4' back to pending; the workers crawl " \
                           "them again"
            wait_for(lambda: [backend.states()[i] for i in (1, 2)] == [D, D], message="tasks 1 and 2 done")
            GatedSpider.gate.set()
            wait_for(lambda: batch_done(backend), message="the batch closed")
        finally:
            GatedSpider.gate.set()     # (the worker stops only once its task is past the gate)
    assert backend.states() == {1: D, 2: D, 3: D, 4: F}
    record = backend.records()[-1]
    assert (record["done_count"], record["fail_count"]) == (3, 1)
    assert failed_tasks(runtime)["total"] == 1, "only the task still failed"
    every = failed_tasks(runtime, every=True)
    assert [f["task_id"] for f in every["failures"]] == [1, 2, 4], "the records of requeued tasks stay"
    assert requeue_failed(runtime) == ("batch 1 is closed; its failed tasks are crawled again in the next batch "
                                       "(batchd open-batch opens it now)")
    assert backend.states()[4] == F
    with pytest.raises(NoSuchBatch, match=r"--batch 2: no such batch \(the last is 1\)"):
        failed_tasks(runtime, batch_id=2)


class ForgetfulOnceSpider(GatedSpider):
    """Task 1 never calls update_task the first time: its second lease is one too many."""

    forgot = False

    def parse(self, request, response, task):
        if task["id"] == 1 and not ForgetfulOnceSpider.forgot:
            ForgetfulOnceSpider.forgot = True
            yield {"url": task["url"]}
            return
        yield from super().parse(request, response, task)


def test_requeue_gives_a_task_failed_for_its_attempts_fresh_ones(backend, site):
    GatedSpider.gate.clear()
    ForgetfulOnceSpider.forgot = False
    backend.create_tasks([site.url("/page/1"), site.url("/page/2"), site.url("/page/3")])
    spiders = spider_factory(backend, ForgetfulOnceSpider, BATCH_TASK_MAX_ATTEMPTS=1, SPIDER_THREAD_COUNT=2)
    runtime = spiders().runtime
    with InProcessBatch(spiders):
        try:
            wait_for(lambda: backend.states()[1] == F, message="task 1 failed for its attempts")
            assert failed_tasks(runtime)["kinds"] == [
                {"kind": "leased 1 times without a write-back (BATCH_TASK_MAX_ATTEMPTS=1)", "count": 1}]
            assert requeue_failed(runtime).startswith("batch 1: 1 failed task back to pending")
            wait_for(lambda: backend.states()[1] == D, message="task 1 leased again, and done")
            GatedSpider.gate.set()
            wait_for(lambda: batch_done(backend), message="the batch closed")
        finally:
            GatedSpider.gate.set()     # (the worker stops only once its task is past the gate)
    assert backend.states() == {1: D, 2: D, 3: D}


def test_an_earlier_batch_shows_every_record_whatever_the_tasks_state_now():
    from batchd import MemoryBatchStore
    from batchd.settle.failures import failure

    store = MemoryBatchStore([{"id": 1, "url": "http://x.invalid/1"}, {"id": 2, "url": "http://x.invalid/2"}])
    spider = CrawlTask(batch_store=store)
    store.open(spider.runtime.layout)
    store.insert_batch(1, "day", 2)
    store.record_failures([failure(1, 1, "HTTP 404", status=404), failure(2, 1, "HTTP 503 after 4 attempts",
                                                                           status=503, attempts=4)])
    store.insert_batch(1, "day", 2)      # batch 2: every task pending again
    report = failed_tasks(spider.runtime, batch_id=1)
    assert (report["open"], report["still_failed"], report["total"]) == (False, False, 2)
    assert render_text(report).startswith("batch 1 (closed): 2 failure records: 1 HTTP 404, 1 HTTP 503\n")
    assert failed_tasks(spider.runtime)["total"] == 0, "batch 2: none failed"


def test_a_store_without_failure_records_says_so():
    from batchd import MemoryBatchStore
    from batchd.backends.store import BatchStore

    class Plain(MemoryBatchStore):
        failures = BatchStore.failures
        failure_groups = BatchStore.failure_groups

    spider = CrawlTask(batch_store=Plain([{"id": 1, "url": "http://x.invalid/"}]))
    spider.runtime.store.open(spider.runtime.layout)
    spider.runtime.store.insert_batch(1, "day", 1)
    with pytest.raises(ConfigError, match="keeps no failure records"):
        failed_tasks(spider.runtime)


# -- the commands, against MariaDB and Redis
def test_the_failed_command_lists_counts_and_filters(mysql_backend, site):
    mysql_backend.create_tasks([site.url("/status/404"), site.url("/status/404?again"), CLOSED_PORT,
                                site.url("/page/1")])
    with InProcessBatch(spider_factory(mysql_backend, CrawlTask, SPIDER_MAX_RETRY_TIMES=0)):
        wait_for(lambda: batch_done(mysql_backend), message="the batch closed")
    assert mysql_backend.states() == {1: F, 2: F, 3: F, 4: D}
    listed = batchd("failed", SEED, backend=mysql_backend)
    assert listed.returncode == 0, listed.stderr
    head, blank, titles, *rows = listed.stdout.splitlines()
    assert head == "batch 1 (closed): 3 failed tasks: 2 HTTP 404, 1 ConnectionError"
    assert titles.split() == ["id", "time", "tries", "site", "url", "reason", "worker"]
    assert rows[0].split()[4] == "127.0.0.1" and rows[0].split()[-1] == socket.gethostname()[:24]
    assert [row.split()[0] for row in rows] == ["1", "2", "3"]
    assert site.url("/status/404") in rows[0] and "HTTP 404" in rows[0]
    assert "ConnectionError: " in rows[2] and CLOSED_PORT in rows[2]

    report = json.loads(batchd("failed", SEED, "--json", "--reason", "connection", backend=mysql_backend).stdout)
    assert (report["batch"], report["open"], report["total"]) == (1, False, 1)
    failure, = report["failures"]
    assert (failure["task_id"], failure["url"], failure["error_class"], failure["attempts"]) == (
        3, CLOSED_PORT, "ConnectionError", 1)
    assert failure["host"] == socket.gethostname() and failure["time"]
    limited = batchd("failed", SEED, "--limit", "1", backend=mysql_backend).stdout
    assert "... 2 more (--limit N shows more" in limited

    nothing = batchd("failed", SEED, "--batch", "5", backend=mysql_backend)
    assert nothing.returncode == 1
    assert "--batch 5: no such batch (the last is 1)" in one_error_line(nothing)
    closed = batchd("requeue", "--failed", SEED, backend=mysql_backend)
    assert (closed.returncode, closed.stdout.strip()) == (0, "batch 1 is closed; its failed tasks are crawled again "
                                                             "in the next batch (batchd open-batch opens it now)")
    assert mysql_backend.states() == {1: F, 2: F, 3: F, 4: D}
    assert batchd("requeue", SEED, backend=mysql_backend).returncode == 2, "--failed is required"


def test_the_requeue_command_during_an_open_batch(mysql_backend, site):
    GatedSpider.gate.clear()
    mysql_backend.create_tasks([site.url("/flaky/a?fail=1&status=404"), site.url("/flaky/b?fail=1&status=500"),
                                site.url("/page/3")])
    with InProcessBatch(spider_factory(mysql_backend, GatedSpider, SPIDER_THREAD_COUNT=2, SPIDER_MAX_RETRY_TIMES=0)):
        try:
            wait_for(lambda: [mysql_backend.states()[i] for i in (1, 2)] == [F, F], message="two tasks failed")
            requeued = batchd("requeue", "--failed", "--reason", "HTTP 404", SEED, backend=mysql_backend)
            assert (requeued.returncode, requeued.stdout.strip()) == (
                0, "batch 1: 1 failed task whose reason holds 'HTTP 404' back to pending; the workers crawl them again")
            wait_for(lambda: mysql_backend.states()[1] == D, message="task 1 crawled again, and done")
            assert mysql_backend.states()[2] == F
            listed = batchd("failed", SEED, backend=mysql_backend).stdout
            assert listed.startswith("batch 1 (open): 1 failed task: 1 HTTP 500\n")
            every = json.loads(batchd("failed", SEED, "--all", "--json", backend=mysql_backend).stdout)
            assert [f["task_id"] for f in every["failures"]] == [1, 2]
        finally:
            GatedSpider.gate.set()
        wait_for(lambda: batch_done(mysql_backend), message="the batch closed")
    assert mysql_backend.states() == {1: D, 2: F, 3: D}
    assert (mysql_backend.records()[-1]["done_count"], mysql_backend.records()[-1]["fail_count"]) == (2, 1)
