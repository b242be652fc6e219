"""The SQLite backend: the task table, the batch record, the items and every queue-side port in one
file (no MySQL, no Redis), for the master and the workers of one host."""
from ..ports import Backend, SupervisorPorts
from .sqlite_file import SqliteFile
from .sqlite_ports import (SqliteCounters, SqliteLeaseQueue, SqliteMasterLocks, SqliteNamespaceRecord,
                           SqliteRenderChoices, SqliteSeenFilter, SqliteStatusBoard, SqliteTally, SqliteWake,
                           create_schema)
from .sqlite_store import SqliteBatchStore


def open_store(path: str) -> SqliteBatchStore:
    return SqliteBatchStore(path)


def open_backend(store: SqliteBatchStore, namespace: str, settings=None) -> Backend:
    """Every port of `namespace`, in the store's own file."""
    db = store.db
    create_schema(db)
    return Backend(store=store, leases=SqliteLeaseQueue(db, namespace), locks=SqliteMasterLocks(db, namespace),
                   wake=SqliteWake(db, namespace), board=SqliteStatusBoard(db, namespace),
                   seen=SqliteSeenFilter(db, namespace), namespaces=SqliteNamespaceRecord(db, namespace),
                   tally=SqliteTally(db, namespace), counters=SqliteCounters(db, namespace),
                   renders=SqliteRenderChoices(db, namespace))


def open_supervisor_ports(path: str, namespace: str, timeout: float) -> SupervisorPorts:
    """The supervisor's ports on the file, each statement waiting at most `timeout` s for the write lock."""
    db = SqliteFile(path, busy_timeout=timeout)
    create_schema(db)
    return SupervisorPorts(board=SqliteStatusBoard(db, namespace), leases=SqliteLeaseQueue(db, namespace),
                           wake=SqliteWake(db, namespace), tally=SqliteTally(db, namespace),
                           counters=SqliteCounters(db, namespace), close=db.close)
