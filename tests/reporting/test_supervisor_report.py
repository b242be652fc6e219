"""A supervisor's report (reporting/supervisor_report.py): the figures it makes at a tick, from a real ledger
block, are the ones its snapshot, its STATUS= line and its /metrics gauges show; a scrape between two ticks
sees the last tick's; the board (real Redis) holds the snapshot the report made, and a worker-only
supervisor's STATUS= line takes the batch from the master's snapshot there."""
import collections
import os
import time
import uuid

import pytest

from batchd.config import Settings
from batchd.reporting.snapshots import supervisor_ports
from batchd.reporting.supervisor_report import Reporter, Supervised, SupervisedChild, SupervisorReport
from batchd.service.outages import Outage
from batchd.settle.ledger import LedgerBlock
from harness import wait_for
from procs import MemoryTree

MASTER, WORKER_1, WORKER_2, RETIRING = 0, 2, 3, 4      # rows: two master rows, then the workers'


def a_block() -> LedgerBlock:
    """A master on batch 7 (40 of 100 settled) and three workers: two serving, one retiring (told to stop);
    the second worker waits for Redis and MySQL."""
    block = LedgerBlock(master_rows=2, worker_rows=4, slots_per_worker=2)
    for row in (MASTER, WORKER_1, WORKER_2, RETIRING):
        block.prepare(row)
    master = block.row(MASTER)
    master.batch_id, master.settled, master.total, master.done_count, master.fail_count = 7, 40, 100, 38, 2
    master.next_due, master.queued, master.heartbeat = b"2030-01-01 00:00", 12, time.monotonic()
    for row, (done, failed, items, unflushed) in {WORKER_1: (10, 1, 30, 3), WORKER_2: (5, 0, 9, 0),
                                                  RETIRING: (2, 2, 4, 6)}.items():
        ledger = block.worker_ledger(row, 2)
        ledger.count(done=done, failed=failed, items=items)
        slot = ledger.acquire_slot()
        ledger.label(slot, f"task-{row}")
        ledger.add(slot, unflushed)
    since = time.time() - 30
    block.set_outages(WORKER_2, [Outage("Redis", "connection refused", 0.0, since, 0.0),
                                 Outage("MySQL", "gone away", 0.0, since + 5, 0.0)])
    return block


CHILDREN = (SupervisedChild("master", "master", 101, MASTER, True),
            SupervisedChild("worker", "worker 1", 102, WORKER_1, True),
            SupervisedChild("worker", "worker 2", 103, WORKER_2, True),
            SupervisedChild("worker", "worker 1", 104, RETIRING, False))


REPORTS: list = []      # each measures memory in a thread of its own, stopped after its test


@pytest.fixture(autouse=True)
def _stop_measuring():
    yield
    while REPORTS:
        REPORTS.pop().stop_measuring()


def a_report(role: str = "run", ports=None, namespace: str = "news", pid: int = 100, **settings) -> SupervisorReport:
    report = SupervisorReport(Reporter(role=role, host="box", instance=role, seat=role, pid=pid))
    report.adopt(Settings(**settings), namespace, namespace, ports)
    REPORTS.append(report)
    return report


def supervised(block: LedgerBlock, children: tuple = CHILDREN) -> Supervised:
    return Supervised(block, children, workers_wanted=2,
                      ended=collections.Counter(done=100, failed=7, items=300), restarts={"master": 0, "worker": 1})


def test_the_snapshot_the_status_line_and_the_gauges_show_one_ticks_figures():
    report = a_report()
    text = report.tick(supervised(a_block()))
    snapshot, gauges = report.snapshot(), report.metric_figures()

    # The figures: the rows of every worker alive and what the children gone left; alive: those not told to stop.
    assert (snapshot["done"], snapshot["failed"], snapshot["items"]) == (100 + 17, 7 + 3, 300 + 43)
    assert (snapshot["workers_alive"], snapshot["workers_wanted"], snapshot["master_alive"]) == (2, 2, 1)
    assert (snapshot["unflushed"], snapshot["in_flight"]) == (9, 3)
    assert (snapshot["batch_id"], snapshot["batch_settled"], snapshot["batch_total"]) == (7, 40, 100)
    assert (snapshot["outage_backend"], snapshot["outage_reason"]) == ("Redis+MySQL", "connection refused")

    # STATUS= says the snapshot's figures.
    assert text == report.status_text()
    assert text.startswith("run news: waiting for Redis+MySQL since ")
    assert "batch 7 40/100 (rate unknown yet, ETA unknown)" in text
    assert (f"workers 2/2 alive, {snapshot['done']} done {snapshot['failed']} failed here "
            f"({snapshot['rate']:.1f}/s), 9 unflushed items") in text

    # /metrics shows the same ones.
    assert {name: gauges[name] for name in ("workers_alive", "unflushed", "in_flight")} == \
        {name: snapshot[name] for name in ("workers_alive", "unflushed", "in_flight")}
    assert gauges["batch"] == {"id": snapshot["batch_id"], "total": snapshot["batch_total"],
                               "done": snapshot["batch_done"], "failed": snapshot["batch_failed"], "queued": 12}
    assert gauges["outages"] == set(snapshot["outage_backend"].split("+"))
    assert gauges["restarts"] == {"master": 0, "worker": 1} and gauges["namespace"] == "news"


