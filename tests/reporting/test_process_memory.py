"""A worker's memory as its supervisor's report measures it (reporting/process_memory.py), on a real process
tree: a child holding 50 MiB and a grandchild (its "browser") holding 30 MiB; and end to end, a supervised
`batchd run` whose workers' memory `batchd status` and /metrics show, browsers included (real Chromium)."""
import json
import os
import signal
import subprocess
import sys

import pytest

from batchd.reporting.process_memory import MOST_BUSY, MemoryWatch, TreeMemory, measure_trees, pause_after
from batchd.render.processes import children_by_parent, descendants, memory_of
from batchd.task import TaskState
from harness import wait_for
from procs import MemoryTree
from supervised import (SEED, batchd, free_port, gated_urls, scrape, start_batchd, status_snapshot, try_scrape, value,
                        workers_of)

MIB = 1 << 20
RENDERED = "spiders/rendered.py:RenderedTask"       # the seed, every page rendered in Chromium


def test_a_workers_figure_holds_its_descendants_memory():
    with MemoryTree(own=50, below=30) as tree:
        (measured,) = measure_trees([tree.pid]).values()
        grandchild, _ = memory_of(tree.grandchild)

    assert measured.measure == "pss"
    # The grandchild is counted as the browsers (read a moment apart: a few pages more or less).
    assert measured.browsers >= 30 * MIB and abs(measured.browsers - grandchild) < MIB
    assert measured.total >= measured.browsers + 50 * MIB       # ... and in the worker's figure
    assert measured.total < 200 * MIB                           # no process outside the tree is


def test_one_scan_of_proc_serves_every_root():
    with MemoryTree(own=1, below=1) as first, MemoryTree(own=1, below=1) as second:
        children = children_by_parent()
        assert descendants(first.pid, children) == descendants(first.pid) == [first.grandchild]
        trees = measure_trees([first.pid, second.pid])
    assert set(trees) == {first.pid, second.pid} and all(tree.browsers > 0 for tree in trees.values())


def test_a_root_gone_is_left_out():
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    trees = measure_trees([int(ended.stdout), os.getpid()])
    assert list(trees) == [os.getpid()]
    assert measure_trees([]) == {}


def test_two_trees_in_one_seat_add_up_and_say_how_they_were_measured():
    summed = TreeMemory(100, 60, "pss").plus(TreeMemory(10, 0, "rss"))
    assert summed == TreeMemory(110, 60, "pss+rss")
    assert summed.fields() == {"memory": 110, "browser_memory": 60, "memory_measure": "pss+rss"}


def grown(tree) -> bool:
    """A MemoryTree(own=10, below=10) measured whole."""
    return tree is not None and tree.browsers >= 10 * MIB and tree.total >= tree.browsers + 10 * MIB


def test_the_watch_measures_each_child_in_its_thread_no_busier_than_allowed():
    watch = MemoryWatch(os.getpid(), interval=0.05)
    with MemoryTree(own=10, below=10) as tree:
        watch.start()
        try:
            # A measurement begun while the tree was still filling up is no failure: the next one is waited for.
            wait_for(lambda: grown(watch.trees().get(tree.pid)), message="the child's tree measured whole")
        finally:
            watch.stop()
    assert pause_after(cost=0.001, interval=5.0) == 5.0
    assert pause_after(cost=0.5, interval=5.0) == 0.5 / MOST_BUSY      # 8 workers' browsers: every 10 s


def status_of(backend, spider: str) -> dict:
    return json.loads(batchd("status", spider, "--json", backend=backend).stdout)


def workers_measured(backend) -> list:
    """The workers the supervisor's snapshot lists with their memory (none before its first measurement)."""
    return [worker for worker in status_snapshot(backend).get("workers", []) if "memory" in worker]


def test_a_supervised_runs_workers_memory_is_in_status_and_metrics(mysql_backend, site, procs):
    pytest.importorskip("prometheus_client")
    mysql_backend.create_tasks(gated_urls(site, 4))         # held at the gate: the batch runs while it is read
    port = free_port()
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "2", METRICS_PORT=port)
    wait_for(lambda: site.held() >= 2, message="tasks held at the gate")

    wait_for(lambda: len(workers_measured(mysql_backend)) == 2, message="both workers' memory in the snapshot")
    status = status_of(mysql_backend, SEED)
    workers = [worker for host in status["hosts"] for worker in host["workers"]]
    assert sorted(w["pid"] for w in workers) == sorted(workers_of(proc.pid))
    assert all(w["memory"] > 10 * MIB and w["browser_memory"] == 0 and w["memory_measure"] == "pss"
               for w in workers)                    # the seed renders nothing: no descendants
    assert status["memory"] == {"bytes": sum(w["memory"] for w in workers), "browsers": 0, "workers": 2,
                                "measure": "pss"}
    text = batchd("status", SEED, backend=mysql_backend).stdout
    assert " in 2 workers, browsers 0 B of it" in text and text.count(" MB (browsers 0 B)") == 2, text

    wait_for(lambda: value(try_scrape(port), "batchd_worker_memory_bytes", worker="2") > 0,
             message="both workers' memory on /metrics")
    samples = scrape(port)
    assert value(samples, "batchd_worker_memory_bytes", worker="1") > 10 * MIB
    assert (("batchd_worker_browser_memory_bytes", (("worker", "1"),)) in samples
            and value(samples, "batchd_worker_browser_memory_bytes", worker="1") == 0)
    site.gate.set()
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()


def test_a_rendering_workers_browsers_count_in_its_memory(mysql_backend, site, procs):
    pytest.importorskip("selenium")
    pytest.importorskip("prometheus_client")
    mysql_backend.create_tasks(gated_urls(site, 1))         # the browser waits at the gate, alive
    port = free_port()
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "1", spider=RENDERED, METRICS_PORT=port)
    wait_for(lambda: site.held() >= 1, timeout=60, message="the browser at the gate")

    wait_for(lambda: any(w["browser_memory"] > 0 for w in workers_measured(mysql_backend)),
             message="the browser's memory in the snapshot")
    (worker,) = [w for host in status_of(mysql_backend, RENDERED)["hosts"] for w in host["workers"]]
    assert worker["memory"] > worker["browser_memory"] > 20 * MIB, worker      # Chromium is no small process
    wait_for(lambda: value(try_scrape(port), "batchd_worker_browser_memory_bytes", worker="1") > 0,
             message="the browser's memory on /metrics")
    samples = scrape(port)
    assert value(samples, "batchd_worker_memory_bytes", worker="1") > \
        value(samples, "batchd_worker_browser_memory_bytes", worker="1")
    site.gate.set()
    wait_for(lambda: set(mysql_backend.states().values()) == {TaskState.DONE}, timeout=60,
             message="the rendered task done")
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()
