"""A browser's processes: started so that none outlives its worker, measured, and killed to the last one.

A worker that is SIGKILLed cannot quit its browsers. So each link of the chain dies with the one above it:
chromedriver and Chromium are both started through `setpriv --pdeathsig KILL` (util-linux, on every Debian),
which has the kernel kill chromedriver when the thread that started it ends (the pool's launcher thread,
which lives as long as its worker), and kill Chromium when its chromedriver ends. Chromium's own children
(zygote, renderers, the GPU and network services) end with their browser. A clean quit, or a recycle, stops
the whole tree, kills it, and returns once none of it is alive.
"""
import os
import shlex
import shutil
import signal
import stat
import time
from typing import Iterable, Optional

WRAPPER_NAME = "browser"
GONE_POLL = 0.02           # seconds between looks at killed processes still tearing down


def parent_death_wrapper(program: str, folder: str, name: str = WRAPPER_NAME) -> str:
    """An executable in `folder` that runs `program` (with its arguments) under a SIGKILL parent-death signal."""
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    path = os.path.join(folder, name)
    with open(path, "w") as script:
        script.write(f"#!/bin/sh\nexec {shlex.quote(setpriv)} --pdeathsig KILL -- {shlex.quote(program)} \"$@\"\n")
    os.chmod(path, stat.S_IRWXU)
    return path


def descendants(root: int, children: Optional[dict] = None) -> list:
    """The pids of every process under `root` (children, their children...), read from /proc; with `children`
    (children_by_parent's map), from that one reading instead."""
    if children is None:
        children = children_by_parent()
    found, frontier = [], [root]
    while frontier:
        below = children.get(frontier.pop(), [])
        found.extend(below)
        frontier.extend(below)
    return found


def children_by_parent() -> dict:
    """parent pid -> its children's pids, from one scan of /proc: what it costs is a read of every process's
    stat, so whoever looks under several roots reads it once."""
    children: dict = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent = _parent_of(int(entry))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
    return children


def _parent_of(pid: int):
    try:
        with open(f"/proc/{pid}/stat") as f:
            # The command name (field 2) may hold spaces and parentheses: the fields after its last ')' are plain.
            return int(f.read().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def pss_bytes(pids: Iterable[int]) -> int:
    """The proportional set size of these processes together (shared pages split among their sharers), in bytes;
    a process that is gone counts 0."""
    return sum(_pss_of(pid) or 0 for pid in pids)


def memory_of(pid: int) -> Optional[tuple]:
    """(bytes, how measured) of one process: its PSS ("pss") from smaps_rollup, or, where that cannot be read
    (another user's process, a kernel without it), its resident set ("rss", VmRSS of /proc/<pid>/status, which
    counts shared pages whole); None once it is gone."""
    pss = _pss_of(pid)
    if pss is not None:
        return pss, "pss"
    rss = _status_bytes(pid, "VmRSS:")
    return None if rss is None else (rss, "rss")


def _pss_of(pid: int) -> Optional[int]:
    return _field_bytes(f"/proc/{pid}/smaps_rollup", "Pss:")


def _status_bytes(pid: int, field: str) -> Optional[int]:
    return _field_bytes(f"/proc/{pid}/status", field)


def _field_bytes(path: str, field: str) -> Optional[int]:
    """A "Name:   123 kB" line's value in bytes; None when the file cannot be read or has no such line (a zombie's
    status has no VmRSS)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def kill_tree(root: int, bound: float) -> None:
    """SIGKILL `root` and every process under it, and wait (up to `bound` s) until none is alive.

    The tree is stopped first, pass after pass until a pass finds no new process: a stopped process cannot fork,
    so a renderer started while the tree is read is caught, not orphaned. A killed process is not gone at once
    (the kernel tears down its memory, hundreds of MB for a browser): the wait is what lets whoever stops a
    worker say that none of its browsers is left."""
    caught: list = []
    while True:
        new = [pid for pid in [root, *descendants(root)] if pid not in caught]
        if not new:
            break
        _signal_all(new, signal.SIGSTOP)
        caught.extend(new)
    _signal_all(caught, signal.SIGKILL)
    deadline = time.monotonic() + bound
    while any(_alive(pid) for pid in caught) and time.monotonic() < deadline:
        time.sleep(GONE_POLL)


def _signal_all(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            continue


def _alive(pid: int) -> bool:
    """Not yet dead: a zombie (state Z) is dead, its parent only has not reaped it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return False
