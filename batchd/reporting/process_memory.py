"""What a supervisor's workers hold in memory, their browsers included, measured in a thread of the supervisor.

A worker that renders pages starts its browsers as its own descendants (render/: chromedriver a child of the
worker, Chromium a child of chromedriver, Chromium's renderers under it), so a worker's memory is that of its
process tree: the worker's PSS and its descendants', the descendants being its browsers. PSS (proportional set
size) splits a shared page among the processes that map it, so the trees of two workers that share pages
with the supervisor (fork's copy-on-write) or with each other add up to what they really take, where RSS
would count a shared page in each. A process whose smaps_rollup cannot be read (another user's: a sandboxed
renderer) counts its RSS instead, and the tree's `measure` says so ("pss+rss", or "rss" alone).

What it costs, and so where it runs: finding the descendants is a scan of /proc (a read of each process's
stat, ~35 us a process), done once per measurement for every child; PSS is the kernel's walk of a process's
page tables as smaps_rollup is read, ~3 ms for each of Chromium's processes (a browser has about ten). A
measurement of 8 workers with 2 browsers each would so hold the supervisor's loop for half a second: it runs
in a thread of its own instead (`MemoryWatch`, `batchd-memory`), every STATUS_INTERVAL, or less often when a
measurement costs more than MOST_BUSY of a CPU over its interval; the report's tick takes its last figures.
"""
import logging
import threading
import time
from dataclasses import dataclass
from typing import Iterable, Optional

from ..render.processes import children_by_parent, descendants, memory_of
from ..service.threads import check_in, start_thread

log = logging.getLogger("batchd.report")

MOST_BUSY = 0.05        # the share of one CPU the measuring thread may take, at most


@dataclass(frozen=True)
class TreeMemory:
    """One worker's process tree, in bytes."""

    total: int          # the worker and every process under it
    browsers: int       # the processes under it alone: the browsers it started
    measure: str        # "pss"; "pss+rss" or "rss" when some processes could only be read as RSS

    def fields(self) -> dict:
        """As the snapshot's worker entry names them (snapshots.py)."""
        return {"memory": self.total, "browser_memory": self.browsers, "memory_measure": self.measure}

    def plus(self, other: "TreeMemory") -> "TreeMemory":
        """Two trees as one (two workers sharing a seat during a reload)."""
        return TreeMemory(self.total + other.total, self.browsers + other.browsers,
                          measure_of(self.measure.split("+") + other.measure.split("+")))


def measure_of(measures: Iterable[str]) -> str:
    """How a tree was measured: pss, rss, or pss+rss when some of its processes were read one way and some the
    other."""
    return "+".join(sorted(set(measures)))


def measure_children(parent: int) -> dict:
    """child pid -> TreeMemory of each child of `parent` (and its descendants), from one scan of /proc."""
    children = children_by_parent()
    return measure_trees(children.get(parent, []), children)


def measure_trees(roots: Iterable[int], children: Optional[dict] = None) -> dict:
    """root pid -> TreeMemory of it and its descendants, from one scan of /proc (or from `children`, a scan
    made already: children_by_parent); a root already gone is left out."""
    roots = list(roots)
    if not roots:
        return {}
    if children is None:
        children = children_by_parent()
    trees = {root: tree_memory(root, descendants(root, children)) for root in roots}
    return {root: tree for root, tree in trees.items() if tree is not None}


def tree_memory(root: int, below: list) -> Optional[TreeMemory]:
    """The memory of `root` and of the processes `below` it; None when `root` is gone (a process below that
    ended since the scan counts 0)."""
    own = memory_of(root)
    if own is None:
        return None
    measured = [m for m in map(memory_of, below) if m is not None]
    browsers = sum(size for size, _ in measured)
    return TreeMemory(total=own[0] + browsers, browsers=browsers,
                      measure=measure_of([own[1], *(how for _, how in measured)]))


def pause_after(cost: float, interval: float) -> float:
    """Seconds from one measurement to the next: `interval`, or longer when the measurement took `cost` seconds
    of CPU, so that the thread is busy MOST_BUSY of the time at most."""
    return max(interval, cost / MOST_BUSY)


class MemoryWatch:
    """The process tree of each child of `parent`, measured in a thread of its own (`batchd-memory`) every
    `interval` seconds at most as often as MOST_BUSY allows; `trees()` gives the last measurement, replaced
    whole, so a reader never sees half of one."""

    def __init__(self, parent: int, interval: float):
        self.parent, self.interval = parent, interval
        self._trees: dict = {}
        self._stopped = threading.Event()
        self._started = False
        self._failing = False

    def start(self) -> None:
        """Measure from now on (once; a watch stopped stays stopped)."""
        if not self._started:
            self._started = True
            start_thread(self._run, "batchd-memory")

    def trees(self) -> dict:
        """child pid -> TreeMemory as last measured ({} before the first measurement)."""
        return self._trees

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.is_set():
            began = time.thread_time()
            self._trees = self._measure()
            pause = pause_after(time.thread_time() - began, self.interval)
            check_in(within=pause + 1.0)      # a thread that keeps its word: the guard does not call it stale
            self._stopped.wait(pause)

    def _measure(self) -> dict:
        try:
            trees = measure_children(self.parent)
        except Exception as e:   # memory is a figure to show: no failure to read it may end the supervisor
            if not self._failing:
                log.warning("cannot measure the workers' memory: %s: %s", type(e).__name__, e)
            self._failing = True
            return {}
        self._failing = False
        return trees
