"""The archive on disk: one folder per task table and batch, one file open per worker process at a time.

    ARCHIVE_PATH/<namespace>/<batch id, 8 digits>/<UTC start, 14 digits>-<host>-<pid>-<serial>.warc.gz
                                                 /<same name>.cdxj        its index, one line per record looked up

A file being written is named `.warc.gz.open`, under an exclusive flock held by its writer for as long as it is
open. It is closed (fsynced, then renamed to `.warc.gz`) when it would grow past ARCHIVE_MAX_SIZE, when its
process's records go to another batch, and at the worker's stop. A `.open` file no process holds was left by a
killed writer: `cut_torn_files` (at each worker's first record) cuts it after its last whole record, writes its index
again from what is left and closes it. Records are appended whole, each one gzip member, and an index line only
after its record: a reader that meets a file still open reads only what its index names.
"""
import fcntl
import logging
import os
import re
import socket
import threading
import time
import zlib
from typing import Iterator, Optional

from ..errors import ConfigError
from ..release import VERSION
from .records import GZIP_MEMBER, INDEXED_TYPES, cdxj_line, index_entry, warcinfo_member

log = logging.getLogger("batchd.archive")

WARC_SUFFIX, OPEN_SUFFIX, INDEX_SUFFIX = ".warc.gz", ".open", ".cdxj"
SAFE_NAME = re.compile(r"^[A-Za-z0-9_.$-]+$")
READ_PIECE = 1024 * 1024


def batch_folder(root: str, namespace: str, batch_id: int) -> str:
    return os.path.join(namespace_folder(root, namespace), f"{int(batch_id):08d}")


def namespace_folder(root: str, namespace: str) -> str:
    if not SAFE_NAME.match(namespace) or namespace in (".", ".."):
        raise ConfigError(f"ARCHIVE: the namespace {namespace!r} cannot name a folder")
    return os.path.join(root, namespace)


def batch_folders(root: str, namespace: str) -> dict:
    """batch id -> folder, of the batches archived under `namespace`."""
    base = namespace_folder(root, namespace)
    try:
        names = os.listdir(base)
    except FileNotFoundError:
        return {}
    return {int(name): os.path.join(base, name) for name in names if name.isdigit()}


def index_of(warc_path: str) -> str:
    """The index beside a WARC file, open or closed."""
    name = warc_path[:-len(OPEN_SUFFIX)] if warc_path.endswith(OPEN_SUFFIX) else warc_path
    return name[:-len(WARC_SUFFIX)] + INDEX_SUFFIX


class OpenFile:
    """The one WARC file a process writes, with its index; its writer holds its flock."""

    def __init__(self, folder: str, serial: int):
        os.makedirs(folder, exist_ok=True)
        stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
        self.name = f"{stamp}-{_host()}-{os.getpid()}-{serial:05d}{WARC_SUFFIX}"
        self.folder = folder
        self.path = os.path.join(folder, self.name + OPEN_SUFFIX)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        self.index = open(index_of(self.path), "a", encoding="utf-8")
        self.size = 0
        self.unsynced = False
        self.append([(warcinfo_member(self.name, _info(), time.time()), None)])
        _sync_folder(folder)      # the new names are durable before a record in them counts

    def append(self, members: list) -> None:
        """Write the records whole, then their index lines."""
        data = b"".join(member for member, _ in members)
        _write_all(self.fd, data)
        offset, lines = self.size, []
        for member, entry in members:
            if entry is not None:
                lines.append(cdxj_line(entry, offset, len(member), self.name))
            offset += len(member)
        self.size = offset
        self.unsynced = True
        if lines:
            self.index.write("".join(lines))
            self.index.flush()

    def sync(self) -> None:
        if self.unsynced:
            os.fdatasync(self.fd)     # the data and the size: what a reader needs
            self.unsynced = False

    def close(self) -> None:
        """Durable, renamed to its final name, its lock let go."""
        self.sync()
        self.index.flush()
        os.fsync(self.index.fileno())
        self.index.close()
        os.rename(self.path, os.path.join(self.folder, self.name))
        _sync_folder(self.folder)
        os.close(self.fd)


