"""Importing sitemaps into the task table: `batchd tasks import-sitemap URL...` and SITEMAPS at each batch's opening.

A URL given is a sitemap, a sitemap index, or a robots.txt (whose Sitemap: lines are read). Sitemaps are walked
breadth first, each file once, each read as a stream (sitemap_files.py); the URLs go to the store in chunks of
CHUNK inside one TaskLoad (backends/task_load.py), so neither the files nor the table's URLs are ever held whole.

- A task is a row whose URL column (`url` unless told) holds the URL exactly as the sitemap's <loc> says it
  (whitespace around it dropped): a re-import finds the same row and adds nothing; a URL the table holds, or
  that came earlier in the import, is counted as known.
- With BATCH_MODE = "due", a known URL whose <lastmod> is later than its task's last crawl (its Revisit's
  next_due less its interval) is made due: its revisit's next_due becomes now, so the next batch's opening
  crawls it. A task never crawled is due anyway.
- Skipped and counted: a URL outside its sitemap's scope (sitemap_files.Scope), the entries of a file past the
  protocol's 50,000, a <loc> that is no task URL (url_problem: the first MOST_SHOWN named).
- A sitemap that cannot be read (HTTP error, bad XML, gzip or size) is one warning line naming it; the others
  go on, and what it held before the fault stays added.
"""
import logging
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Callable, Iterator, Optional, Sequence

from ..backends.task_load import TaskLoad, shown, url_problem
from ..config import Settings
from ..errors import BackendUnavailable, BatchdError
from ..model import TaskLayout
from ..service.systemd import counted, escape_controls
from .sitemap_files import MOST_ENTRIES, Entry, Scope, SitemapError, SitemapReader, is_robots_txt

log = logging.getLogger("batchd")

CHUNK = 1000            # URLs looked up and added at a time
MOST_SHOWN = 20         # bad <loc>s named; the rest are counted
MOST_SITEMAPS = 100_000   # sitemap files one import reads at most (50,000 indexes of 50,000 sitemaps is absurd)


@dataclass
class SitemapReport:
    """What an import did, for its last line."""

    table: str
    read: int = 0           # sitemap files read to their end
    failed: int = 0         # sitemap files (or robots.txt) that could not be read, each named in a line
    seen: int = 0           # URLs met in the sitemaps
    added: int = 0
    known: int = 0          # URLs the table held already (or the import met before)
    made_due: int = 0
    outside: int = 0        # URLs and sitemaps outside their sitemap's scope
    over_limits: int = 0    # entries past a file's 50,000, sitemaps past MOST_SITEMAPS
    bad: int = 0            # <loc>s that are no task URL

    def summary(self) -> str:
        failed = f" ({self.failed:,} could not be read)" if self.failed else ""
        return (f"{counted(self.read, 'sitemap')} read{failed}, {counted(self.seen, 'URL')} seen: "
                f"{counted(self.added, 'task')} added to {self.table}, "
                f"{self.known:,} already known ({self.made_due:,} made due), skipped {self.outside:,} outside their "
                f"sitemap's path, {self.over_limits:,} over the protocol's limits, {self.bad:,} not task URLs")


def import_sitemaps(settings: Settings, store, layout: TaskLayout, urls: Sequence[str], column: str = "url",
                    beat: Callable[[], None] = lambda: None) -> SitemapReport:
    """Import the sitemaps (or robots.txt files) `urls` into the layout's task table (made if missing);
    `beat` is called as the sitemaps download (a master's heartbeat). What was added lands at the end, at once."""
    store.create_task_table(layout)
    due = settings.BATCH_MODE == "due" and store.keeps_pages
    if due and store.layout is None:
        store.open(layout)          # the revisits are read and written through an open store
    report = SitemapReport(layout.table)
    reader = SitemapReader(settings, beat)
    try:
        with store.loading_tasks(layout, column, [column]) as load:
            chunk: list = []
            for entry in _page_entries(reader, urls, report):
                chunk.append(entry)
                if len(chunk) == CHUNK:
                    _load_chunk(store, load, chunk, column, report, due)
                    chunk = []
            _load_chunk(store, load, chunk, column, report, due)
    finally:
        reader.close()
    log.log(logging.WARNING if report.failed else logging.INFO, "%s (%s)", report.summary(), store.describe())
    return report


