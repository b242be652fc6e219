"""A worker's Prometheus counters (METRICS_PORT), written in prometheus-client's multiprocess mode to the
worker's own file of the directory its supervisor made and named in PROMETHEUS_MULTIPROC_DIR before the
fork (reporting/metrics.py serves them, the files of every worker merged).

`WorkerMetrics` is made in the worker after the fork; it counts where the worker's BatchStats and its
ledger row count (`MeteredStats`, `MeteredLedger`: the same call sites for both), and the fetch latency
of each attempt is taken by download/middlewares/latency.py's link. Every metric carries the label
`namespace`; summed over the host's worker processes, dead ones included:
    batchd_tasks_total{outcome=done|failed}      tasks written back
    batchd_items_total{outcome=stored|dumped}    items landed in the database, or in FAILED_ITEMS_PATH
    batchd_requests_total                        attempts sent (a retry is an attempt)
    batchd_responses_total{status}               responses, by HTTP status
    batchd_request_errors_total{error}           attempts that got no response, by exception
    batchd_retries_total                         attempts retried
    batchd_response_bytes_total                  bytes of response bodies
    batchd_fetch_latency_seconds                 a histogram of each response's time, sent to body read
    batchd_fetches_in_progress                   attempts being sent now (live workers only)

prometheus-client is optional (python3-prometheus-client, the `metrics` extra): service/prometheus.py imports
it, for the supervisor too, and turns its absence into a configuration error (exit 78) naming the package.
"""
from ..service.prometheus import prometheus_client
from ..settle.ledger import LedgerBlock, SharedLedger
from ..settle.batch_stats import BYTES, REQUESTS, RESPONSES, RETRY_COUNT, STATUS_PREFIX, BatchStats
from ..recrawl.pages import FOUND, ITEMS_UNCHANGED, VERDICTS

EXCEPTION_PREFIX = "downloader/exception_type_count/"
# Seconds: a page of a fast site in the first buckets, DOWNLOAD_TIMEOUT's default (180) in the last.
LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 180.0)


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
        items = counter("batchd_items", "items landed: stored, or dumped to FAILED_ITEMS_PATH; unchanged: not "
                                        "written again, equal to those stored", "outcome")
        found = counter("batchd_recrawl_tasks", "tasks whose pages a re-crawl found new, changed, unchanged or gone",
                        "found")
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
            ITEMS_UNCHANGED: items.labels(namespace, "unchanged"),
            **{FOUND + verdict: found.labels(namespace, verdict) for verdict in VERDICTS},
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
