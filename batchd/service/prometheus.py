"""prometheus-client, the optional import behind METRICS_PORT: one place that imports it for the roles
that count (worker/worker_metrics.py) and the supervisor that serves (reporting/metrics.py).

It is an extra (python3-prometheus-client, or `pip install "batchd[metrics]"`): its absence is a
configuration error (exit 78) that names the package, never an ImportError mid-run.
"""
from ..errors import ConfigError

MISSING_CLIENT = ("METRICS_PORT is set but prometheus-client is not installed: apt install "
                  "python3-prometheus-client (or pip install \"batchd[metrics]\"), or set METRICS_PORT = 0")


def prometheus_client():
    """The client module; ConfigError naming the package when it is not installed."""
    try:
        import prometheus_client as client
    except ImportError:
        raise ConfigError(MISSING_CLIENT) from None
    return client
