"""The memory backend: a MemoryBatchStore and its in-process ports, for one process (tests, small runs);
the master and the worker run as threads of it."""
import threading
import weakref

from ...hosts.render_choices import LocalRenderChoices
from ..ports import Backend
from .local_queue import LocalQueue
from .memory_store import MemoryBatchStore

_queues: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # store -> {namespace: LocalQueue}
_queues_lock = threading.Lock()
_render_choices: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # LocalQueue -> LocalRenderChoices


def open_backend(store: MemoryBatchStore, namespace: str, settings=None) -> Backend:
    """Every port of `namespace` for this store: the same objects for every caller in the process (the
    master and the worker threads meet there)."""
    with _queues_lock:
        queue = _queues.setdefault(store, {}).setdefault(namespace, None) or LocalQueue(namespace)
        _queues[store][namespace] = queue
        renders = _render_choices.setdefault(queue, LocalRenderChoices())
    return Backend(store=store, leases=queue, locks=queue, wake=queue, board=queue, seen=queue, namespaces=queue,
                   tally=queue, counters=queue, renders=renders)


__all__ = ["MemoryBatchStore", "open_backend"]
