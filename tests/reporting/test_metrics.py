"""Prometheus metrics (METRICS_PORT) of a real `batchd run`, scraped over HTTP as Prometheus would, checked
against the database; a worker killed mid-batch (its counters stay, its live gauge goes); prometheus-client
missing (exit 78); a flagged batch's quality (coverage per field, per host for the flagged and busiest hosts only,
flags by rule) as `batchd quality` tells it. And the journal fields a real worker's records carry
(BATCHD_TASK_ID...)."""
import json
import logging
import os
import signal
import subprocess
import sys

import pytest
import requests

from batchd.download.middlewares.latency import FetchLatencyMiddleware
from batchd.reporting.metrics import QualityCollector, SupervisorCollector, keep_quality
from batchd.quality.measures import HostMeasures
from batchd.quality.metric_figures import HOSTS_LABELLED, MetricFigures
from batchd.quality.rules import Flag
from batchd.worker.worker_metrics import WorkerMetrics
from batchd.assembly import chain_context
from batchd.download.chain import chain_from_settings
from batchd.download.middlewares.stats import StatsMiddleware
from batchd.config import Settings
from batchd.service.systemd import JournalFields
from batchd.task import TaskState
from harness import InProcessBatch, spider_factory, wait_for
from httpserver import TestSite
from procs import HERE, ROOT
from supervised import (batchd, free_port, lines_with, scrape, slow_urls, start_batchd, try_scrape, value,
                        workers_of)

pytest.importorskip("prometheus_client")


def db_counts(backend) -> dict:
    states = list(backend.states().values())
    return {"done": states.count(TaskState.DONE), "failed": states.count(TaskState.FAILED),
            "items": len(backend.items())}


def test_a_scraped_run_counts_what_the_database_holds(mysql_backend, site, procs):
    pages = [site.url(f"/page/{n}") for n in range(1, 11)]
    missing = [site.url(f"/status/404?task={n}") for n in range(1, 3)]
    flaky = [site.url(f"/flaky/{n}?fail=1") for n in range(1, 3)]      # one 503, then a page
    mysql_backend.create_tasks(pages + missing + flaky)
    port = free_port()
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "2", METRICS_PORT=port,
                        BATCH_MONITOR_INTERVAL=0.2)

    def settled_and_counted():
        samples = try_scrape(port)
        counted = value(samples, "batchd_tasks_total", outcome="done") + value(samples, "batchd_tasks_total",
                                                                                outcome="failed")
        batch = value(samples, "batchd_batch_settled_tasks", outcome="done") + value(
            samples, "batchd_batch_settled_tasks", outcome="failed")
        at_host = value(samples, "batchd_host_attempts", host=host, outcome="done") + value(
            samples, "batchd_host_attempts", host=host, outcome="failed")
        return samples if counted == 14 and batch == 14 and at_host == 16 else None
    host = pages[0].split("/")[2]
    samples = wait_for(settled_and_counted, timeout=60, message="14 tasks and 16 attempts at the host counted")

    db = db_counts(mysql_backend)
    assert db == {"done": 12, "failed": 2, "items": 12}
    assert value(samples, "batchd_tasks_total", outcome="done") == db["done"]
    assert value(samples, "batchd_tasks_total", outcome="failed") == db["failed"]
    assert value(samples, "batchd_items_total", outcome="stored") == db["items"]
    assert value(samples, "batchd_items_total", outcome="dumped") == 0
    assert value(samples, "batchd_responses_total", status="200") == 12
    assert value(samples, "batchd_responses_total", status="404") == 2
    assert value(samples, "batchd_responses_total", status="503") == 2
    assert value(samples, "batchd_retries_total") == 2
    assert value(samples, "batchd_requests_total") == 16
    assert value(samples, "batchd_fetch_latency_seconds_count") == 16     # every attempt's response
    assert 0 < value(samples, "batchd_fetch_latency_seconds_sum") < 16 * 5
    assert value(samples, "batchd_fetch_latency_seconds_bucket", le="+Inf") == 16
    # The supervisor's gauges.
    assert value(samples, "batchd_workers_alive") == 2
    assert value(samples, "batchd_batch_total_tasks") == 14
    assert value(samples, "batchd_batch_id") == mysql_backend.records()[-1]["id"]
    assert value(samples, "batchd_child_restarts_total", role="worker") == 0
    assert ("batchd_queue_length", ()) in samples
    # Per host, from the master's supervisor: the batch's attempts (2xx and 3xx done; the 404s and 503s failed).
    assert value(samples, "batchd_host_attempts", host=host, outcome="done") == 12
    assert value(samples, "batchd_host_attempts", host=host, outcome="failed") == 4
    assert value(samples, "batchd_host_latency_seconds", host=host, quantile="0.95") > 0
    assert {labels for name, labels in samples if name == "batchd_host_attempts"} == {
        (("host", host), ("outcome", "done")), (("host", host), ("outcome", "failed"))}
    assert not [name for name, _ in samples if name == "batchd_host_breaker"]
    wait_for(lambda: value(try_scrape(port), "batchd_unflushed_items") == 0, message="nothing left unflushed")
    assert requests.get(f"http://127.0.0.1:{port}/other", timeout=5).status_code == 404

    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()
    assert lines_with(proc, f"serving Prometheus metrics on http://127.0.0.1:{port}/metrics")
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5)


