"""The index of a batch's folder (its files' CDXJ lines) and what a revisit record stands for.

A revisit record (a 304) names the URL and the date of the response it stands for (records.py); that response
is the newest of the URL, in an earlier batch's folder, fetched no later than that date (the page's record keeps
when it was fetched whole, just after its response was written). `revisit_target` finds it; the reader follows
it (replay.py), and the master keeps every folder a kept batch's revisits lead to (keeping.py).
"""
import json
import logging
import os
from typing import Callable, Optional

from .files import INDEX_SUFFIX

log = logging.getLogger("batchd.archive")


class FolderIndex:
    """What one batch's folder holds, from its index lines (a torn or foreign line is passed over)."""

    def __init__(self, folder: str):
        self.folder = folder
        self.by_request: dict = {}      # (method, URL asked or reached) -> the entry a lookup gets
        self.bodies: dict = {}          # URL -> entries of responses and DOMs, a revisit's possible targets
        self.revisits: list = []
        for entry in _entries(folder):
            self._add(entry)

    def _add(self, entry: dict) -> None:
        for url in {entry["url"], entry.get("requested") or entry["url"]}:
            key = (entry.get("method", "GET"), url)
            if _better(entry, self.by_request.get(key)):
                self.by_request[key] = entry
        if entry.get("mime") == "warc/revisit":
            self.revisits.append(entry)
        elif not entry.get("sample"):
            self.bodies.setdefault(entry["url"], []).append(entry)

    def find(self, method: str, url: str) -> Optional[dict]:
        return self.by_request.get((method.upper(), url))

    def newest_body(self, url: str, not_after: Optional[str]) -> Optional[dict]:
        fitting = [e for e in self.bodies.get(url, ()) if not_after is None or e["date"] <= not_after]
        return max(fitting, key=lambda e: e["date"], default=None)


def revisit_target(revisit: dict, batch_id: int, batches: list, index_of_batch: Callable[[int], FolderIndex]
                   ) -> Optional[tuple]:
    """(batch id, entry) of the response a revisit of batch `batch_id` stands for, looked for in the earlier
    `batches` (ids), newest first; None when none of them holds it."""
    for earlier in sorted((b for b in batches if b < batch_id), reverse=True):
        entry = index_of_batch(earlier).newest_body(revisit["url"], revisit.get("refers_to_date"))
        if entry is not None:
            return earlier, entry
    return None


def _better(entry: dict, held: Optional[dict]) -> bool:
    """A lookup gets the newest record of its request, a render="auto" sample's plain half only when there is
    nothing else."""
    if held is None:
        return True
    if bool(entry.get("sample")) != bool(held.get("sample")):
        return not entry.get("sample")
    return entry["date"] >= held["date"]


def _entries(folder: str):
    try:
        names = sorted(name for name in os.listdir(folder) if name.endswith(INDEX_SUFFIX))
    except FileNotFoundError:
        return
    for name in names:
        try:
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as lines:
                for line in lines:
                    entry = _parsed(line)
                    if entry is not None:
                        yield entry
        except OSError as e:
            log.warning("archive: %s not read: %s", os.path.join(folder, name), e)


def _parsed(line: str) -> Optional[dict]:
    """The JSON of a CDXJ line, or None for a line cut short (its writer killed) or not batchd's."""
    parts = line.split(" ", 2)
    if len(parts) < 3 or not line.endswith("\n"):
        return None
    try:
        entry = json.loads(parts[2])
    except ValueError:
        return None
    needed = ("url", "date", "offset", "length", "filename")
    return entry if isinstance(entry, dict) and all(key in entry for key in needed) else None
