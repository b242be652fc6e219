"""Task queues: how claimed tasks travel from the master to the workers, under leases."""
from .base import Lease, MasterLock, TaskQueue

__all__ = ["Lease", "MasterLock", "TaskQueue"]
