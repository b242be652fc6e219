"""What batchd reports of a namespace, gathered as figures from one set of sources: a supervisor's own figures,
made once per report tick, behind its snapshot, its STATUS= line and its /metrics gauges (supervisor_report.py;
the snapshot's fields, the board and the line's words: snapshots.py; the /metrics server: metrics.py); where a
batch stands and why (status.py, why.py); the failed tasks (failed_tasks.py). The command (cli/) and the
dashboard (web/) lay out what this package gathers, each its own way; none of them works a figure out on its
own, and nothing here knows how it is shown."""