def test_the_collector_shows_the_reports_figures():
    pytest.importorskip("prometheus_client")
    from batchd.reporting.metrics import SupervisorCollector

    report = a_report()
    report.tick(supervised(a_block()))
    snapshot = report.snapshot()
    samples = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
               for family in SupervisorCollector(report.metric_figures).collect() for sample in family.samples}
    ns = (("namespace", "news"),)
    assert samples[("batchd_workers_alive", ns)] == snapshot["workers_alive"]
    assert samples[("batchd_unflushed_items", ns)] == snapshot["unflushed"]
    assert samples[("batchd_tasks_in_flight", ns)] == snapshot["in_flight"]
    assert samples[("batchd_batch_total_tasks", ns)] == snapshot["batch_total"]
    assert samples[("batchd_batch_settled_tasks", (("namespace", "news"), ("outcome", "done")))] == 38
    assert samples[("batchd_backend_outage", (("backend", "MySQL"), ("namespace", "news")))] == 1
    assert samples[("batchd_child_restarts_total", (("namespace", "news"), ("role", "worker")))] == 1


def test_a_scrape_between_two_ticks_sees_the_last_ticks_figures():
    block = a_block()
    report = a_report()
    report.tick(supervised(block))
    block.worker_ledger(WORKER_1, 2).count(done=50)       # after the tick: no view shows it yet
    block.set_outages(WORKER_2, [])
    assert report.snapshot()["done"] == 117 and report.metric_figures()["outages"] == {"Redis", "MySQL"}
    report.tick(supervised(block))
    assert report.snapshot()["done"] == 167 and report.metric_figures()["outages"] == set()
    assert "outage_backend" not in report.snapshot() and "waiting for" not in report.status_text()


MIB = 1 << 20


def grown(tree) -> bool:
    """A MemoryTree(own=20, below=10) measured whole."""
    return tree is not None and tree.browsers >= 10 * MIB and tree.total >= tree.browsers + 20 * MIB


def test_each_workers_memory_with_its_browsers_is_in_the_snapshot_and_the_gauges():
    """Measured on the workers' real process trees (the children of the report's process, in its thread): the
    tick's snapshot lists each worker's, /metrics shows them by seat, a retiring worker's summed with its
    successor's."""
    pytest.importorskip("prometheus_client")
    from batchd.reporting.metrics import SupervisorCollector

    report = a_report(pid=os.getpid(), STATUS_INTERVAL=0.1)
    with MemoryTree(own=20, below=10) as first, MemoryTree(own=20, below=10) as retiring:
        children = (SupervisedChild("worker", "worker 1", first.pid, WORKER_1, True, number=1),
                    SupervisedChild("worker", "worker 1", retiring.pid, RETIRING, False, number=1))
        # A measurement begun while the trees were still filling up is no failure: the next one is waited for.
        wait_for(lambda: all(grown(report.memory.trees().get(pid)) for pid in (first.pid, retiring.pid)),
                 message="both trees measured whole")
        report.tick(supervised(a_block(), children))
    workers = report.figures.workers
    assert [w["memory_measure"] for w in workers] == ["pss", "pss"]
    assert all(w["memory"] >= w["browser_memory"] + 20 * MIB and w["browser_memory"] >= 10 * MIB for w in workers)
    seat = (sum(w["memory"] for w in workers), sum(w["browser_memory"] for w in workers))
    assert report.metric_figures()["memory"] == {"1": seat}
    samples = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
               for family in SupervisorCollector(report.metric_figures).collect() for sample in family.samples}
    labels = (("namespace", "news"), ("worker", "1"))
    assert (samples[("batchd_worker_memory_bytes", labels)], samples[("batchd_worker_browser_memory_bytes", labels)]) \
        == seat


def test_a_stopped_masters_batch_stays_in_every_view():
    """The last figures of a master that stopped still describe the batch (a reload, the end of a stop)."""
    block = a_block()
    report = a_report()
    report.tick(supervised(block))
    text = report.tick(supervised(block, CHILDREN[1:]))
    assert report.snapshot()["batch_id"] == 7 and report.snapshot()["master_alive"] == 0
    assert report.metric_figures()["batch"]["total"] == 100 and "batch 7 40/100" in text


def test_a_worker_only_supervisor_reports_no_batch_of_its_own():
    report = a_report(role="worker")
    text = report.tick(supervised(a_block(), CHILDREN[1:]))
    assert "batch_id" not in report.snapshot() and "batch" not in report.metric_figures()
    assert text.startswith("worker news: waiting for Redis+MySQL") and "batch ?" in text


def test_the_board_holds_the_snapshot_the_report_made_and_the_workers_line_takes_the_masters_batch(redis_url):
    namespace = f"t_report_{uuid.uuid4().hex[:8]}"
    settings = Settings(REDIS_URL=redis_url, MYSQL_URL="mysql://root@127.0.0.1/unused")
    ports = supervisor_ports(settings, namespace)
    masters, workers = a_report("master", ports, namespace), a_report("worker", ports, namespace)
    block = a_block()
    try:
        masters.tick(supervised(block, CHILDREN[:1]))
        (board,) = ports.board.read_statuses()
        assert board == {name: str(value) for name, value in masters.snapshot().items()}
        text = workers.tick(supervised(block, CHILDREN[1:]))
        assert "batch_id" not in workers.snapshot()
        assert f"worker {namespace}: waiting for Redis+MySQL" in text and "batch 7 40/100" in text
        masters.withdraw()
        workers.withdraw()
        assert ports.board.read_statuses() == []
    finally:
        ports.close()
