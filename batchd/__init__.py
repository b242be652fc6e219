"""batchd: periodic batch web crawling with a MySQL task table and Redis leases."""
__version__ = "0.1.0"

from .config import Settings
from .errors import BackendUnavailable, BatchdError, ConfigError, ExitCode, MasterLockHeld
from .http import Request, RequestFailed, Response
from .spider import BatchSpider
from .store.base import BatchRecord, BatchStore, ItemRow, Progress, TaskLayout
from .store.memory import MemoryBatchStore
from .store.mysql import MysqlBatchStore
from .store.sqlite import SqliteBatchStore
from .task import TaskState

__all__ = [
    "BatchSpider", "Request", "Response", "RequestFailed",
    "BatchStore", "MemoryBatchStore", "MysqlBatchStore", "SqliteBatchStore", "TaskLayout", "BatchRecord", "Progress", "ItemRow",
    "TaskState", "Settings", "ExitCode", "BatchdError", "ConfigError", "BackendUnavailable", "MasterLockHeld",
    "__version__",
]
