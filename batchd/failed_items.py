"""FAILED_ITEMS_PATH: the items the database would not take, one JSON line each, and their replay.

Appending is done under flock and fsynced, so a line that is there reached the disk.
`batchd retry --items` (and a worker, once the database is back) renames the file under
the same lock before replaying it, so items dumped meanwhile go to a fresh file.
"""
import fcntl
import logging
import os
import time
from typing import Optional

from .codec import dumps, loads
from .store.base import ItemRow

log = logging.getLogger("batchd.pipeline")


class FailedItemsFile:
    """FAILED_ITEMS_PATH: one JSON line per item that could not be stored, appended under flock.

    `batchd retry --items` renames the file (under the same lock) before replaying it, so
    items dumped meanwhile go to a fresh file; an appender that opened the old name before
    the rename sees, once it has the lock, that the name moved on, and opens it again.
    """

    def __init__(self, path: str):
        self.path = path

    def append(self, records: list) -> None:
        """Write and fsync; raises OSError if the items did not reach the disk."""
        self._append_bytes("".join(dumps(record) + "\n" for record in records).encode("utf-8"))

    def _append_bytes(self, data: bytes) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if not self._still_named(fd):
                    continue          # renamed by a replay while we waited: write to the new file
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
                return
            finally:
                os.close(fd)

    def _still_named(self, fd: int) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        own = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)

    @staticmethod
    def record(table: str, kind: str, row: ItemRow, error: str) -> dict:
        return {"table": table, "kind": kind, "batch_id": row.batch_id, "task_id": row.task_id,
                "request_seq": row.request_seq, "item_seq": row.item_seq, "item": row.data,
                "error": error, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}

    @staticmethod
    def parse(line: str) -> tuple:
        """(record, table, kind, ItemRow) from one line; ValueError / KeyError if it is not one."""
        record = loads(line)
        row = ItemRow(batch_id=record["batch_id"], task_id=record["task_id"],
                      request_seq=record["request_seq"], item_seq=record["item_seq"], data=record["item"])
        return record, record["table"], record["kind"], row

    # -- batchd retry --items
    def replay(self, store, batch_size: int = 500) -> tuple:
        """Store what can be stored; keep the rest (appended back to the file). Returns (stored, kept).
        A replay interrupted earlier left `<path>.replaying.<pid>` files: they are replayed too."""
        stored = kept = 0
        for claimed in self._leftovers() + [self._claim()]:
            if claimed is None:
                continue
            s, k = self._replay_file(claimed, store, batch_size)
            stored, kept = stored + s, kept + k
            os.unlink(claimed)
        return stored, kept

    def _claim(self) -> Optional[str]:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            claimed = f"{self.path}.replaying.{os.getpid()}"
            os.rename(self.path, claimed)
            return claimed
        finally:
            os.close(fd)

    def _leftovers(self) -> list:
        directory = os.path.dirname(os.path.abspath(self.path))
        prefix = os.path.basename(self.path) + ".replaying."
        return sorted(os.path.join(directory, name) for name in os.listdir(directory) if name.startswith(prefix)) \
            if os.path.isdir(directory) else []

    def _replay_file(self, path: str, store, batch_size: int) -> tuple:
        groups: dict = {}
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    record, table, kind, row = self.parse(line)
                except (ValueError, KeyError, TypeError) as e:
                    log.error("%s line %d is not a failed-item record (%s: %s); kept", path, number,
                              type(e).__name__, e)
                    self._keep_raw(line)
                    continue
                groups.setdefault((table, kind), []).append((record, row))
        stored = kept = 0
        for (table, kind), entries in groups.items():
            for start in range(0, len(entries), batch_size):
                part = entries[start:start + batch_size]
                try:
                    store.save_items(table, kind, [row for _, row in part])
                    stored += len(part)
                except Exception as e:   # kept for the next replay, with the new reason
                    error = f"{type(e).__name__}: {e}"
                    log.error("%d items for `%s` still not stored: %s; kept in %s", len(part), table, error, self.path)
                    self.append([dict(record, error=error) for record, _ in part])
                    kept += len(part)
        return stored, kept

    def _keep_raw(self, line: str) -> None:
        self._append_bytes((line if line.endswith("\n") else line + "\n").encode("utf-8"))