def test_a_killed_worker_keeps_its_counters_and_loses_its_gauges(mysql_backend, site, procs, tmp_path):
    mysql_backend.create_tasks(slow_urls(site, 30, seconds=0.3))
    port = free_port()
    # systemd's RuntimeDirectory=: the multiprocess files go under it, where the test can see them.
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "2", METRICS_PORT=port,
                        env={"RUNTIME_DIRECTORY": str(tmp_path)})
    directory = tmp_path / "metrics-run"
    wait_for(lambda: value(try_scrape(port), "batchd_tasks_total", outcome="done") >= 2,
             message="two tasks done")
    victim = workers_of(proc.pid)[0]
    assert (directory / f"gauge_livesum_{victim}.db").exists()
    counted = value(scrape(port), "batchd_tasks_total", outcome="done")
    os.kill(victim, signal.SIGKILL)

    wait_for(lambda: value(try_scrape(port), "batchd_child_restarts_total", role="worker") == 1,
             message="the worker's restart counted")
    assert not (directory / f"gauge_livesum_{victim}.db").exists()       # marked dead
    assert (directory / f"counter_{victim}.db").exists()
    assert value(scrape(port), "batchd_tasks_total", outcome="done") >= counted   # its counts stay in the sums
    wait_for(lambda: db_counts(mysql_backend)["done"] == 30, timeout=60, message="every task done")
    wait_for(lambda: value(try_scrape(port), "batchd_workers_alive") == 2, message="two workers again")
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()


def test_a_flagged_batch_shows_its_coverage_and_flags_as_batchd_quality_tells_them(mysql_backend, site, procs):
    shop = "spiders/shop.py:ShopTask"
    with TestSite() as captcha:
        captcha.captcha = True
        site.relaid.update({1, 2, 3})                # 9 of 12 titles: under a floor of 90 %
        mysql_backend.create_tasks([s.url(f"/shop/{n}") for s in (site, captcha) for n in range(1, 13)])
        port = free_port()
        # the captcha site's pages are flagged at the close, not held (QUALITY_BLOCK_HOLD: tests/quality/test_block_pages.py)
        proc = start_batchd(procs, mysql_backend, "run", "--workers", "1", spider=shop, METRICS_PORT=port,
                            QUALITY_MIN_COVERAGE='{"title": 0.9}', QUALITY_BLOCK_HOLD="false")
        wait_for(lambda: try_scrape(port), message="/metrics answering")
        assert value(scrape(port), "batchd_quality_flags_total", kind="soft_block") == 0    # there from the start
        samples = wait_for(lambda: (lambda s: s if value(s, "batchd_quality_batch_id") == 1 else None)(
            try_scrape(port)), timeout=60, message="batch 1 judged on /metrics")
        site_host, captcha_host = (s.url("/").split("/")[2] for s in (site, captcha))
    report = json.loads(batchd("quality", shop, "--json", backend=mysql_backend).stdout)
    by_rule = {kind: sum(f["kind"] == kind for f in report["flags"]) for kind in ("soft_block", "block_marker",
                                                                                  "coverage_floor", "items_drop")}
    assert by_rule == {"soft_block": 1, "block_marker": 1, "coverage_floor": 1, "items_drop": 0}
    for kind, n in by_rule.items():
        assert value(samples, "batchd_quality_batch_flags", kind=kind) == n
        assert value(samples, "batchd_quality_flags_total", kind=kind) == n
    assert value(samples, "batchd_quality_coverage", table="crawl_task_item", field="title") == 0.75
    assert value(samples, "batchd_quality_coverage", table="crawl_task_item", field="price") == 1.0
    rows = {row["host"]: row for row in report["hosts"]}
    assert value(samples, "batchd_quality_host_coverage", host=site_host, table="crawl_task_item",
                 field="title") == rows[site_host]["coverage"]["crawl_task_item.title"] == 0.75
    assert {dict(labels)["host"] for name, labels in samples if name == "batchd_quality_host_coverage"} == {site_host}
    assert captcha_host in rows           # flagged, labelled, but it has no item: no coverage to show
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()


