"""Prometheus metrics: METRICS_PORT (0: off) makes a supervisor serve /metrics on METRICS_ADDRESS.

prometheus-client is optional (python3-prometheus-client, the `metrics` extra); METRICS_PORT without it
is a configuration error (exit 78) naming the package. It runs in its multiprocess mode:

    supervisor   makes the directory (under $RUNTIME_DIRECTORY, systemd's RuntimeDirectory=, else a private
                 temporary one), wiped at start, and names it in PROMETHEUS_MULTIPROC_DIR before the first
                 fork; serves /metrics from a thread (`batchd-metrics`): the children's files merged, plus
                 its own gauges, the figures of its last report tick (supervisor_report.py: the ones its
                 snapshot and STATUS= show, at most STATUS_INTERVAL old); `mark_process_dead` when it reaps
                 a child (a dead worker's counters stay in the sums, its live gauge goes)
    worker       its counters in its own file of that directory (worker/worker_metrics.py lists them), and the
                 fetch latency of each attempt (download/middlewares/latency.py, in the default
                 DOWNLOADER_MIDDLEWARES: with metrics off it is not in the chain, so an unused feature costs
                 nothing per request)

Every metric carries the label `namespace`. The supervisor's, as of its last report tick:
    batchd_workers_alive, batchd_unflushed_items, batchd_tasks_in_flight   (its snapshot's workers_alive,
                                                 unflushed, in_flight: workers not told to stop)
    batchd_child_restarts_total{role}            children that ended unasked (crash, kill, timeout)
    batchd_backend_outage{backend}               1 while a child waits for that backend, then 0
    batchd_batch_id, batchd_batch_total_tasks, batchd_batch_settled_tasks{outcome=done|failed},
    batchd_queue_length                          (a supervisor that runs the master: its last patrol's view,
                                                 kept once the master stopped, as its snapshot keeps it)
    batchd_worker_memory_bytes{worker}           a worker's process tree: its PSS and its browsers'
                                                 (process_memory.py; RSS for a process whose PSS cannot be read)
    batchd_worker_browser_memory_bytes{worker}   ... of which its browsers (its descendants); `worker` is the
                                                 seat's number ("1"), a retiring worker summed with its successor

Per host, from the supervisor that runs the master only (so that a sum over every supervisor of the
namespace counts each host once), read at each report tick from the batch's counters per host, the workers'
gauges and the breakers (reporting/status.py's `batchd status --hosts` reads the same rows). The label `host`
takes at most HOST_STATS_TOP values and "(other)": the busiest hosts, the rest summed (hosts/counts.py):
    batchd_host_tasks_waiting{host}              tasks set aside for their host's turn in the workers now
    batchd_host_requests_in_flight{host}         attempts being sent to the host now
    batchd_host_attempts{host,outcome=done|failed}   the batch's attempts at the host (a new batch starts at 0)
    batchd_host_latency_seconds{host,quantile=0.5|0.95}  the top of the latency bucket the quantile falls in
    batchd_host_breaker{host,state=open|probing|down}    1 for a host whose breaker is not closed

The data quality of the last batch its master judged, from the supervisor that runs the master only (docs/
quality.md). The master hands each judged batch's figures (quality/metric_figures.py, gathered as it judged
the batch) to its supervisor in QUALITY_FILE of the metrics directory, written whole and renamed at
the close (`keep_quality`); a scrape reads that file. The label `host` takes the flagged hosts and the hosts
with the most items, HOSTS_LABELLED (10) of each at most; `field` at most FIELDS_LABELLED values:
    batchd_quality_batch_id                      the batch the figures below are of
    batchd_quality_coverage{table,field}         the share of the batch's items (every host's) with a good value
    batchd_quality_host_coverage{host,table,field}   the same, for one labelled host
    batchd_quality_batch_flags{kind}             the batch's flags by rule (quality/rules.py: each rule, 0 or more)
    batchd_quality_flags_total{kind}             flags of the batches its master closed since this supervisor
                                                 started, by rule (a close done again is not counted twice)
"""
import glob
import http.server
import json
import logging
import os
import shutil
import socket
import socketserver
import struct
import tempfile
from collections import Counter
from typing import Any, Callable, Optional

from ..errors import ConfigError
from ..quality.rules import RULES
from ..service.threads import start_thread
from ..service.prometheus import prometheus_client

log = logging.getLogger("batchd.metrics")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# A multiprocess file starts with how many of its bytes are used (a 4-byte int), then 4 bytes of padding.
FILE_HEADER = struct.Struct("i")
FILE_HEADER_BYTES = 8
EMPTY_FILE = "empty (a worker that has just started)"
QUALITY_FILE = "quality.json"     # the master's last judged batch (not *.db: the files' merge never reads it)
KINDS = tuple(kind for kind, _ in RULES)


