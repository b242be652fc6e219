"""FetchLatencyMiddleware: each attempt's time into the worker's Prometheus histogram
batchd_fetch_latency_seconds, and the attempts under way into batchd_fetches_in_progress (METRICS_PORT;
the counters are worker/worker_metrics.py's WorkerMetrics).

The time is Response.elapsed, from sending the request to the end of its body. The link is the innermost
of the default chain, so the attempts it counts as under way are those being sent, not those waiting for
a host's turn, the rate limit or a retry's backoff in the links outside it. A page the spider's validate() rejected came back all the same, and
its time counts. With metrics off (no WorkerMetrics in the context) it is not in the chain at all: an
unused feature costs nothing per request.
"""
from typing import Any, Optional, Protocol

from ...http import Request, Response
from ..chain import ChainContext, DownloaderMiddleware, PageRejected


class LatencyMetrics(Protocol):
    """What the link counts into (a WorkerMetrics): a histogram of seconds, and a gauge of attempts under way."""
    latency: Any
    in_progress: Any


class FetchLatencyMiddleware(DownloaderMiddleware):
    """Innermost link: each attempt's time (Response.elapsed) into batchd_fetch_latency_seconds, and the
    attempts under way. Only in the chain of a worker with metrics on."""

    def __init__(self, metrics: LatencyMetrics):
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
