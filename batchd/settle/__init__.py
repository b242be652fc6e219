"""Settling a task: the one path every outcome takes (settler.py), the failure records it writes
(failures.py), the per-batch counters (batch_stats.py), and the ledger of what a worker holds that has not
landed yet (ledger.py), which gates a done write-back, and how fast a batch's tasks settle (progress_rate.py). Below the master and the worker, which both settle
tasks, and above the backends' ports."""
