"""FAILED_ITEMS_PATH: the items the database would not take, one JSON line each, and their replay.

Appending is done under flock and fsynced, so a line that is there reached the disk. A replay
(`batchd retry --items`, or a worker once the database is back) claims the file by renaming it to
`<path>.replaying.<pid>` under the same flock, so items dumped meanwhile go to a fresh file. The
claimed file is removed only once each of its lines is stored, appended back to FAILED_ITEMS_PATH,
or moved aside to `<path>.torn`; a replay that stops on a disk error leaves it for the next replay,
which picks up every claimed file no live replay holds (a POSIX lock, which flock never meets).

Replay stores in batches; a batch the database refuses is split in halves until every storable
item is stored and each refused item is kept alone, with the database's own reason for it.
"""
import fcntl
import logging
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

from ..codec import dumps, loads
from ..errors import BackendUnavailable
from ..service.systemd import counted
from ..model import ItemDestination, ItemRow
from ..backends.store import store_items

log = logging.getLogger("batchd.failed_items")

REFUSALS_LOGGED = 20      # one line per refused item up to this many per replay, then one line for the rest
MAX_DEPTH = 100           # deeper values are written as a tagged repr (a nesting that deep is a bug upstream)
REPR_TAG = "$batchd"      # the codec's tag: {"$batchd": "repr", "v": "..."} marks a value written as its repr

# POSIX locks belong to the process, so two threads of one process would both get a claimed file's lock.
_REPLAY_IN_PROCESS = threading.Lock()


@dataclass
class ReplayResult:
    """What a replay did. `kept` counts the items appended back to FAILED_ITEMS_PATH: those the
    database refused (each with its reason) and those not tried because of an outage."""

    stored: int = 0
    kept: int = 0
    moved_aside: int = 0                  # unreadable lines appended to <path>.torn
    interrupted_by_outage: bool = False
    disk_error: Optional[str] = None      # one line naming the file and the OS error; nothing is lost


class DiskRefused(Exception):
    """A file of the replay could not be read or written (disk full, read-only, I/O error)."""


@contextmanager
def disk_step(action: str, path: str) -> Iterator[None]:
    try:
        yield
    except OSError as e:
        reason = f"[Errno {e.errno}] {e.strerror}" if e.strerror else str(e)
        raise DiskRefused(f"cannot {action} {path}: {reason}") from None


def encode_line(record: dict) -> bytes:
    """One JSON line; never raises. A value the codec refuses becomes a tagged repr, and a lone
    surrogate (which UTF-8 cannot hold) a JSON \\u escape that reads back as the same string."""
    try:
        text = dumps(record)
    except Exception:         # any value a spider put in an item: the item must still reach the disk
        text = dumps(writable(record))
    return (text + "\n").encode("utf-8", "backslashreplace")


def writable(value, depth: int = 0, path: frozenset = frozenset()):
    """A copy of `value` the codec can write: dicts and lists walked, cycles cut, refused leaves repr'd."""
    if depth > MAX_DEPTH or id(value) in path:
        return tagged_repr(value)
    if isinstance(value, (dict, list, tuple)):
        inner = path | {id(value)}
        if isinstance(value, dict):
            return {writable_key(k): writable(v, depth + 1, inner) for k, v in value.items()}
        return [writable(v, depth + 1, inner) for v in value]
    try:
        dumps(value)
        return value
    except Exception:
        return tagged_repr(value)


def writable_key(key):
    return key if key is None or isinstance(key, (str, int, float, bool)) else safe_repr(key)


def tagged_repr(value) -> dict:
    return {REPR_TAG: "repr", "v": safe_repr(value)}


def safe_repr(value) -> str:
    try:
        return repr(value)
    except Exception:         # a broken __repr__ must not cost the item
        return f"<{type(value).__qualname__}: repr failed>"


def one_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".replace("\n", " ")


