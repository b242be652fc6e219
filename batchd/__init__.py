"""batchd: periodic batch web crawling with a MySQL task table and Redis leases."""
from .config import Settings
from .release import VERSION as __version__
from .errors import BackendUnavailable, BatchdError, ConfigError, ExitCode, MasterLockHeld
from .http import FetchOptions, Request, RequestFailed, Response, RetryOptions, RevalidateOptions
from .item import Field, Item, UndeclaredField
from .backends.memory.memory_store import MemoryBatchStore
from .backends.mysql_redis.mysql import MysqlBatchStore
from .backends.sqlite.sqlite_store import SqliteBatchStore
from .download.chain import ChainContext, DownloaderMiddleware
from .model import BatchRecord, ItemRow, Progress, TaskLayout
from .backends.store import BatchStore
from .runtime import Runtime
from .spider import BatchSpider
from .task import TaskState

__all__ = [
    "BatchSpider", "Runtime", "Request", "Response", "RequestFailed", "DownloaderMiddleware", "ChainContext",
    "FetchOptions", "RetryOptions", "RevalidateOptions",
    "Item", "Field", "UndeclaredField",
    "BatchStore", "MemoryBatchStore", "MysqlBatchStore", "SqliteBatchStore", "TaskLayout", "BatchRecord", "Progress", "ItemRow",
    "TaskState", "Settings", "ExitCode", "BatchdError", "ConfigError", "BackendUnavailable", "MasterLockHeld",
    "__version__",
]