def test_the_coverage_gauge_labels_the_flagged_and_the_busiest_hosts_only(tmp_path):
    """10,000 hosts' worth of a batch (the store keeps HOST_STATS_TOP of them, but a label must stay smaller
    still): the flagged hosts and the busiest, HOSTS_LABELLED of each; the rest are in the batch's coverage."""
    gathered = MetricFigures()
    flags = [Flag(f"h{n:05d}", "coverage_drop", "t.title", 0.5, 1.0, "m") for n in range(1, 31)]
    for step in range(1, 10001):        # as the judge goes (quality/verdict.py): host by host, in no order
        n = step * 7919 % 10000 + 1
        gathered.add(f"h{n:05d}", HostMeasures(items={"t": n}, good={"t.title": n // 2}), flagged=n <= 30)
    figures = gathered.figures(4, flags)
    assert len(figures["hosts"]) == 2 * HOSTS_LABELLED
    assert set(figures["hosts"]) == {f"h{n:05d}" for n in [*range(21, 31), *range(9991, 10001)]}
    assert figures["flags"] == {"coverage_drop": 30} and 0.49 < figures["coverage"]["t.title"] <= 0.5
    assert figures["hosts"]["h10000"] == {"t.title": 0.5}

    keep_quality(str(tmp_path), figures)
    keep_quality(str(tmp_path), figures)           # the same close told again: not counted twice
    keep_quality(str(tmp_path), {**figures, "batch": 5, "flags": {"soft_block": 1}})
    families = {f.name: f for f in QualityCollector(str(tmp_path), lambda: {"namespace": "ns"}).collect()}
    totals = {s.labels["kind"]: s.value for s in families["batchd_quality_flags"].samples if s.name.endswith("_total")}
    assert (totals["coverage_drop"], totals["soft_block"], totals["no_items"]) == (30, 1, 0)
    assert families["batchd_quality_batch_id"].samples[0].value == 5


NO_PID = 2 ** 22 + 1      # above the kernel's largest pid: the files the test puts down are no real worker's


def test_a_workers_file_not_yet_written_leaves_the_scrape_whole(mysql_backend, site, procs, tmp_path):
    """A worker that has just started may have made its file and not yet sized it (0 bytes); a file cut short
    has no header to read (3 bytes), or less than its header says it holds: the scrape leaves them out and
    answers 200 with the other figures, instead of failing whole (`unpack_from requires a buffer of at least
    4 bytes`, HTTP 500)."""
    mysql_backend.create_tasks([site.url(f"/page/{n}") for n in range(1, 5)])
    port = free_port()
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "1", METRICS_PORT=port,
                        env={"RUNTIME_DIRECTORY": str(tmp_path)})
    wait_for(lambda: value(try_scrape(port), "batchd_tasks_total", outcome="done") == 4, message="4 tasks counted")
    directory = tmp_path / "metrics-run"
    (directory / f"counter_{NO_PID}.db").write_bytes(b"")
    (directory / f"histogram_{NO_PID}.db").write_bytes(b"")
    (directory / f"counter_{NO_PID + 1}.db").write_bytes(b"\x08\x00\x00")
    (directory / f"counter_{NO_PID + 2}.db").write_bytes(b"\x40\x00\x00\x00\x00\x00\x00\x00")   # "64 bytes used"

    answer = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    assert answer.status_code == 200, answer.text
    samples = scrape(port)
    assert value(samples, "batchd_tasks_total", outcome="done") == 4
    assert value(samples, "batchd_responses_total", status="200") == 4
    assert value(samples, "batchd_requests_total") == 4
    assert value(samples, "batchd_fetch_latency_seconds_count") == 4
    assert value(samples, "batchd_workers_alive") == 1
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()
    skipped = "\n".join(lines_with(proc, "left out of the sums"))
    assert skipped.count("left out") == 2, skipped        # once each, though scraped twice; the empty ones at DEBUG
    assert f"counter_{NO_PID + 1}.db left out of the sums: 3 bytes, shorter than its 8-byte header" in skipped
    assert f"counter_{NO_PID + 2}.db left out of the sums: 8 bytes, though its header says 64 are used" in skipped
    assert not lines_with(proc, "scrape failed") and not lines_with(proc, "Traceback")


def test_metrics_without_prometheus_client_exit_78_naming_the_package(mysql_backend, procs, tmp_path):
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "prometheus_client.py").write_text("raise ImportError('hidden by the test')\n")
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "1", METRICS_PORT=free_port(),
                        env={"PYTHONPATH": f"{hidden}{os.pathsep}{HERE}"})
    assert proc.wait(30) == 78, proc.output()
    (line,) = lines_with(proc, "prometheus-client is not installed")
    assert "python3-prometheus-client" in line


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []
        self.addFilter(JournalFields())

    def emit(self, record):
        self.records.append(record)


