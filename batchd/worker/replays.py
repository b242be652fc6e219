"""A worker's view of reparse batches (`batchd reparse`, docs/recrawl.md "Reparse"): which batch's tasks are served
from an archive, and that archive, opened once per batch.

A lease carries its batch's id; the batch record's opening says whether it is a reparse, and of which batch. That
is read once per batch from the store's last record (as recrawl/page_memory.py's Refetches reads the spider print):
a lease of an older batch than the last (a task held across an opening) is crawled as any. The archive of the
reparsed batch is opened on the reparse's first task and closed when a later batch comes, or the worker stops.

What the worker then does differently (worker/task_run.py): each request is answered from the archive
(download/replayed.py), one it lacks skipped and counted (or fetched, with --fetch-missing); no page memory (every
callback runs: the spider is the new one, the pages are the old ones), no render="auto" sample, and a block page
holds no host (nothing is sent to it); a task whose requests the archive lacked and that said nothing fails,
naming the batch, rather than go back to pending for ever.
"""
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..download.replayed import NotArchived, ReplaySource, fetch_replayed
from ..errors import BackendUnavailable
from ..http import Request, Response
from ..model import BatchOpening, BatchRecord

log = logging.getLogger("batchd.worker")

REPLAYED, NOT_ARCHIVED, FETCHED = "reparse/replayed", "reparse/not_archived", "reparse/fetched"


@dataclass
class Replay:
    """The archive a reparse batch's tasks are served from."""

    batch_id: int
    opening: BatchOpening
    source: ReplaySource
    count: Callable[[str, int, Any], None]

    def fetch(self, request: Request, prepare, accept, live: Callable[[], Response]) -> Response:
        """The archived Response (or RequestFailed, as the crawl met it); one the archive lacks is `live()`'s with
        --fetch-missing, else NotArchived (counted). NotYet from a live fetch goes up: the task is set aside."""
        try:
            response = fetch_replayed(self.source, request, prepare, accept)
        except NotArchived:
            if not self.opening.fetch_missing:
                self.count(NOT_ARCHIVED, 1, self.batch_id)
                raise
            response = live()
            self.count(FETCHED, 1, self.batch_id)
            return response
        self.count(REPLAYED, 1, self.batch_id)
        return response


class BatchUnknown(Exception):
    """A batch's record could not be read (the store out of reach): whether its tasks are served from an archive
    or the network is not known, so its task goes back to pending rather than be crawled or failed."""


class Replays:
    """The reparse batches of one worker. `last_batch()`: the store's; `open_archive(batch id)`: a ReplaySource on
    that batch's archive (batchd/archive/replay.py), or ConfigError when there is none; `count`: the batch's
    counters."""

    def __init__(self, last_batch: Callable[[], Optional[BatchRecord]], open_archive: Callable[[int], ReplaySource],
                 count: Callable[[str, int, Any], None]):
        self.last_batch, self.open_archive, self.count = last_batch, open_archive, count
        self._known: dict = {}          # batch id -> its Replay, or None: crawled
        self._lock = threading.Lock()

    def of(self, batch_id: int) -> Optional[Replay]:
        """The Replay serving batch `batch_id`'s tasks, or None when it is a crawl."""
        known = self._known.get(batch_id, False)
        if known is not False:
            return known
        with self._lock:
            if batch_id in self._known:
                return self._known[batch_id]
            try:
                last = self.last_batch()
            except BackendUnavailable as e:
                raise BatchUnknown(f"the record of batch {batch_id} was not read ({e})") from None
            replay = None
            if last is not None and last.id == batch_id and last.how_opened.is_reparse:
                opening = last.how_opened
                assert opening.reparse_of is not None
                replay = Replay(batch_id, opening, self.open_archive(opening.reparse_of), self.count)
                log.info("batch %d is a reparse of batch %d: its tasks are served from that batch's archive%s",
                         batch_id, opening.reparse_of, ", what it lacks fetched" if opening.fetch_missing else "")
            if last is not None and last.id >= batch_id:
                self._forget_before(batch_id)
                self._known[batch_id] = replay
            return replay

    def _forget_before(self, batch_id: int) -> None:
        """A later batch came: the archives of the earlier ones are closed (under the lock)."""
        for earlier in [known for known in self._known if known < batch_id]:
            replay = self._known.pop(earlier)
            if replay is not None:
                replay.source.close()

    def close(self) -> None:
        with self._lock:
            for replay in self._known.values():
                if replay is not None:
                    replay.source.close()
            self._known.clear()