def metrics_directory(instance_key: str, environ=os.environ) -> tuple:
    """(path, private): `metrics-<instance>` under systemd's RuntimeDirectory= (emptied: what a former
    run left is not ours to sum), else a new private temporary directory, removed at exit."""
    runtime = environ.get("RUNTIME_DIRECTORY", "").split(":")[0]
    if not runtime:
        return tempfile.mkdtemp(prefix="batchd-metrics-"), True
    path = os.path.join(runtime, f"metrics-{instance_key}")
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path, mode=0o700)
    return path, False


class WorkerFilesCollector:
    """The children's multiprocess files merged, as the client's MultiProcessCollector merges them, less the
    files that cannot be read: one short read would fail the whole scrape (a struct.error, HTTP 500).

    A worker that has just started may have made its file and not yet sized it (the client creates it, then
    extends it to 64 KiB): 0 bytes, said at DEBUG, and read at a later scrape. A file too short for its header,
    or for the bytes its header says are used, was cut short by something else: a WARNING naming it. A file
    is told of at most once at each level, however many scrapes leave it out."""

    def __init__(self, directory: str):
        self.directory = directory
        self._told: set = set()

    def collect(self):
        from prometheus_client.multiprocess import MultiProcessCollector

        paths = glob.glob(os.path.join(self.directory, "*.db"))
        return MultiProcessCollector.merge([path for path in paths if self._readable(path)], accumulate=True)

    def _readable(self, path: str) -> bool:
        try:
            why = _unreadable_because(path)
        except FileNotFoundError:      # a dead child's live gauge, removed since the listing: nothing to sum
            return False
        except OSError as e:
            why = f"cannot be read: {e.strerror or e}"
        if why is None:
            return True
        level = logging.DEBUG if why == EMPTY_FILE else logging.WARNING
        if (path, level) not in self._told:
            self._told.add((path, level))
            log.log(level, "/metrics: %s left out of the sums: %s", os.path.basename(path), why)
        return False


def _unreadable_because(path: str) -> Optional[str]:
    """Why the client could not read this multiprocess file, or None if it can (OSError: it cannot be opened)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        header = f.read(FILE_HEADER_BYTES)
    if size == 0:
        return EMPTY_FILE
    if len(header) < FILE_HEADER_BYTES:
        return f"{size} bytes, shorter than its {FILE_HEADER_BYTES}-byte header"
    (used,) = FILE_HEADER.unpack_from(header)
    if used > size:
        return f"{size} bytes, though its header says {used} are used"
    return None


class SupervisorCollector:
    """The supervisor's gauges as a scrape asks: `figures` gives the figures of its last report tick
    (supervisor_report.py, SupervisorReport.metric_figures), never works one out."""

    def __init__(self, figures: Callable[[], dict]):
        self.figures = figures
        self._backends_seen: set = set()     # a backend once down shows 0 when it is back

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        figures = self.figures()
        namespace = figures["namespace"]

        def gauge(name: str, meaning: str, value: float) -> Any:
            family = GaugeMetricFamily(name, meaning, labels=["namespace"])
            family.add_metric([namespace], value)
            return family

        yield gauge("batchd_workers_alive", "worker processes of this supervisor (those told to stop aside)",
                    figures["workers_alive"])
        yield gauge("batchd_unflushed_items", "items yielded and not yet landed, in the workers' memory",
                    figures["unflushed"])
        yield gauge("batchd_tasks_in_flight", "tasks the workers hold (leased, not yet written back)",
                    figures["in_flight"])
        restarts = CounterMetricFamily("batchd_child_restarts", "children that ended unasked (a crash, a kill, "
                                       "a timeout) and were replaced", labels=["namespace", "role"])
        for role, n in sorted(figures["restarts"].items()):
            restarts.add_metric([namespace, role], n)
        yield restarts
        yield self._outages(namespace, figures["outages"])
        batch = figures.get("batch")
        if batch is not None:
            yield gauge("batchd_batch_id", "the batch the master works on", batch["id"])
            yield gauge("batchd_batch_total_tasks", "tasks in the batch", batch["total"])
            settled = GaugeMetricFamily("batchd_batch_settled_tasks", "tasks of the batch done or failed",
                                        labels=["namespace", "outcome"])
            settled.add_metric([namespace, "done"], batch["done"])
            settled.add_metric([namespace, "failed"], batch["failed"])
            yield settled
            yield gauge("batchd_queue_length", "tasks waiting in the queue at the master's last patrol",
                        batch["queued"])
        yield from memory_families(namespace, figures.get("memory", {}))
        if figures.get("hosts") is not None:
            yield from host_families(namespace, figures["hosts"])

    def _outages(self, namespace: str, down: set):
        from prometheus_client.core import GaugeMetricFamily

        self._backends_seen |= down
        family = GaugeMetricFamily("batchd_backend_outage", "1 while a child of this supervisor waits for the "
                                   "backend", labels=["namespace", "backend"])
        for backend in sorted(self._backends_seen):
            family.add_metric([namespace, backend], int(backend in down))
        return family


def memory_families(namespace: str, memory: dict):
    """The gauges of each worker seat's memory: {seat: (bytes of its tree, bytes of its browsers)}. A seat
    whose worker ended leaves no series behind: each scrape shows the last tick's seats only."""
    from prometheus_client.core import GaugeMetricFamily

    total = GaugeMetricFamily("batchd_worker_memory_bytes", "a worker's memory with its browsers': the PSS of "
                              "its process tree (RSS for a process whose PSS cannot be read)",
                              labels=["namespace", "worker"])
    browsers = GaugeMetricFamily("batchd_worker_browser_memory_bytes", "the memory of the browsers a worker "
                                 "started (its descendants), within batchd_worker_memory_bytes",
                                 labels=["namespace", "worker"])
    for seat, (tree, below) in sorted(memory.items(), key=lambda item: int(item[0])):
        total.add_metric([namespace, seat], tree)
        browsers.add_metric([namespace, seat], below)
    return total, browsers