def test_a_workers_records_carry_the_journal_fields_of_their_task(mysql_backend, site):
    """What JournalHandler would send: the filter gives each record of a task's thread its task, batch and
    namespace (journald keeps upper-case attributes as fields)."""
    from spiders.seed import CrawlTask
    mysql_backend.create_tasks([site.url("/page/1"), site.url("/status/404")])
    handler = _Records()
    logger = logging.getLogger("batchd")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with InProcessBatch(spider_factory(mysql_backend, CrawlTask)):
            wait_for(lambda: set(mysql_backend.states().values()) == {TaskState.DONE, TaskState.FAILED},
                     message="both tasks settled")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    (failed,) = [r for r in handler.records if r.getMessage().startswith("task 2 failed")]
    batch_id = mysql_backend.records()[-1]["id"]
    assert (failed.BATCHD_ROLE, failed.BATCHD_NAMESPACE, failed.BATCHD_BATCH, failed.BATCHD_TASK_ID) == (
        "worker", mysql_backend.namespace, batch_id, 2)
    started = [r for r in handler.records if " started: " in r.getMessage()]
    assert started and all(not hasattr(r, "BATCHD_TASK_ID") for r in started)    # no task in hand there


def test_the_latency_link_is_in_the_chain_only_with_metrics():
    def links(metrics):
        return [type(m) for m in chain_from_settings(chain_context(Settings(), metrics=metrics)).middlewares][-2:]
    assert links(None)[-1] is StatsMiddleware
    assert links(WorkerMetrics("test")) == [StatsMiddleware, FetchLatencyMiddleware]


