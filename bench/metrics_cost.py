"""What METRICS_PORT costs per request: one attempt through the innermost links of a worker's chain (the
counters' StatsMiddleware, and with metrics on the FetchLatencyMiddleware, the counts going to
prometheus-client's multiprocess files too), the send itself left out. Run from the repository's root:

    .venv/bin/python -m bench.metrics_cost          # one JSON line: ns per attempt, off and on

It sets PROMETHEUS_MULTIPROC_DIR (a temporary directory) before prometheus-client is imported, as a
supervisor does for its workers.
"""
import json
import os
import tempfile
import time

ATTEMPTS = 20_000
ROUNDS = 5


def ns_per_attempt(chain, request, response) -> float:
    """The best of ROUNDS rounds (the least disturbed by the machine's other work)."""
    def send(request):
        return response
    best = float("inf")
    for _ in range(ROUNDS):
        began = time.perf_counter()
        for _ in range(ATTEMPTS):
            chain.attempt(request, send)
        best = min(best, (time.perf_counter() - began) / ATTEMPTS * 1e9)
    return best


def measure() -> dict:
    import requests

    from batchd.http import Request, Response
    from batchd.download.chain import MiddlewareChain
    from batchd.download.middlewares.latency import FetchLatencyMiddleware
    from batchd.download.middlewares.stats import StatsMiddleware
    from batchd.settle.batch_stats import BatchStats
    from batchd.worker.worker_metrics import WorkerMetrics

    request = Request("http://127.0.0.1/page/1")
    raw = requests.models.Response()
    raw.status_code = 200
    response = Response(raw, request, b"x" * 1000)
    response.elapsed = 0.05
    plain, metrics = BatchStats(), WorkerMetrics("bench")
    metered = metrics.batch_stats()
    for stats in (plain, metered):
        stats.working_on(1)
    off = ns_per_attempt(MiddlewareChain([StatsMiddleware(plain)]), request, response)
    on = ns_per_attempt(MiddlewareChain([StatsMiddleware(metered), FetchLatencyMiddleware(metrics)]), request,
                        response)
    return {"off_ns": round(off), "on_ns": round(on), "overhead_ns": round(on - off)}


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="batchd-metrics-bench-") as directory:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
        print(json.dumps(measure()))


if __name__ == "__main__":
    main()