class ProcessFiles:
    """The files of one worker process: the one open, rotated past `max_size`, in its batch's folder."""

    def __init__(self, root: str, namespace: str, max_size: int):
        self.root, self.namespace, self.max_size = root, namespace, max_size
        self.lock = threading.Lock()
        self.current: Optional[OpenFile] = None
        self.current_batch: Optional[int] = None
        self.serial = 0
        self.pid = os.getpid()

    def append(self, batch_id: int, members: list) -> None:
        size = sum(len(member) for member, _ in members)
        with self.lock:
            self._forget_if_forked()
            current = self.current
            if current is not None and (self.current_batch != batch_id or current.size + size > self.max_size):
                self._close_current()
                current = None
            if current is None:
                self.serial += 1
                current = self.current = OpenFile(batch_folder(self.root, self.namespace, batch_id), self.serial)
                self.current_batch = batch_id
            current.append(members)

    def sync(self) -> None:
        """What was appended so far is on disk (closed files were synced as they closed)."""
        with self.lock:
            self._forget_if_forked()
            if self.current is not None:
                self.current.sync()

    def close(self) -> None:
        with self.lock:
            self._forget_if_forked()
            if self.current is not None:
                self._close_current()

    def _close_current(self) -> None:
        assert self.current is not None
        current, self.current = self.current, None
        current.close()

    def _forget_if_forked(self) -> None:
        """A forked child does not write into its parent's file."""
        if self.pid != os.getpid():
            self.pid, self.current = os.getpid(), None


def cut_torn_files(root: str, namespace: str) -> int:
    """Close every `.open` file of `namespace` no live writer holds (a killed worker's), cut after its last whole
    record; how many."""
    cut = 0
    for folder in batch_folders(root, namespace).values():
        for name in sorted(os.listdir(folder)):
            if name.endswith(WARC_SUFFIX + OPEN_SUFFIX) and _close_left_file(os.path.join(folder, name)):
                cut += 1
    return cut


def _close_left_file(path: str) -> bool:
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:     # another worker closed it meanwhile
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:   # its writer is alive
            return False
        if not os.path.exists(path):
            return False
        whole = whole_length(fd)
        size = os.fstat(fd).st_size
        final = path[:-len(OPEN_SUFFIX)]
        if whole == 0:
            os.unlink(path)
            _unlink_quietly(index_of(path))
            log.warning("archive: %s held no whole record (its writer was killed); removed", path)
            return True
        if whole < size:
            os.ftruncate(fd, whole)
            log.warning("archive: %s cut after its last whole record (%d bytes of a torn one dropped)", final,
                        size - whole)
        os.fsync(fd)
        _write_index(path, os.path.basename(final))
        os.rename(path, final)
        _sync_folder(os.path.dirname(path))
        return True
    finally:
        os.close(fd)


def whole_length(fd: int) -> int:
    """Bytes of the file's leading gzip members that are whole (each ends with its checked trailer)."""
    os.lseek(fd, 0, os.SEEK_SET)
    whole = offset = 0
    inflater = zlib.decompressobj(GZIP_MEMBER)
    while True:
        data = os.read(fd, READ_PIECE)
        if not data:
            return whole
        while data:
            try:
                inflater.decompress(data)
            except zlib.error:
                return whole
            if not inflater.eof:
                offset += len(data)
                break
            used = len(data) - len(inflater.unused_data)
            offset += used
            whole = offset
            data = inflater.unused_data
            inflater = zlib.decompressobj(GZIP_MEMBER)


def _write_index(warc_path: str, filename: str) -> None:
    """The file's index again, from its records."""
    with open(warc_path, "rb") as warc, open(index_of(warc_path), "w", encoding="utf-8") as index:
        for entry, offset, length in entries_of(warc):
            index.write(cdxj_line(entry, offset, length, filename))
        index.flush()
        os.fsync(index.fileno())


def entries_of(stream) -> Iterator[tuple]:
    """(index entry, offset, length) of each record of a WARC stream that a lookup needs."""
    from warcio.archiveiterator import ArchiveIterator
    records = ArchiveIterator(stream)
    for record in records:
        http = record.http_headers if record.rec_type in INDEXED_TYPES else None
        entry = index_entry(dict(record.rec_headers.headers), int(http.get_statuscode()) if http else None,
                            (http.get_header("Content-Type") or "").split(";")[0].strip() if http else "")
        if entry is not None:
            offset = records.get_record_offset()
            records.read_to_end(record)
            yield entry, offset, records.get_record_length()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _sync_folder(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "host"


def _info() -> dict:
    return {"software": f"batchd/{VERSION}", "hostname": socket.gethostname(), "format": "WARC File Format 1.1",
            "conformsTo": "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"}