class FailedItemsFile:
    """FAILED_ITEMS_PATH: one JSON line per item that could not be stored, appended under flock.

    An appender that opened the file before a replay renamed it sees, once it has the lock, that
    the name moved on, and opens it again.
    """

    def __init__(self, path: str):
        self.path = path
        self.torn_path = path + ".torn"
        self.claim_prefix = path + ".replaying."

    def append(self, records: list) -> None:
        """Write and fsync; raises OSError (and nothing else) if the items did not reach the disk."""
        self.append_bytes(self.path, b"".join(encode_line(record) for record in records))

    def append_bytes(self, path: str, data: bytes) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        while True:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o640)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if not self._still_named(fd, path):
                    continue          # renamed by a replay while we waited: write to the new file
                if not self._ends_a_line(fd):
                    data = b"\n" + data    # a crash tore the last line: ours must not be glued to it
                self._write_whole(fd, data)
                return
            finally:
                os.close(fd)

    @staticmethod
    def _write_whole(fd: int, data: bytes) -> None:
        """All of `data` on the disk, or none of it: a disk that fills up half-way leaves no torn line."""
        size = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError:
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass              # the next append starts a line of its own, the next replay moves this aside
            raise

    @staticmethod
    def _still_named(fd: int, path: str) -> bool:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return False
        own = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)

    @staticmethod
    def _ends_a_line(fd: int) -> bool:
        size = os.fstat(fd).st_size
        return size == 0 or os.pread(fd, 1, size - 1) == b"\n"

    @staticmethod
    def record(table: str, kind: str, row: ItemRow, error: str, key: Sequence[str] = ()) -> dict:
        """One line's record; `key`: the columns the item is upserted on (an Item's __unique_key__), kept
        only when there are some."""
        record = {"table": table, "kind": kind, "batch_id": row.batch_id, "task_id": row.task_id,
                  "request_seq": row.request_seq, "item_seq": row.item_seq, "item": row.data,
                  "error": error, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
        return dict(record, key=list(key)) if key else record

    @staticmethod
    def parse(line: str) -> tuple:
        """(record, table, kind, ItemRow) from one line; ValueError / KeyError / TypeError if it is not one."""
        record = loads(line)
        row = ItemRow(batch_id=record["batch_id"], task_id=record["task_id"],
                      request_seq=record["request_seq"], item_seq=record["item_seq"], data=record["item"])
        if not (isinstance(record["table"], str) and isinstance(record["kind"], str) and isinstance(row.data, dict)):
            raise ValueError("table and kind must be strings, item an object")
        if not (isinstance(record.get("key", []), list) and all(isinstance(c, str) for c in record.get("key", []))):
            raise ValueError("key must be a list of column names")
        return record, record["table"], record["kind"], row


    # -- replay: `batchd retry --items`, and a worker once the database is back
    def replay(self, store, batch_size: int = 500) -> ReplayResult:
        """Store what the database takes, keep what it refuses, move unreadable lines aside. Stops
        storing at an outage (what was not stored goes back to the file) and at a disk error (the
        claimed file stays). Claimed files that replays now over left behind are replayed too.
        Logs its own summary; an outage, a refusal or a disk error is reported, never raised."""
        with _REPLAY_IN_PROCESS:
            return Replay(self, store, batch_size).run()

    def claim(self) -> Optional[tuple]:
        """(claimed path, fd holding its POSIX lock) after renaming FAILED_ITEMS_PATH, or None when
        there is no file, or when this process's earlier claim is still there (it goes first)."""
        claimed = f"{self.claim_prefix}{os.getpid()}"
        with disk_step("claim", self.path):
            if os.path.lexists(claimed):
                return None       # never clobber a claimed file: it holds items
            while True:
                try:
                    fd = os.open(self.path, os.O_RDWR)
                except FileNotFoundError:
                    return None
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)       # no append is half-way through
                    if self._still_named(fd, self.path):
                        fcntl.lockf(fd, fcntl.LOCK_EX)
                        os.rename(self.path, claimed)
                        fcntl.flock(fd, fcntl.LOCK_UN)   # appenders waiting on it move on to a new file
                        return claimed, fd
                except BaseException:
                    os.close(fd)
                    raise
                os.close(fd)          # another replay claimed it meanwhile: a new file may be there

    def leftovers(self) -> list:
        """The claimed files of this directory, oldest name first."""
        directory = os.path.dirname(os.path.abspath(self.path))
        prefix = os.path.basename(self.claim_prefix)
        with disk_step("list", directory):
            names = os.listdir(directory) if os.path.isdir(directory) else []
        return sorted(os.path.join(directory, name) for name in names if name.startswith(prefix))

    def open_leftover(self, path: str) -> Optional[int]:
        """The leftover's fd, locked; None when a running process may still be replaying it. The pid in
        its name is checked as well as the lock: a process that closes any fd of a file loses its POSIX
        locks on it, and a worker's appender may close one it opened before the rename."""
        owner = path[len(self.claim_prefix):]
        if owner.isdigit() and int(owner) != os.getpid() and _running(int(owner)):
            log.info("%s belongs to running process %s: left to it", path, owner)
            return None
        with disk_step("open", path):
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                return None       # finished by its owner since the directory was listed
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError:
            os.close(fd)
            return None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # someone else's process: running
        return True
    return True


