"""Prometheus metrics: METRICS_PORT (0: off) makes a supervisor serve /metrics on METRICS_ADDRESS.

prometheus-client is optional (python3-prometheus-client, the `metrics` extra); METRICS_PORT without it
is a configuration error (exit 78) naming the package. It runs in its multiprocess mode:

    supervisor   makes the directory (under $RUNTIME_DIRECTORY, systemd's RuntimeDirectory=, else a private
                 temporary one), wiped at start, and names it in PROMETHEUS_MULTIPROC_DIR before the first
                 fork; serves /metrics from a thread (`batchd-metrics`): the children's files merged, plus
                 gauges it reads from the ledger as it answers; `mark_process_dead` when it reaps a child
                 (a dead worker's counters stay in the sums, its live gauge goes)
    worker       `WorkerMetrics`: its counters in its own file of that directory, counted where its
                 BatchStats and its ledger count (`MeteredStats`, `MeteredLedger`), and the fetch latency
                 of each attempt (`FetchLatencyMiddleware`, in the default DOWNLOADER_MIDDLEWARES: with
                 metrics off it is not in the chain, so an unused feature costs nothing per request)

Every metric carries the label `namespace`. The workers' (summed over the host's worker processes, dead
ones included):
    batchd_tasks_total{outcome=done|failed}      tasks written back
    batchd_items_total{outcome=stored|dumped}    items landed in the database, or in FAILED_ITEMS_PATH
    batchd_requests_total                        attempts sent (a retry is an attempt)
    batchd_responses_total{status}               responses, by HTTP status
    batchd_request_errors_total{error}           attempts that got no response, by exception
    batchd_retries_total                         attempts retried
    batchd_response_bytes_total                  bytes of response bodies
    batchd_fetch_latency_seconds                 a histogram of each response's time, sent to body read
    batchd_fetches_in_progress                   attempts being sent now (live workers only)
The supervisor's, as it answers:
    batchd_workers_alive, batchd_unflushed_items, batchd_tasks_in_flight
    batchd_child_restarts_total{role}            children that ended unasked (crash, kill, timeout)
    batchd_backend_outage{backend}               1 while a child waits for that backend, then 0
    batchd_batch_id, batchd_batch_total_tasks, batchd_batch_settled_tasks{outcome=done|failed},
    batchd_queue_length                          (a supervisor that runs the master: its last patrol's view)
"""
import http.server
import logging
import os
import shutil
import socket
import socketserver
import tempfile
from typing import Any, Callable, Optional

from ..errors import ConfigError
from ..http import Request, Response
from ..process.ledger import LedgerBlock, SharedLedger
from ..download.chain import ChainContext, DownloaderMiddleware, PageRejected
from ..settle.stats import BYTES, REQUESTS, RESPONSES, RETRY_COUNT, STATUS_PREFIX, BatchStats
from ..process.threads import start_thread

log = logging.getLogger("batchd.metrics")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
MISSING_CLIENT = ("METRICS_PORT is set but prometheus-client is not installed: apt install "
                  "python3-prometheus-client (or pip install \"batchd[metrics]\"), or set METRICS_PORT = 0")
EXCEPTION_PREFIX = "downloader/exception_type_count/"
# Seconds: a page of a fast site in the first buckets, DOWNLOAD_TIMEOUT's default (180) in the last.
LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 180.0)


def prometheus_client():
    """The client module; ConfigError naming the package when it is not installed."""
    try:
        import prometheus_client as client
    except ImportError:
        raise ConfigError(MISSING_CLIENT) from None
    return client


# -- a worker's side

class _Uncounted:
    def inc(self, amount: float = 1) -> None:
        pass


UNCOUNTED = _Uncounted()