def import_at_opening(settings: Settings, store, layout: TaskLayout, beat: Callable[[], None]) -> None:
    """SITEMAPS, imported as a batch opens (master/patrol.py), before its reset walks the table. A sitemap that
    fails is one warning line (import_sitemaps); so is an import that fails whole: the batch opens all the same.
    An outage is the patrol's to wait out."""
    if not settings.SITEMAPS:
        return
    try:
        import_sitemaps(settings, store, layout, settings.SITEMAPS, beat=beat)
    except BackendUnavailable:
        raise
    except BatchdError as e:
        log.warning("SITEMAPS not imported (%s); the batch opens all the same", e)


def _page_entries(reader: SitemapReader, urls: Sequence[str], report: SitemapReport) -> Iterator[Entry]:
    """The <url> entries of every sitemap reached from `urls`, in scope and within the limits."""
    waiting: deque = deque()
    for url in urls:
        reader.beat()
        if is_robots_txt(url):
            try:
                waiting.extend((sitemap, Scope.of_robots(url)) for sitemap in reader.robots_sitemaps(url))
            except SitemapError as e:
                _note_failed(report, url, e)
        else:
            waiting.append((url, Scope.of_sitemap(url)))
    walked: set = set()
    while waiting:
        url, scope = waiting.popleft()
        if url in walked:
            continue
        walked.add(url)
        reader.beat()       # between two files too: a row of sitemaps that time out is still progress
        if len(walked) > MOST_SITEMAPS:
            report.over_limits += 1 + len(waiting)
            log.warning("%s and %d more sitemaps not read: one import reads %d at most", shown(url), len(waiting),
                        MOST_SITEMAPS)
            return
        try:
            yield from _file_entries(reader, url, scope, waiting, report)
            report.read += 1
        except SitemapError as e:
            _note_failed(report, url, e)


def _file_entries(reader: SitemapReader, url: str, scope: Scope, waiting: deque,
                  report: SitemapReport) -> Iterator[Entry]:
    """One file's pages (its sitemaps, if an index, join `waiting`)."""
    for number, entry in enumerate(reader.entries(url), start=1):
        if entry.kind == "url":
            report.seen += 1
        if number > MOST_ENTRIES:
            report.over_limits += 1
        elif not scope.holds(entry.loc):
            report.outside += 1
        elif entry.kind == "sitemap":
            waiting.append((entry.loc, scope.for_child(entry.loc)))
        else:
            yield entry


def _note_failed(report: SitemapReport, url: str, error: SitemapError) -> None:
    report.failed += 1
    log.warning("sitemap %s: %s; the other sitemaps go on", shown(url), escape_controls(str(error)))   # the site's words


def _load_chunk(store, load: TaskLoad, chunk: list, column: str, report: SitemapReport, due: bool) -> None:
    good: dict = {}         # URL -> its lastmod, in the chunk's order, each once
    for entry in chunk:
        problem = url_problem(entry.loc, column, load.limit)
        if problem:
            report.bad += 1
            if report.bad <= MOST_SHOWN:
                log.warning("a sitemap's <loc> is no task URL, skipped: %s", problem)
        elif entry.loc in good:
            report.known += 1
            good[entry.loc] = _later(good[entry.loc], entry.lastmod)
        else:
            good[entry.loc] = entry.lastmod
    known = load.known(list(good))
    fresh = [url for url in good if url not in known]
    if fresh:
        load.add([{column: url} for url in fresh], fresh)
    report.added += len(fresh)
    report.known += len(known)
    if due:
        report.made_due += _make_due(store, load, {url: good[url] for url in known if good[url] is not None})


def _later(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return b if a is None else a if b is None else max(a, b)


def _make_due(store, load: TaskLoad, lastmods: dict) -> int:
    """Bring forward the revisit of each task whose URL's lastmod is later than its last crawl; how many."""
    if not lastmods:
        return 0
    ids = load.ids_of(list(lastmods))
    url_of = {str(task_id): url for url, task_id in ids.items()}
    now = time.time()
    due = [replace(revisit, next_due=now) for revisit in store.revisits(list(ids.values())).values()
           if revisit.next_due > now and lastmods[url_of[str(revisit.task_id)]] > revisit.next_due - revisit.interval]
    store.schedule_revisits(due)
    return len(due)