def test_the_metrics_cost_benchmark_runs():
    """bench/metrics_cost.py measures the chain's own work for one attempt, with metrics off and on; the figure is
    the benchmark's to report, this only keeps it working."""
    answer = subprocess.run([sys.executable, "-m", "bench.metrics_cost"], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": ROOT}, check=True)
    cost = json.loads(answer.stdout)
    print(f"one attempt through the counting links: {cost['off_ns']} ns without metrics, {cost['on_ns']} ns with "
          f"(+{cost['overhead_ns']} ns)")
    assert cost["off_ns"] > 0 and cost["on_ns"] > 0, cost


def test_a_backend_once_down_shows_0_when_it_is_back():
    """batchd_backend_outage: 1 while a child waits for the backend, then 0 (the series stays, for alerts that
    compare); a supervisor that does not run the master has no batch figures."""
    figures = {"namespace": "ns", "workers_alive": 2, "unflushed": 0, "in_flight": 0, "restarts": {"worker": 0},
               "outages": {"Redis"}}
    collector = SupervisorCollector(lambda: figures)

    def outage_samples():
        families = {family.name: family for family in collector.collect()}
        assert "batchd_batch_total_tasks" not in families and "batchd_host_attempts" not in families
        return {s.labels["backend"]: s.value for s in families["batchd_backend_outage"].samples}
    assert outage_samples() == {"Redis": 1}
    figures["outages"] = set()
    assert outage_samples() == {"Redis": 0}


def test_per_host_gauges_keep_host_stats_top_label_values_and_show_open_breakers(redis_url):
    """The master's supervisor reads the hosts through its own ports (real Redis): three workers gauging 30
    hosts each and a batch of 80 counted hosts give HOST_STATS_TOP (10) host labels and (other), whatever the
    crawl meets; a tripped breaker shows as batchd_host_breaker{state="open"}, keyed without the URL's password."""
    import time
    from batchd.hosts.counts import OTHER
    from batchd.reporting.snapshots import SnapshotPublisher, supervisor_ports
    settings = Settings(REDIS_URL=redis_url, MYSQL_URL="mysql://root@127.0.0.1/unused")
    ports = supervisor_ports(settings, "t_hostmetrics")
    try:
        ports.counters.add_counts(7, {}, "w1", 1, {f"c{n}.example": {"done": n, "le1": n} for n in range(80)}, 10)
        for worker in range(3):
            ports.counters.add_counts(7, {}, f"w{worker + 2}", 1, {f"g{worker}-{n}.example": {"failed": 1}
                                                                   for n in range(5)}, 10)
            ports.counters.set_host_gauges(f"w{worker}", {f"g{worker}-{n}.example": {"waiting": n + 1}
                                                          for n in range(30)}, 30)
        ports.breakers.step("user:secret@g0-29.example", "trip", time.time(), (5, 5.0))
        rows = SnapshotPublisher(ports, "box", "run", 5).hosts(7, 10)
        figures = {"namespace": "ns", "workers_alive": 1, "unflushed": 0, "in_flight": 0, "restarts": {},
                   "outages": set(), "batch": {"id": 7, "total": 1, "done": 0, "failed": 0, "queued": 0},
                   "hosts": rows}
        families = {family.name: family for family in SupervisorCollector(lambda: figures).collect()}
    finally:
        ports.close()
    hosts = {sample.labels["host"] for sample in families["batchd_host_attempts"].samples}
    assert len(hosts) == 11 and OTHER in hosts
    waiting = {s.labels["host"]: s.value for s in families["batchd_host_tasks_waiting"].samples}
    assert waiting["g0-29.example"] == 30 and sum(waiting.values()) == 3 * sum(range(1, 31))
    attempts = families["batchd_host_attempts"].samples
    assert sum(s.value for s in attempts if s.labels["outcome"] == "done") == sum(range(80))  # nothing lost
    breakers = [(s.labels["host"], s.labels["state"], s.value) for s in families["batchd_host_breaker"].samples]
    assert breakers == [("g0-29.example", "open", 1)]


def test_what_a_recrawl_found_is_exported(mysql_backend, site, procs):
    """batchd_recrawl_tasks_total by what the tasks' pages were found, batchd_items_total{outcome=unchanged}:
    a batch of 3 new pages, then (batchd open-batch) the same 3 fetched whole again (the site sends no
    validators), their items equal to those stored."""
    site.validators = "none"
    mysql_backend.create_tasks([site.url(f"/versioned/{n}") for n in (1, 2, 3)])
    port = free_port()
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "1", METRICS_PORT=port, REVALIDATE="true",
                        BATCH_MONITOR_INTERVAL=0.2)
    wait_for(lambda: mysql_backend.records() and mysql_backend.records()[-1]["is_done"], message="batch 1 closed")
    assert start_batchd(procs, mysql_backend, "open-batch").wait(60) == 0
    samples = wait_for(lambda: (lambda s: s if value(s, "batchd_recrawl_tasks_total", found="unchanged") == 3
                                else None)(try_scrape(port)), timeout=60, message="3 tasks counted unchanged")
    assert value(samples, "batchd_recrawl_tasks_total", found="new") == 3
    assert value(samples, "batchd_recrawl_tasks_total", found="changed") == 0
    assert value(samples, "batchd_items_total", outcome="unchanged") == 3
    assert value(samples, "batchd_items_total", outcome="stored") == 3
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()
