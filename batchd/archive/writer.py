"""The worker's side of the archive (ARCHIVE = "warc"): each fetch written as it comes, made durable before its
task is written done.

`record` is called by the thread that fetched, before the callback runs: its records are built and gzipped in
that thread, then appended under the process's lock (files.py). The write-back gate (worker/pipeline.py) calls
`make_durable` once per turn, before it writes any task done: one fsync stands for every task of the turn.
"""
import importlib
import logging
import time
from typing import Any, Optional

from ..config import Settings
from ..errors import ConfigError
from .files import ProcessFiles, cut_torn_files
from .records import fetch_records

log = logging.getLogger("batchd.archive")

INSTALL_LINE = "ARCHIVE = \"warc\" needs warcio: pip install 'batchd[archive]' (or pip install warcio)"


class ArchiveWriter:
    """What one worker process writes to the archive of its task table's namespace."""

    def __init__(self, settings: Settings, namespace: str, clock=time.time):
        self.clock, self.level = clock, settings.ARCHIVE_GZIP_LEVEL
        self.files = ProcessFiles(settings.archive_path(), namespace, settings.ARCHIVE_MAX_SIZE)
        self.root, self.namespace = settings.archive_path(), namespace
        self._torn_cut = False

    @classmethod
    def for_worker(cls, settings: Settings, namespace: str) -> Optional["ArchiveWriter"]:
        """The worker's writer, or None with ARCHIVE off; ConfigError (one line: what to install) without warcio."""
        if settings.ARCHIVE == "off":
            return None
        require_warcio()
        return cls(settings, namespace)

    def record(self, batch_id: int, response: Any, refers_to: Optional[float] = None, sample: bool = False) -> None:
        """Append the records of one fetch (records.py); `refers_to`: for a 304, when its page was fetched whole."""
        members = fetch_records(response, batch_id, self.clock(), refers_to, sample, self.level)
        if not self._torn_cut:
            self.cut_torn_files()
        if members:
            self.files.append(batch_id, members)

    def cut_torn_files(self) -> None:
        """The files killed writers left open, cut after their last whole record and closed: once, at this
        worker's first record (a worker's start stays as quick as without ARCHIVE)."""
        self._torn_cut = True
        cut = cut_torn_files(self.root, self.namespace)
        if cut:
            log.info("archive: %d file(s) that killed workers left open closed", cut)

    def make_durable(self) -> None:
        """Every record appended so far is on disk."""
        self.files.sync()

    def close(self) -> None:
        self.files.close()


def require_warcio() -> None:
    """ConfigError, in one line saying what to install, when warcio is not there."""
    try:
        importlib.import_module("warcio")
    except ImportError:
        raise ConfigError(INSTALL_LINE) from None