def host_families(namespace: str, rows: list):
    """The gauges per host of `rows` (hosts/counts.py's bounded_rows: the label's values are bounded)."""
    from prometheus_client.core import GaugeMetricFamily

    def family(name: str, meaning: str, *labels: str) -> Any:
        return GaugeMetricFamily(name, meaning, labels=["namespace", "host", *labels])

    waiting = family("batchd_host_tasks_waiting", "tasks set aside for their host's turn in the workers now")
    in_flight = family("batchd_host_requests_in_flight", "attempts being sent to the host now")
    attempts = family("batchd_host_attempts", "the batch's attempts at the host, by outcome", "outcome")
    latency = family("batchd_host_latency_seconds", "the top of the latency bucket the quantile of the batch's "
                     "answers from the host falls in", "quantile")
    breaker = family("batchd_host_breaker", "1 for a host whose breaker is open, probing or down", "state")
    for row in rows:
        host = row["host"]
        waiting.add_metric([namespace, host], row["waiting"])
        in_flight.add_metric([namespace, host], row["in_flight"])
        attempts.add_metric([namespace, host, "done"], row["done"])
        attempts.add_metric([namespace, host, "failed"], row["failed"])
        for field, quantile in (("p50", "0.5"), ("p95", "0.95")):
            if row[field] is not None:
                latency.add_metric([namespace, host, quantile], row[field])
        if row["breaker"] not in (None, "closed"):
            breaker.add_metric([namespace, host, row["breaker"]], 1)
    return waiting, in_flight, attempts, latency, breaker


def keep_quality(directory: str, figures: dict) -> None:
    """The master's side, at a batch's close: its figures (quality/metric_figures.py) with the flags counted
    so far, the batch's added unless the file already holds that batch (a close done again after an outage)."""
    path = os.path.join(directory, QUALITY_FILE)
    before = read_quality(directory) or {}
    totals = Counter(before.get("flags_total", {}))
    if before.get("batch") != figures["batch"]:
        totals.update(figures["flags"])
    with open(path + ".new", "w") as f:
        json.dump({**figures, "flags_total": dict(totals)}, f)
    os.replace(path + ".new", path)       # a scrape reads the former figures or these, never half of them