class Replay:
    """One replay: FAILED_ITEMS_PATH claimed first (so what this replay appends back waits for the
    next one), then each claimed file read, its unreadable lines moved aside, its items stored in
    batches, what was refused or left untried by an outage appended back, and the file removed."""

    def __init__(self, failed: FailedItemsFile, store, batch_size: int):
        self.failed, self.store, self.batch_size = failed, store, batch_size
        self.result = ReplayResult()
        self.outage = ""
        self.refusals_logged = self.refusals_unlogged = 0

    def run(self) -> ReplayResult:
        try:
            self.replay_files()
        except DiskRefused as e:
            self.result.disk_error = str(e)
        self.log_summary()
        return self.result

    def replay_files(self) -> None:
        fresh = self.failed.claim()
        try:
            for leftover in self.failed.leftovers():
                fd = None if fresh and leftover == fresh[0] else self.failed.open_leftover(leftover)
                if fd is not None:
                    try:
                        self.replay_claimed(leftover, fd)
                    finally:
                        os.close(fd)
            if fresh:
                self.replay_claimed(*fresh)
        finally:
            if fresh:
                os.close(fresh[1])

    def replay_claimed(self, claimed: str, fd: int) -> None:
        try:
            with disk_step("read", claimed):
                groups, torn = self.read(fd)
            self.move_aside(claimed, torn)
            back = self.store_all(groups)
            if back:
                with disk_step("write", self.failed.path):
                    self.failed.append(back)
                self.result.kept += len(back)
            with disk_step("remove", claimed):
                os.unlink(claimed)
        except DiskRefused as e:
            raise DiskRefused(f"{e}; {claimed} stays whole for the next retry") from None

    def read(self, fd: int) -> tuple:
        """({(table, kind, key): [(record, row)]}, [(line number, raw line, reason)] of the unreadable lines)."""
        groups: dict = {}
        torn: list = []
        with open(fd, "rb", closefd=False) as f:     # through the locked fd: closing another would drop the lock
            for number, raw in enumerate(f, start=1):
                if not raw.strip():
                    continue
                try:
                    record, table, kind, row = self.failed.parse(raw.decode("utf-8"))
                except (ValueError, KeyError, TypeError, RecursionError) as e:
                    torn.append((number, raw, one_line(e)))
                    continue
                groups.setdefault((table, kind, tuple(record.get("key", ()))), []).append((record, row))
        return groups, torn

    def move_aside(self, claimed: str, torn: list) -> None:
        """Unreadable lines (a crash mid-append, a hand edit) go to <path>.torn, and never come back."""
        if not torn:
            return
        data = b"".join(raw if raw.endswith(b"\n") else raw + b"\n" for _, raw, _ in torn)
        with disk_step("write", self.failed.torn_path):
            self.failed.append_bytes(self.failed.torn_path, data)
        self.result.moved_aside += len(torn)
        number, _, reason = torn[0]
        log.warning("%d unreadable lines of %s moved aside to %s (line %d: %s)", len(torn), claimed,
                    self.failed.torn_path, number, reason)

    def store_all(self, groups: dict) -> list:
        """Store every entry; return the records to append back: each refused one with its own reason
        and, from an outage on, every one not stored. A refused batch is split in halves (on a stack,
        so the file's order is kept) until each refused item stands alone."""
        size = self.batch_size
        todo = [(ItemDestination(*destination), entries[start:start + size])
                for destination, entries in groups.items() for start in range(0, len(entries), size)]
        todo.reverse()
        back: list = []
        while todo and not self.result.interrupted_by_outage:
            destination, part = todo.pop()
            try:
                store_items(self.store, destination, [row for _, row in part])
                self.result.stored += len(part)
            except BackendUnavailable as e:
                self.result.interrupted_by_outage, self.outage = True, one_line(e)
                todo.append((destination, part))
            except Exception as e:       # the database refused something in this batch
                if len(part) > 1:
                    half = len(part) // 2
                    todo += [(destination, part[half:]), (destination, part[:half])]
                    continue
                record, row = part[0]
                back.append(dict(record, error=one_line(e)))
                self.log_refusal(destination.table, row, one_line(e))
        return back + [record for _, part in reversed(todo) for record, _ in part]

    def log_refusal(self, table: str, row: ItemRow, reason: str) -> None:
        if self.refusals_logged == REFUSALS_LOGGED:
            self.refusals_unlogged += 1
            return
        self.refusals_logged += 1
        log.error("item of task %s refused by `%s` (batch %s, request %s, item %s): %s; kept in %s",
                  row.task_id, table, row.batch_id, row.request_seq, row.item_seq, reason, self.failed.path)

    def log_summary(self) -> None:
        r, path = self.result, self.failed.path
        if self.refusals_unlogged:
            log.error("%d more items refused; each keeps its reason in the `error` field of %s",
                      self.refusals_unlogged, path)
        if r.disk_error:
            log.error("replay of %s stopped after %s stored: %s", path, counted(r.stored, "item"), r.disk_error)
            return
        figures = f"{counted(r.stored, 'item')} stored, {r.kept} kept for the next retry, {r.moved_aside} moved aside"
        if r.interrupted_by_outage:
            log.warning("replay of %s stopped by an outage: %s (%s)", path, self.outage, figures)
        elif r.stored or r.kept or r.moved_aside:
            log.log(logging.WARNING if r.kept else logging.INFO, "replayed %s: %s", path, figures)
        else:
            log.info("nothing to replay in %s", path)
