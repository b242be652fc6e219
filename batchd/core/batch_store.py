"""The seed's import path for the stores: `from batchd.core.batch_store import MemoryBatchStore`, and a
custom backend subclasses `batchd.core.batch_store.BatchStore` (its contract: backends/store.py). The same
classes as `batchd.BatchStore`, `batchd.MemoryBatchStore`, `batchd.MysqlBatchStore`, `batchd.SqliteBatchStore`."""
from ..backends.memory.memory_store import MemoryBatchStore
from ..backends.mysql_redis.mysql import MysqlBatchStore
from ..backends.store import BatchStore
from ..backends.sqlite.sqlite_store import SqliteBatchStore

__all__ = ["BatchStore", "MemoryBatchStore", "MysqlBatchStore", "SqliteBatchStore"]
