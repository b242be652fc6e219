"""The worker's side of re-crawls: a page's record looked up before its request goes, what the request
found judged when it comes back (a PageVisit on its TaskRun), and what the task found kept at its
write-back.

The write-back gate holds: the records and the revisit of a task are written by the lander, in the
task's write-back, after every item of the task has landed and before its row moves (worker/pipeline.py).
A crash before then leaves the old records: the next crawl of the page revalidates with the validators
of items that did land, or fetches it whole. Only a done task's records are kept (a failed task's pages
are fetched whole next time); a gone page is forgotten whatever its task's outcome.
"""
import logging
import threading
import time
from dataclasses import replace
from typing import Callable, Optional, Sequence

from ..config import Settings
from ..errors import BackendUnavailable, ConfigError
from ..http import Request, Response
from ..model import PageRecord, task_key
from ..task import TaskState
from .pages import (CHANGED, CONDITIONAL_META, FOUND, GONE, GONE_STATUSES, NEW, UNCHANGED, PageVisit,
                    body_signature, conditional_of, task_verdict, vary_of)
from .revisits import check_bounds, next_revisit
from .spider_print import spider_print

log = logging.getLogger("batchd.worker")



class _Lookup:
    """The URLs one round trip looks up, and what it found (or the error it met)."""

    def __init__(self):
        self.urls: set = set()
        self.found: Optional[dict] = None
        self.error: Optional[BaseException] = None

    @property
    def over(self) -> bool:
        return self.found is not None or self.error is not None


class Recall:
    """The page records of the URLs a worker's threads are about to request, looked up together: a thread
    that asks while a lookup is under way waits for the next one, which takes every URL asked meanwhile
    (one round trip for several threads, not one each)."""

    def __init__(self, fetch: Callable[[list], dict]):
        self.fetch = fetch
        self._cond = threading.Condition()
        self._next = _Lookup()
        self._busy = False

    def __call__(self, url: str) -> Optional[PageRecord]:
        with self._cond:
            lookup = self._next
            lookup.urls.add(url)
            while self._busy and not lookup.over:
                self._cond.wait()
            leads = not lookup.over          # the lookup before is over and this one not begun: begin it
            if leads:
                self._busy, self._next = True, _Lookup()
        if leads:
            try:
                lookup.found = self.fetch(sorted(lookup.urls))
            except BaseException as e:
                lookup.error = e
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
        if lookup.error is not None:
            raise lookup.error
        assert lookup.found is not None
        return lookup.found.get(url)


class Refetches:
    """Whether a batch trusts no validator, read once per batch from its record: the master kept there the
    spider the batch opened with (model.SpiderPrint), and a batch whose spider changed, or that --refetch
    forced, fetches every page whole and runs every callback."""

    def __init__(self, last_batch: Callable):
        self.last_batch = last_batch
        self._known: dict = {}

    def __call__(self, batch_id: int) -> bool:
        known = self._known.get(batch_id)
        if known is None:
            last = self.last_batch()
            # A lease of a batch before the last one (rare: a task held across an opening) trusts validators.
            known = last is not None and last.id == batch_id and last.spider is not None and last.spider.refetches
            if last is not None and last.id >= batch_id:
                self._known[batch_id] = known
        return known