def read_quality(directory: str) -> Optional[dict]:
    """The figures `keep_quality` left; None before the master judged a batch."""
    try:
        with open(os.path.join(directory, QUALITY_FILE)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


class QualityCollector:
    """The quality gauges and the flag counter as a scrape asks: read from the master's file each time, so a
    host or a field the last batch no longer labels leaves no series behind."""

    def __init__(self, directory: str, figures: Callable[[], dict]):
        self.directory, self.figures = directory, figures

    def collect(self):
        from prometheus_client.core import CounterMetricFamily

        namespace = self.figures()["namespace"]
        try:
            kept = read_quality(self.directory) or {}
        except (OSError, ValueError) as e:    # no failure here may fail a scrape
            log.warning("/metrics: %s cannot be read: %s", QUALITY_FILE, e)
            kept = {}
        total = CounterMetricFamily("batchd_quality_flags", "flags of the batches the master closed, by rule",
                                    labels=["namespace", "kind"])
        for kind in KINDS:         # each at 0 from the start: the first flag is an increase
            total.add_metric([namespace, kind], kept.get("flags_total", {}).get(kind, 0))
        yield total
        if "batch" not in kept:
            return
        yield from _judged_families(namespace, kept)


def _judged_families(namespace: str, kept: dict):
    from prometheus_client.core import GaugeMetricFamily

    batch = GaugeMetricFamily("batchd_quality_batch_id", "the batch the quality figures are of", labels=["namespace"])
    batch.add_metric([namespace], kept["batch"])
    flags = GaugeMetricFamily("batchd_quality_batch_flags", "the batch's flags, by rule", labels=["namespace", "kind"])
    for kind in KINDS:
        flags.add_metric([namespace, kind], kept["flags"].get(kind, 0))
    coverage = GaugeMetricFamily("batchd_quality_coverage", "the share of the batch's items with a good value in "
                                 "the field", labels=["namespace", "table", "field"])
    for key, share in sorted(kept["coverage"].items()):
        coverage.add_metric([namespace, *key.split(".", 1)], share)
    per_host = GaugeMetricFamily("batchd_quality_host_coverage", "the share of the host's items in the batch with a "
                                 "good value in the field (the flagged hosts and the busiest)",
                                 labels=["namespace", "host", "table", "field"])
    for host, shares in sorted(kept["hosts"].items()):
        for key, share in sorted(shares.items()):
            per_host.add_metric([namespace, host, *key.split(".", 1)], share)
    return batch, flags, coverage, per_host


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    # Not http.server's HTTPServer: its bind looks the address's name up (a DNS wait for 0.0.0.0).
    allow_reuse_address = True
    daemon_threads = True
    registry: Any = None


class _MetricsHandler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        if self.path.split("?")[0] != "/metrics":
            self.send_error(404, "batchd serves /metrics only")
            return
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
        try:
            body = generate_latest(self.server.registry)
        except Exception as e:   # a scrape that fails says why, and the supervisor carries on
            log.warning("a /metrics scrape failed: %s: %s", type(e).__name__, e)
            self.send_error(500, f"{type(e).__name__}: {e}")
            return
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE_LATEST)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args) -> None:
        pass      # a scrape every few seconds is no news for the journal


class MetricsServer:
    """/metrics of one supervisor: its children's files merged, and its own gauges."""

    def __init__(self, address: str, port: int, instance_key: str, figures: Callable[[], dict],
                 runs_master: bool = False):
        """`runs_master`: its master hands it each judged batch's quality (QualityCollector)."""
        self.directory, self._private = metrics_directory(instance_key)
        # The client picks its multiprocess mode as it is imported, and each child names its files from this
        # variable as it counts: set before both (the supervisor's modules import it nowhere else).
        os.environ[MULTIPROC_ENV] = self.directory
        try:
            client = prometheus_client()
            registry = client.CollectorRegistry()
            registry.register(WorkerFilesCollector(self.directory))
            registry.register(SupervisorCollector(figures))
            if runs_master:
                registry.register(QualityCollector(self.directory, figures))
            self.server = _bind(address, port)
        except BaseException:
            self._remove_directory()
            raise
        self.server.registry = registry
        start_thread(self.server.serve_forever, "batchd-metrics")
        log.info("serving Prometheus metrics on http://%s:%d/metrics (files in %s)", address, port, self.directory)

    def child_ended(self, pid: int) -> None:
        from prometheus_client import multiprocess
        multiprocess.mark_process_dead(pid, self.directory)

    def forget_in_child(self) -> None:
        """In a forked child: the listening socket is the supervisor's alone."""
        self.server.socket.close()

    def close(self) -> None:
        try:
            self.server.shutdown()
            self.server.server_close()
        finally:
            self._remove_directory()

    def _remove_directory(self) -> None:
        os.environ.pop(MULTIPROC_ENV, None)
        if self._private:
            shutil.rmtree(self.directory, ignore_errors=True)


def _bind(address: str, port: int) -> _Server:
    server_class = type("_Server6", (_Server,), {"address_family": socket.AF_INET6}) if ":" in address else _Server
    try:
        return server_class((address, port), _MetricsHandler)
    except OSError as e:
        raise ConfigError(f"METRICS_PORT={port}, METRICS_ADDRESS={address}: cannot listen there: "
                          f"{e.strerror or e}") from None
