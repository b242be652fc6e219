"""A worker's quality counters: what each response, item and task says of its host's data, counted where the
worker already counts (its BatchStats, flushed with the batch's other counters; no second pass over the
user's tables).

The task's run (worker/task_run.py) tells the tally of each response that reaches the spider (`answered`),
each request that failed (`failed`), each item a callback yields (`item`: the host is the one of the
response whose callback yielded it), each callback's end (`parsed`) and each task done (`task_done`).
quality/measures.py names the counters and reads them back.

Cost: a page's body is digested (CRC-32 and length: 5 us for 20 kB) as it comes; it is searched for block
markers (about 100 us for 20 kB) only after its callback, and only when the callback yielded no item or an
item with a field empty or refused: a challenge page yields nothing whole, and a good page is not searched.

A block page found mid-batch (QUALITY_BLOCK_HOLD): `parsed` says what gave away a page that yielded no whole
item, a block marker or the same-body rule over the host's recent pages (of its last QUALITY_SOFT_BLOCK_PAGES pages with a body in this
worker, WINDOW_MOST at most, QUALITY_SOFT_BLOCK_SHARE had this page's body); the task run puts the task back
(worker/task_run.py) and `put_back` counts it for the flag at the close.

Bounds: the digests of bodies are the only counters that could grow with the pages. A worker keeps, per
host and batch, DIGESTS_PER_HOST digests and how often it saw each; a digest is sent (and counted from then
on) only once it was seen twice, and when the table is full a digest seen once gives its place to the new
one. So the body a soft-blocked site serves again and again is counted, and a site of distinct pages sends
no digest at all. The recent pages are a window of digests per host beside that table. At most HOSTS_KEPT hosts' tables are kept (the least recently seen go first), and only
for the two most recent batches.
"""
import collections
import threading
import zlib
from collections.abc import Mapping
from typing import Any, Callable, Optional, Sequence
from urllib.parse import urlsplit

from ..hosts.counts import host_label, name
from ..item import Item
from .measures import (BODIES, BY_BODY, BY_MARKER, DIGEST, GOOD, ITEMS, KEPT, MARKER, NO_ANSWER, NO_ITEM, PUT_BACK,
                       REFUSED, STATUS, TASKS, quoted)

DIGESTS_PER_HOST = 16
HOSTS_KEPT = 10000
WINDOW_MOST = 100           # a host's recent pages the same-body rule looks at mid-batch, at most
MARKER_SCAN = 64 * 1024     # bytes of a body searched for block markers: challenge pages say so early
# Challenge and captcha pages, as their bodies name them (lower case; BLOCK_MARKERS adds the spider's own).
BUILT_IN_MARKERS = (
    "cf-chl-",                       # Cloudflare's challenge form and scripts
    "/cdn-cgi/challenge-platform/",  # Cloudflare's challenge platform
    "_incapsula_resource",           # Imperva (Incapsula)
    "captcha-delivery.com",          # DataDome's captcha
    "px-captcha",                    # HUMAN (PerimeterX)
    "g-recaptcha",                   # Google reCAPTCHA's widget
    "h-captcha",                     # hCaptcha's widget
    "please verify you are human",
    "verify you are a human",
    "are you a robot",
    "checking your browser before accessing",
)

Count = Callable[[str, int, Any], None]


def empty(value: Any) -> bool:
    """What counts as no value: None, "", and an empty list, tuple, set or dict."""
    return value is None or value == "" or (isinstance(value, (list, tuple, set, dict)) and not value)


class BlockMarkers:
    """The markers a body is searched for: the built-in ones and BLOCK_MARKERS, compared in lower case."""

    def __init__(self, extra: Optional[Sequence[str]] = None):
        self.markers = tuple(dict.fromkeys(m.lower() for m in BUILT_IN_MARKERS + tuple(extra or ())))
        self._encoded = tuple((m, m.encode()) for m in self.markers)

    def match(self, body: bytes) -> Optional[str]:
        """The first marker found in the body's first MARKER_SCAN bytes, or None."""
        head = body[:MARKER_SCAN].lower()
        return next((marker for marker, encoded in self._encoded if encoded in head), None)


class DigestTable:
    """How often a worker saw each body of a host in a batch, for the few bodies that may matter."""

    def __init__(self, window: int = 10):
        self.seen: collections.OrderedDict = collections.OrderedDict()     # digest -> times, oldest first
        self.recent: collections.deque = collections.deque(maxlen=window)   # the last pages' digests

    def one_body(self, digest: str, share: float) -> bool:
        """Add a page to the recent ones: whether the window is full and `share` of it had this page's body."""
        self.recent.append(digest)
        return len(self.recent) == self.recent.maxlen and self.recent.count(digest) >= share * len(self.recent)

    def add(self, digest: str) -> int:
        """What to add to the digest's counter: 0 while it was seen once, 2 the second time, then 1."""
        times = self.seen.get(digest)
        if times is None:
            if len(self.seen) >= DIGESTS_PER_HOST and not self._make_room():
                return 0
            self.seen[digest] = 1
            return 0
        self.seen[digest] = times + 1
        return 2 if times == 1 else 1

    def _make_room(self) -> bool:
        """Forget the oldest digest seen once; False when every one was seen twice (the new one is not kept)."""
        once = next((digest for digest, times in self.seen.items() if times == 1), None)
        if once is None:
            return False
        del self.seen[once]
        return True