class PageMemory:
    """What one worker remembers of pages through its store. `count(name, n, batch_id)`: the batch's
    counters; `spider`: the SpiderPrint.digest of the spider this worker runs, kept with each page it parses
    (None: pages keep no spider, and no page is parsed again for another's)."""

    def __init__(self, store, settings: Settings, count: Callable, clock: Callable[[], float] = time.time,
                 spider: Optional[str] = None):
        self.store, self.settings, self.count, self.clock, self.spider = store, settings, count, clock, spider
        self.by_body = settings.CHANGE_SIGNATURE == "body"
        self.recall = Recall(store.recall_pages)
        self.refetches = Refetches(store.last_batch)
        self._unreachable_said = float("-inf")

    @classmethod
    def for_worker(cls, store, settings: Settings, count: Callable,
                   spider_class: Optional[type] = None) -> Optional["PageMemory"]:
        """The worker's PageMemory, or None when re-crawls keep nothing (REVALIDATE off, BATCH_MODE not
        due); ConfigError when they should and the store cannot. `spider_class`: the worker's, whose print
        each page it parses keeps (taken here: a worker that keeps no page reads no source)."""
        setting = "REVALIDATE" if settings.REVALIDATE else 'BATCH_MODE = "due"'
        if not (settings.REVALIDATE or settings.BATCH_MODE == "due"):
            return None
        check_bounds(settings)
        if not store.keeps_pages:
            raise ConfigError(f"{setting}: the store {store.describe()} keeps no page records (BatchStore."
                              "keeps_pages); use MySQL, SQLite or the memory store, or turn it off")
        spider = spider_print(spider_class, settings).digest if spider_class is not None else None
        return cls(store, settings, count, spider=spider)

    # -- before the request
    def prepare(self, sent: Request, batch_id: int) -> tuple:
        """(the request as it goes, the page's record or None). A GET of a page kept goes conditional when
        it may (pages.py) and its validators are trusted (`trusted`); the choice is made once per request
        (kept in its meta), retries included."""
        if sent.method != "GET":
            return sent, None
        try:
            page = self.recall(sent.url)
            trusted = self.trusted(page, batch_id)
        except BackendUnavailable as e:       # fetched whole and kept anew: nothing lost, a body moved
            self._say_unreachable(e)
            return sent.replace(meta={**sent.meta, CONDITIONAL_META: None}), None
        if CONDITIONAL_META in sent.meta:
            return sent, page
        conditional = None
        # A rendered page goes whole: a browser's navigation is not made conditional (its signature still tells).
        if self.settings.REVALIDATE and sent.revalidation.revalidate and trusted and not sent.rendering.render:
            conditional = conditional_of(page, self.clock(), self.settings.REVISIT_INTERVAL_MAX)
        return sent.replace(meta={**sent.meta, CONDITIONAL_META: conditional}), page

    def trusted(self, page: Optional[PageRecord], batch_id: int) -> bool:
        """Whether what is kept of the page may stand for a parse by this spider: not in a batch that trusts
        no validator (its spider changed, or --refetch), nor for a page another spider parsed last (one
        parsed by an older batchd, which kept no spider, is taken as this one's). Per page as well as per
        batch: a batch that crawls some tasks only (incremental, due) leaves the others to a later one."""
        parsed_by_another = (page is not None and page.parsed_by is not None and self.spider is not None
                             and page.parsed_by != self.spider)
        return not parsed_by_another and not self.refetches(batch_id)

    def _say_unreachable(self, error: BackendUnavailable) -> None:
        """One WARNING a minute at most: an outage is the outage watch's to report."""
        if time.monotonic() - self._unreachable_said >= 60:
            self._unreachable_said = time.monotonic()
            log.warning("page records not read (%s): requests go whole, and count as new, until the store "
                        "answers", error)

    @staticmethod
    def whole(sent: Request) -> Request:
        """The request again, unconditional (a 304 reached through a redirect is not the page's)."""
        return sent.replace(meta={**sent.meta, CONDITIONAL_META: None})

    # -- what came back
    def body_signature(self, response: Response) -> Optional[str]:
        """With CHANGE_SIGNATURE = "body", the signature of a 2xx's body (None: signatures are of items)."""
        return body_signature(response.content) if self.by_body and response.status_code != 304 else None

    def unchanged(self, page: Optional[PageRecord], response: Response, signature: Optional[str],
                  batch_id: int) -> bool:
        """Whether the page is known not to have changed before its callback runs: a 304, or a body whose
        signature is the one kept, when that stands for a parse by this spider (`trusted`)."""
        return response.status_code == 304 or (signature is not None and page is not None
                                               and page.signature == signature and self.trusted(page, batch_id))

    def visit(self, run, request: Request, response: Response, page: Optional[PageRecord],
              signature: Optional[str], settled: bool = False) -> PageVisit:
        """What a 2xx or a 304 of `request` found, with the record to keep; added to the run's visits.
        `settled`: found unchanged before its callback (PageVisit)."""
        batch_id = run.lease.batch_id
        if response.status_code == 304:
            # As a browser cache, the 304's headers update those kept (a new Vary: * ends revalidation).
            visit = PageVisit(request.url, UNCHANGED, page and replace(
                page, etag=response.headers.get("ETag") or page.etag,
                last_modified=response.headers.get("Last-Modified") or page.last_modified,
                vary=vary_of(response.headers, response.sent_headers) if "Vary" in response.headers else page.vary,
                seen_in=batch_id), settled)
        else:
            verdict = NEW if page is None else UNCHANGED if page.signature == signature else CHANGED
            visit = PageVisit(request.url, verdict, PageRecord(
                url=request.url, task_id=run.task_id, etag=response.headers.get("ETag"),
                last_modified=response.headers.get("Last-Modified"),
                vary=vary_of(response.headers, response.sent_headers), signature=signature, whole_at=self.clock(),
                seen_in=batch_id, changed_in=page.changed_in if verdict == UNCHANGED and page else batch_id,
                redirected=bool(response.history), parsed_by=page.parsed_by if settled and page else self.spider),
                settled)
        run.visits.append(visit)
        return visit

    def failed(self, run, request: Request, response_or_exception, page: Optional[PageRecord]) -> None:
        """A request that failed for good: its page, if it was kept, is gone on a 404 or a 410."""
        if (page is not None and isinstance(response_or_exception, Response)
                and response_or_exception.status_code in GONE_STATUSES):
            run.visits.append(PageVisit(request.url, GONE))

    # -- at the write-back (the lander's thread, the task's items landed)
    def count_found(self, runs: Sequence) -> None:
        """What the tasks about to be written back found, into their batches' counters, once per run: at
        the write-back, so that a task whose worker dies before it is counted by the worker that crawls it
        again only (one that dies between this and the write is counted twice)."""
        for run in runs:
            verdict = task_verdict(run.visits)
            if verdict is not None and not run.found_counted and run.outcome in (TaskState.DONE, TaskState.FAILED):
                self.count(FOUND + verdict, 1, run.lease.batch_id)
                run.found_counted = True

    def keep(self, runs: Sequence) -> None:
        """The records of the done tasks' pages and their revisits; gone pages forgotten."""
        gone = [v.url for run in runs for v in run.visits if v.verdict == GONE]
        if gone:
            self.store.forget_pages(gone)
        done = [run for run in runs if run.outcome == TaskState.DONE and run.visits]
        pages = [v.page for run in done for v in run.visits if v.page is not None]
        if pages:
            self.store.remember_pages(pages)
        if done and self.settings.BATCH_MODE == "due":
            self._schedule(done)

    def _schedule(self, runs: Sequence) -> None:
        previous = self.store.revisits([run.task_id for run in runs])
        now = self.clock()
        self.store.schedule_revisits([
            next_revisit(run.task_id, previous.get(task_key(run.task_id)), task_verdict(run.visits) or CHANGED,
                         now, run.lease.batch_id, self.settings) for run in runs])
