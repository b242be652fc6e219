"""Reading a batch's archive back (`batchd reparse` serves a spider's requests from it).

    replay = ArchiveReplay(settings, "tasks", 12)
    page = replay.find("GET", "https://example.com/a")   # None: not archived in batch 12
    page.status, page.headers, page.body, page.url, page.rendered, page.batch_id, page.date
    replay.close()

`find` gives the newest record of the request in the batch (asked by the URL requested or the one its redirects
reached): a response's status, headers (as they came) and body (its content coding undone, as a callback reads
`response.content`); a 304's revisit record followed to the response it stands for in an earlier batch's folder
(index.py); a rendered page's DOM. A record that cannot be read (a file cut short, removed, foreign) is None
with a WARNING: a reader never fails on the archive.
"""
import gzip
import io
import json
import logging
import os
from dataclasses import dataclass
from typing import Optional

from ..config import Settings
from .files import OPEN_SUFFIX, batch_folder, batch_folders
from .index import FolderIndex, revisit_target
from .records import HTTP
from .writer import require_warcio

log = logging.getLogger("batchd.archive")


@dataclass
class ReplayedPage:
    """A page as the archive kept it. `headers`: (name, value) pairs as they came (Content-Encoding among them:
    `body` is decoded all the same); `url`: where the request ended (after its redirects); `rendered`: the body
    is a browser's DOM; `batch_id` and `date` (WARC-Date): when the body was fetched; `revisit`: the batch asked
    for found the page unchanged (a 304), and the body is the earlier fetch's."""
    status: int
    headers: list
    body: bytes
    url: str
    rendered: bool
    batch_id: int
    date: str
    revisit: bool = False


class ArchiveReplay:
    """One batch's archive, read-only."""

    def __init__(self, settings: Settings, table: str, batch_id: int):
        require_warcio()
        self.root, self.namespace = settings.archive_path(), settings.namespace_for(table)
        self.batch_id = batch_id
        self.folder = batch_folder(self.root, self.namespace, batch_id)
        self.index = FolderIndex(self.folder)
        self._indexes: dict = {batch_id: self.index}
        self._earlier: Optional[list] = None

    def find(self, method: str, url: str) -> Optional[ReplayedPage]:
        entry = self.index.find(method, url)
        if entry is None:
            return None
        if entry.get("mime") != "warc/revisit":
            return self._read(self.batch_id, entry)
        target = revisit_target(entry, self.batch_id, self._batches(), self._index_of)
        if target is None:
            log.warning("archive: batch %s: %s was not modified, and no earlier batch kept its body", self.batch_id,
                        entry["url"])
            return None
        page = self._read(*target)
        if page is not None:
            page.revisit = True
        return page

    def close(self) -> None:
        self._indexes.clear()

    def _batches(self) -> list:
        if self._earlier is None:
            self._earlier = sorted(batch_folders(self.root, self.namespace))
        return self._earlier

    def _index_of(self, batch_id: int) -> FolderIndex:
        if batch_id not in self._indexes:
            self._indexes[batch_id] = FolderIndex(batch_folder(self.root, self.namespace, batch_id))
        return self._indexes[batch_id]

    def _read(self, batch_id: int, entry: dict) -> Optional[ReplayedPage]:
        folder = batch_folder(self.root, self.namespace, batch_id)
        try:
            return _page(_record_bytes(folder, entry), batch_id)
        except Exception as e:     # a file cut short, removed or foreign: not archived, as far as a reader goes
            log.warning("archive: %s in %s (offset %s) not read: %s: %s", entry.get("url"), entry.get("filename"),
                        entry.get("offset"), type(e).__name__, e)
            return None


def _record_bytes(folder: str, entry: dict) -> bytes:
    """The record's gzip member, whichever name its file has now (open, or closed since)."""
    path = os.path.join(folder, os.path.basename(entry["filename"]))
    if not os.path.exists(path):
        path += OPEN_SUFFIX
    with open(path, "rb") as warc:
        warc.seek(int(entry["offset"]))
        member = warc.read(int(entry["length"]))
    return gzip.decompress(member)


def _page(record_bytes: bytes, batch_id: int) -> ReplayedPage:
    from warcio.archiveiterator import ArchiveIterator
    record = next(iter(ArchiveIterator(io.BytesIO(record_bytes))))
    fields = record.rec_headers
    url, date = fields.get_header("WARC-Target-URI"), fields.get_header("WARC-Date")
    if record.rec_type == "conversion":
        status, headers = json.loads(fields.get_header(HTTP))
        return ReplayedPage(int(status), [tuple(pair) for pair in headers], record.raw_stream.read(), url, True,
                            batch_id, date)
    if record.rec_type != "response":
        raise ValueError(f"a {record.rec_type} record where a response was indexed")
    return ReplayedPage(int(record.http_headers.get_statuscode()), list(record.http_headers.headers),
                        record.content_stream().read(), url, False, batch_id, date)