class WorkerMetrics:
    """One worker process's counters, written to its own file of the multiprocess directory. Thread-safe
    (the client locks). Made in the worker after the fork; not registered: its supervisor serves them."""

    def __init__(self, namespace: str):
        client = prometheus_client()

        def counter(name: str, meaning: str, *labels: str):
            return client.Counter(name, meaning, ("namespace",) + labels, registry=None)

        tasks = counter("batchd_tasks", "tasks written back, by outcome", "outcome")
        items = counter("batchd_items", "items landed: stored, or dumped to FAILED_ITEMS_PATH", "outcome")
        self.namespace = namespace
        self.responses = counter("batchd_responses", "responses received, by HTTP status", "status")
        self.errors = counter("batchd_request_errors", "attempts that got no response, by exception", "error")
        self.tasks_done, self.tasks_failed = tasks.labels(namespace, "done"), tasks.labels(namespace, "failed")
        self.latency = client.Histogram("batchd_fetch_latency_seconds", "seconds from sending a request to the end "
                                        "of its response's body", ("namespace",), buckets=LATENCY_BUCKETS,
                                        registry=None).labels(namespace)
        self.in_progress = client.Gauge("batchd_fetches_in_progress", "attempts being sent now", ("namespace",),
                                        multiprocess_mode="livesum", registry=None).labels(namespace)
        # BatchStats' names with a counter of their own; the families below are looked up once per label.
        self._counters: dict = {
            "item/stored": items.labels(namespace, "stored"), "item/dumped": items.labels(namespace, "dumped"),
            REQUESTS: counter("batchd_requests", "attempts sent (a retry is an attempt)").labels(namespace),
            RETRY_COUNT: counter("batchd_retries", "attempts retried").labels(namespace),
            BYTES: counter("batchd_response_bytes", "bytes of response bodies").labels(namespace),
            # Sums of the families below: not exported twice.
            RESPONSES: UNCOUNTED, "downloader/exception_count": UNCOUNTED}

    def count(self, name: str, n: int) -> None:
        """What BatchStats counts under `name`, in the counter that exports it (if any)."""
        counter = self._counters.get(name)
        if counter is None:
            counter = self._counter_for(name)
        counter.inc(n)

    def _counter_for(self, name: str):
        for prefix, family in ((STATUS_PREFIX, self.responses), (EXCEPTION_PREFIX, self.errors)):
            if name.startswith(prefix):
                counter = self._counters[name] = family.labels(self.namespace, name[len(prefix):])
                return counter
        return UNCOUNTED      # not exported (a spider's own names: not cached, there may be any number)

    def batch_stats(self) -> BatchStats:
        """The worker's BatchStats, counting here too."""
        return MeteredStats(self)

    def settled(self, done: int, failed: int) -> None:
        if done:
            self.tasks_done.inc(done)
        if failed:
            self.tasks_failed.inc(failed)


class MeteredStats(BatchStats):
    """A worker's BatchStats that also counts in its Prometheus counters: the same call sites for both."""

    def __init__(self, metrics: WorkerMetrics):
        super().__init__()
        self.metrics = metrics

    def inc(self, name: str, count: int = 1, batch_id=None) -> None:
        super().inc(name, count, batch_id)
        self.metrics.count(name, count)


class MeteredLedger(SharedLedger):
    """A worker's ledger row that also counts the tasks it is told were written back."""

    def __init__(self, block: LedgerBlock, number: int, slots: int, metrics: WorkerMetrics):
        super().__init__(block, number, min(slots, block.slots_per_worker))
        self.metrics = metrics

    def count(self, done: int = 0, failed: int = 0, items: int = 0) -> None:
        super().count(done, failed, items)
        self.metrics.settled(done, failed)


class FetchLatencyMiddleware(DownloaderMiddleware):
    """Innermost link: each attempt's time (Response.elapsed) into batchd_fetch_latency_seconds, and the
    attempts under way. Only in the chain of a worker with metrics on."""

    def __init__(self, metrics: WorkerMetrics):
        self.latency, self.in_progress = metrics.latency, metrics.in_progress

    @classmethod
    def from_context(cls, context: ChainContext) -> Optional["FetchLatencyMiddleware"]:
        return None if context.metrics is None else cls(context.metrics)

    def process_request(self, request: Request) -> None:
        self.in_progress.inc()

    def process_response(self, request: Request, response: Response) -> Response:
        self.in_progress.dec()
        self.latency.observe(response.elapsed)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        self.in_progress.dec()
        if isinstance(exception, PageRejected):      # a page came back: its time counts
            self.latency.observe(exception.response.elapsed)
        return None


# -- the supervisor's side

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


class SupervisorCollector:
    """The supervisor's gauges, read (through `figures`, see Supervisor.metric_figures) as a scrape asks."""

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

        yield gauge("batchd_workers_alive", "worker processes of this supervisor", figures["workers_alive"])
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

    def _outages(self, namespace: str, down: set):
        from prometheus_client.core import GaugeMetricFamily

        self._backends_seen |= down
        family = GaugeMetricFamily("batchd_backend_outage", "1 while a child of this supervisor waits for the "
                                   "backend", labels=["namespace", "backend"])
        for backend in sorted(self._backends_seen):
            family.add_metric([namespace, backend], int(backend in down))
        return family


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

    def __init__(self, address: str, port: int, instance_key: str, figures: Callable[[], dict]):
        self.directory, self._private = metrics_directory(instance_key)
        # The client picks its multiprocess mode as it is imported, and each child names its files from this
        # variable as it counts: set before both (the supervisor's modules import it nowhere else).
        os.environ[MULTIPROC_ENV] = self.directory
        try:
            client = prometheus_client()
            from prometheus_client import multiprocess
            registry = client.CollectorRegistry()
            multiprocess.MultiProcessCollector(registry, path=self.directory)
            registry.register(SupervisorCollector(figures))
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