class QualityTally:
    """Counts a worker's quality figures into its batch counters (`count(name, n, batch id)`); thread-safe.
    `spider_table`: where the spider's dicts go; `holds`: what makes a page a block page mid-batch (BY_MARKER,
    BY_BODY; none: the hold is off), the same-body rule over the last `pages` pages (WINDOW_MOST at most) of
    which `share` had one body."""

    def __init__(self, count: Count, markers: BlockMarkers, spider_table: str, holds: frozenset = frozenset(),
                 pages: int = 10, share: float = 0.5):
        self.count, self.markers, self.spider_table = count, markers, spider_table
        self.holds, self.window, self.share = holds, min(pages, WINDOW_MOST), share
        self._lock = threading.Lock()
        self._digests: collections.OrderedDict = collections.OrderedDict()   # (batch id, host) -> DigestTable
        self._newest = 0        # the most recent batch whose pages were digested

    def answered(self, run, response) -> None:
        """A response reached the spider (or settled its request unchanged): its status and its body's digest,
        under the host it came from, which the run's items are counted under from now on."""
        host = host_label(urlsplit(response.url).netloc)
        run.quality_host = host
        batch_id = run.lease.batch_id
        self.count(name(STATUS + str(response.status_code), host), 1, batch_id)
        body = response.content
        run.page_items, run.page_gaps, run.page_one_body = run.items_yielded, False, False
        if response.status_code == 304:
            return
        self.count(name(BODIES, host), 1, batch_id)
        digest = f"{zlib.crc32(body):08x}{len(body):x}"
        with self._lock:
            table = self._table(batch_id, host)
            shared = table.add(digest)
            run.page_one_body = BY_BODY in self.holds and table.one_body(digest, self.share)
        if shared:
            self.count(name(DIGEST + digest, host), shared, batch_id)

    def parsed(self, run, response) -> Optional[str]:
        """A callback ran on the response: one that yielded no whole item may have met a block page (its marker
        is counted). What gives the page away as a block page to hold its host for (BY_MARKER, BY_BODY, of
        `holds`), else None."""
        if response.status_code == 304 or (run.items_yielded > run.page_items and not run.page_gaps):
            return None          # a page that yielded whole items is data, whatever its body
        one_body = BY_BODY if run.page_one_body else None
        marker = self.markers.match(response.content)
        if marker is None:
            return one_body
        host = host_label(urlsplit(response.url).netloc)
        self.count(name(MARKER + quoted(marker), host), 1, run.lease.batch_id)
        return BY_MARKER if BY_MARKER in self.holds else one_body

    def put_back(self, run, cause: str) -> None:
        """The task goes back to pending for a block page (`cause`: what gave it away)."""
        host = run.quality_host or _host_of(run.url)
        self.count(name(PUT_BACK + cause, host), 1, run.lease.batch_id)

    def _table(self, batch_id: int, host: str) -> DigestTable:
        """The host's digests in the batch (called with the lock held). HOSTS_KEPT tables at most, the least
        recently used going first; a new batch drops the tables of the batches before the last."""
        key = (batch_id, host)
        table = self._digests.get(key)
        if table is not None:
            self._digests.move_to_end(key)
            return table
        table = self._digests[key] = DigestTable(self.window)
        if batch_id > self._newest:
            self._newest = batch_id
            for old in [k for k in self._digests if k[0] < batch_id - 1]:
                del self._digests[old]
        while len(self._digests) > HOSTS_KEPT:
            self._digests.popitem(last=False)
        return table

    def failed(self, run, url: str, response) -> None:
        """A request failed: its status (the last answer's, or `error` when none came)."""
        host = host_label(urlsplit(getattr(response, "url", None) or url).netloc)
        status = response.status_code if hasattr(response, "status_code") else NO_ANSWER
        self.count(name(STATUS + str(status), host), 1, run.lease.batch_id)

    def item(self, run, item: Mapping) -> None:
        """An item a callback yielded: counted for its table, and each field for a good value."""
        run.items_yielded += 1
        host, batch_id = run.quality_host or _host_of(run.url), run.lease.batch_id
        table, judged = judged_fields(item, self.spider_table)
        self.count(name(ITEMS + table, host), 1, batch_id)
        for field, good, refused in judged:
            key = f"{table}.{quoted(str(field))}"
            self.count(name(GOOD + key, host), int(good), batch_id)
            run.page_gaps = run.page_gaps or not good
            if refused:
                self.count(name(REFUSED + key, host), 1, batch_id)

    def task_done(self, run, unchanged: bool) -> None:
        """A task done: kept unchanged (no callback ran, its earlier items stand), or parsed, with or
        without items."""
        host, batch_id = run.quality_host or _host_of(run.url), run.lease.batch_id
        if unchanged and not run.items_yielded:
            self.count(name(KEPT, host), 1, batch_id)
            return
        self.count(name(TASKS, host), 1, batch_id)
        if not run.items_yielded:
            self.count(name(NO_ITEM, host), 1, batch_id)


def judged_fields(item: Mapping, spider_table: str) -> tuple:
    """(the item's table, [(field, good, refused)]): each field of the item (and of its Item class) with whether
    it has a good value (not empty, and accepted by its Field) and whether its Field refused a value. The
    quality counters count these; render="auto" compares a page's plain and rendered items by them."""
    table, judges = spider_table, {}
    if isinstance(item, Item):
        table = type(item).__table__ or table
        judges = type(item).__fields__
    judged = []
    for field in dict.fromkeys([*judges, *item]):
        value = item.get(field)
        refused = not empty(value) and field in judges and not judges[field].accepts(value)
        judged.append((field, not empty(value) and not refused, refused))
    return table, judged


def _host_of(url: Optional[str]) -> str:
    return host_label(urlsplit(url or "").netloc) or NO_ANSWER
