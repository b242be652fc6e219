"""Settling a task: the one path every outcome takes (settler.py) and the failure records it writes
(failures.py). Below the master and the worker, which both settle tasks, and above the backends' ports."""
