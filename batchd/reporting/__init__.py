"""What batchd reports of a namespace, read from one set of sources: the supervisors' snapshots and STATUS=
line (snapshots.py), `batchd status` and its --why, --hosts and --history (status.py, why.py), the failed
tasks (failed_tasks.py), and Prometheus /metrics (metrics.py). The command (cli/), the dashboard (web/) and
the supervisor show what this package reads; none of them works a figure out on its own."""
