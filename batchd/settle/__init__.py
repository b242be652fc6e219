"""Settling a task: the one path every outcome takes (settler.py), the failure records it writes
(failures.py) and the per-batch counters (stats.py). Below the master and the worker, which both settle
tasks, and above the backends' ports."""
