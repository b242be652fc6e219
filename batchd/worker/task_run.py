"""The run of one leased task through the spider: task_requests, then each request downloaded and its
callback called (its errback, or failed_request, if it failed), the follow-up requests they yield run
in turn, the items they yield handed to the pipeline. A request that may not go yet (a link's NotYet)
stops the run where it stands: the worker sets the task aside (set_aside.py), and the next thread to
take it goes on from that request, with its sequence number and its attempts so far.

A page the quality tally finds to be a block page (QUALITY_BLOCK_HOLD: a block marker, or one body for most of
its host's last pages; quality/tally.py) is not data: the items its callback yielded are dropped, the task
goes back to pending (whatever the spider said of it, but a failure already written), and its host's breaker
opens (download/middlewares/breaker.py), so that its other tasks wait for a probe as behind a host that fails.

A render="auto" page whose host is learning (worker/render_auto.py) is rendered and its callback's items stored as
any page's; then the same request is fetched plain and the callback run on that in a dry run (`dry_run`: what it
yields is measured and dropped, its update_task ignored), and the two yields go to the host's choice.

What the spider's code raises fails the task, not the worker (its traceback logged once per task and
error); an Item class its table cannot take stops the worker (ConfigError: no task of it could
succeed). The spider's code runs under TASK_TIMEOUT's watch (timeout.py).

`HeldTasks` is the index of a process's runs by task: update_task() finds the worker holding its
task there, at once, whichever thread calls it.
"""
import collections
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional, Protocol

from requests.cookies import RequestsCookieJar

from ..archive.writer import ArchiveWriter
from ..backends.ports import EVERY_BATCH
from ..config import Settings
from ..download.chain import NotYet
from ..download.replayed import NotArchived
from ..errors import ConfigError
from ..hosts.render_choices import PageYield
from ..http import Request, RequestFailed, Response
from ..model import Lease, TaskFailure, task_key
from ..recrawl.page_memory import PageMemory
from ..recrawl.pages import ITEMS_UNCHANGED, UNCHANGED, items_signature, settled_unchanged
from ..quality.measures import BLOCK_REASONS
from ..quality.tally import QualityTally
from ..service.systemd import failure_line
from ..settle import failures
from ..task import TaskState
from ..backends.ports import SeenFilter
from .item_checks import BadItem
from .render_auto import AutoRender
from .replays import BatchUnknown, Replays
from .timeout import TaskTimedOut, outside_user_code, user_code

log = logging.getLogger("batchd.worker")

ERRORS_REMEMBERED = 10000    # distinct (task, error) pairs whose traceback was logged
SPIDER_HOOKS = ("download_midware", "validate")     # what the downloader may call for each attempt
FILTERED = "dupefilter/filtered"     # the batch's counter of requests REQUEST_FILTER_ENABLE dropped


@dataclass(eq=False)
class TaskRun:
    """One leased task inside a worker, from lease to write-back."""

    lease: Lease
    slot: int
    outcome: Optional[TaskState] = None   # DONE, FAILED, or PENDING: back to the queue
    requests_finished: bool = False
    lease_checked: bool = False   # still ours at the write-back, and renewed for it
    lease_lost: bool = False      # reclaimed before the write-back: not ours to write
    written: bool = False         # its row is settled; only the lease is left to release
    settled: bool = False         # its write-back is queued (or done)
    request_seq: int = 0
    url: Optional[str] = None     # of the request being processed
    last_failure: Optional[RequestFailed] = None   # the one behind the failed_request() or errback call under way
    failure: Optional[TaskFailure] = None          # why it failed (its outcome FAILED)
    started: float = field(default_factory=time.monotonic)
    timed_out: bool = False       # failed by TASK_TIMEOUT: its lease is no longer renewed
    thread_ident: int = 0         # the fetch thread processing it (the last one, while set aside)
    pending: Optional[collections.deque] = None    # requests to run, once task_requests has run
    own_left: int = 0             # the task's own requests (task_requests') still at the head of `pending`
    parked: Optional[tuple] = None    # (request, as it goes, seq, attempts): the one that may not go yet
    aside_since: Optional[float] = None    # set aside since (TASK_TIMEOUT counts the time in a thread only)
    cookies: RequestsCookieJar = field(default_factory=RequestsCookieJar)
    visits: list = field(default_factory=list)     # PageVisits: what its requests found (recrawl/)
    found_counted: bool = False   # what they found is in its batch's counters
    in_user_code: bool = False    # that thread is inside the spider's code (TASK_TIMEOUT may interrupt it)
    quality_host: Optional[str] = None     # the host of the last response that reached the spider (quality/)
    items_yielded: int = 0        # by its callbacks (counted only with the quality tally)
    page_items: int = 0           # items_yielded when the last response came (quality/tally.py)
    page_gaps: bool = False       # an item of that response lacks a good value somewhere
    page_one_body: bool = False   # that response had the body of most of its host's last pages
    render_sample: Optional[PageYield] = None    # the yield of a rendered page sampled for render="auto"
    dry_run: bool = False         # its callback runs on a plain sample's page: nothing it says is the task's
    replay: Any = None            # its batch is a reparse: the Replay its requests are answered from (replays.py)
    not_archived: int = 0         # of its requests, those the reparse's archive lacked (skipped)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def task_id(self):
        return self.lease.task_id

    def sent_nothing(self) -> bool:
        """Whether the task waits at its first request, with no attempt made yet and no outcome: it may
        start again in another worker as if never leased."""
        return (self.parked is not None and self.parked[2] == 0 and self.parked[3] == 0 and self.outcome is None
                and not self.timed_out)

    def next_request_seq(self) -> int:
        seq, self.request_seq = self.request_seq, self.request_seq + 1
        return seq

    def timeout_failure(self, reason: str) -> TaskFailure:
        """Why TASK_TIMEOUT failed the task, naming the request under way."""
        return failures.failure(self.task_id, self.lease.batch_id, reason, url=self.url,
                                error_class=TaskTimedOut.__name__)

    def failure_at_hand(self) -> TaskFailure:
        """Why update_task(ok=False) fails the task: the request whose failed_request() or errback is
        running, else the spider's own word."""
        if self.last_failure is None:
            return failures.marked(self.task_id, self.lease.batch_id)
        return failures.of_request(self.task_id, self.lease.batch_id, self.last_failure)


class HeldTasks:
    """The runs a process's workers are processing, by task key, each with its worker's gate: update_task()
    settles a task through them."""

    def __init__(self):
        self._held: dict = {}       # task key -> (the gate of the worker holding it, TaskRun)
        self._lock = threading.Lock()

    def hold(self, run: TaskRun, gate: "Gate") -> None:
        with self._lock:
            self._held[run.lease.key] = (gate, run)

    def release(self, run: TaskRun) -> None:
        with self._lock:
            if self._held.get(run.lease.key, (None, None))[1] is run:
                del self._held[run.lease.key]

    def find(self, task_id) -> Optional[tuple]:
        """(the gate of the worker processing the task, its run), or None where no worker of this process is."""
        return self._held.get(task_key(task_id))

    def settle(self, task_id, ok: bool) -> bool:
        """update_task() for a task a worker of this process is processing: handed to that worker's gate (done
        waits for the task's items to land); False where none is processing it."""
        held = self.find(task_id)
        if held is None:
            return False
        gate, run = held
        if run.dry_run:
            return True         # the callback on a plain sample's page: the rendered page's run said its word
        with outside_user_code(run):
            gate.record_outcome(run, ok, None if ok else run.failure_at_hand())
        return True


class CheckedItem(NamedTuple):
    """An item the pipeline checked where it was yielded (Gate.check_item), held until its page is judged."""
    data: dict
    document: Optional[str]        # its JSON, for a table of JSON documents
    destination: Any               # model.ItemDestination


class Gate(Protocol):
    """What a run hands to the worker's pipeline (pipeline.py)."""

    def add_item(self, run: TaskRun, request_seq: int, item_seq: int, item: Mapping) -> None: ...

    def check_item(self, run: TaskRun, item: Mapping) -> Optional[CheckedItem]: ...

    def buffer_item(self, run: TaskRun, request_seq: int, item_seq: int, checked: CheckedItem) -> None: ...

    def record_outcome(self, run: TaskRun, ok: bool, failure: Optional[TaskFailure] = None) -> None: ...

    def finish_requests(self, run: TaskRun) -> None: ...

    def put_back(self, run: TaskRun) -> None: ...


class BlockPage(Exception):
    """A callback's page was a block page (`cause`: what gave it away, quality/measures.py BY_MARKER or BY_BODY)."""

    def __init__(self, cause: str):
        super().__init__(f"a block page ({BLOCK_REASONS[cause]})")
        self.cause = cause


def count_nothing(name: str, n: int, batch_id: Any) -> None:
    """The default `count` of a TaskRunner and a Pipeline: figures ("item/invalid", 1, batch id) go nowhere."""


def overridden_hooks(spider) -> frozenset:
    """The SPIDER_HOOKS the spider's class overrides (BatchSpider marks its defaults `does_nothing`)."""
    return frozenset(name for name in SPIDER_HOOKS
                     if not getattr(getattr(type(spider), name, None), "does_nothing", False))


class TaskRunner:
    """Runs the tasks of one worker through its spider."""

    def __init__(self, spider, settings: Settings, downloader, gate: Gate, seen: SeenFilter, namespace: str,
                 worker_name: str, memory: Optional[PageMemory] = None, quality: Optional[QualityTally] = None,
                 breaker=None, count: Callable[[str, int, Any], None] = count_nothing,
                 auto: Optional[AutoRender] = None, archive: Optional[ArchiveWriter] = None,
                 replays: Optional[Replays] = None):
        """`memory`: what re-crawls remember of pages (None: nothing, every page is fetched and parsed);
        `quality`: the worker's quality counters (None: QUALITY_CHECKS off, nothing counted); `breaker`: the
        chain's HostBreakerMiddleware that holds a host found serving a block page (None: the hold is off);
        `count(name, n, batch id)`: the batch's counters (FILTERED: the requests REQUEST_FILTER_ENABLE dropped);
        `auto`: the hosts' render="auto" choices, which its samples teach (None: no request is sampled);
        `archive`: where each response is written as it comes, before its callback runs (None: ARCHIVE off);
        `replays`: the reparse batches, whose tasks' requests are answered from an archive (replays.py; None: every
        batch crawls)."""
        self.spider, self.settings, self.downloader, self.gate, self.seen = spider, settings, downloader, gate, seen
        self.namespace, self.worker_name = namespace, worker_name
        self.memory, self.quality, self.breaker, self.count, self.auto = memory, quality, breaker, count, auto
        self.archive, self.replays = archive, replays
        self.judges_pages = breaker is not None and quality is not None and bool(quality.holds)
        self._overridden_hooks = overridden_hooks(spider)

    def process(self, run: TaskRun, stop) -> Optional[NotYet]:
        """Run the task's requests from where it stands: None once they are over (the outcome is the
        gate's), or the NotYet of the one that may not go yet (the caller sets the task aside). A
        ConfigError (an Item class its table cannot take) is raised on once the task is handed back: it
        ends the worker."""
        wait = None
        try:
            wait = self._advance(run, stop)
        except TaskTimedOut:
            pass                      # failed and logged by the watching thread already
        except BlockPage as page:
            log.info("task %s goes back to pending: %s", run.task_id, page)
            if self.quality is not None:       # (always: only a judging runner, which has a tally, raises it)
                self.quality.put_back(run, page.cause)
            self.gate.put_back(run)
        except BadItem as e:
            log.error("%s", failure_line(f"task {run.task_id} failed: {e}"))
            self._fail_with(run, e)
        except BatchUnknown as e:      # crawled or replayed? Neither until its batch's record is read
            log.warning("task %s goes back to pending: %s", run.task_id, e)
            self.gate.put_back(run)
        except ConfigError as e:     # an Item class its table cannot take: no task of it could succeed
            log.critical("%s: %s; this worker stops (task %s is given back)", self.worker_name, e, run.task_id)
            raise
        except Exception as e:   # the user's code failed: this task fails, the worker carries on
            line = failure_line(f"task {run.task_id} failed: {type(e).__name__}: {e}")
            if _first_time((self.namespace, run.lease.batch_id, str(run.task_id)), e):
                exc_info, folded = from_spider_code(e)
                log.error("%s%s", line, f" (the traceback starts in the spider's code: {folded} calls of batchd's "
                                        "own above it are left out)" if folded else "", exc_info=exc_info)
            else:
                log.error("%s", line)
            self._fail_with(run, e)
        finally:
            if wait is None:
                if stop.cold:
                    log.info("task %s abandoned at a cold stop; its lease is given back", run.task_id)
                elif run.not_archived and run.outcome is None:      # (replays.py: not back to pending for ever)
                    self.gate.record_outcome(run, ok=False, failure=failures.failure(
                        run.task_id, run.lease.batch_id, f"not in the archive of batch {run.replay.opening.reparse_of} "
                        "(batchd reparse --fetch-missing fetches what it lacks)", url=run.url))
                self.gate.finish_requests(run)
                if self.quality is not None and run.outcome == TaskState.DONE:
                    self.quality.task_done(run, unchanged=settled_unchanged(run.visits))
        return wait

    def _advance(self, run: TaskRun, stop) -> Optional[NotYet]:
        task = run.lease.task
        if run.pending is None:
            run.replay = self.replays.of(run.lease.batch_id) if self.replays is not None else None
            with user_code(run):
                own = _as_requests(self.spider.task_requests(task), "task_requests")
            run.pending = collections.deque(self._without_repeats(run, own))
            run.own_left = len(run.pending)
        self.downloader.use_cookies(run.cookies)
        while not stop.cold:
            if run.parked is not None:
                (request, sent, seq, attempts), run.parked = run.parked, None
            elif run.pending:
                request = sent = run.pending.popleft()
                is_own, run.own_left = run.own_left > 0, max(0, run.own_left - 1)
                if self._is_duplicate(run, request, is_own):
                    continue
                seq, attempts = run.next_request_seq(), 0
            else:
                return None
            try:
                run.pending.extend(self._run_request(run, request, sent, seq, attempts, task))
            except NotYet as wait:
                run.parked = (request, wait.request, seq, wait.attempts)
                return wait
        return None

    def _fail_with(self, run: TaskRun, error: Exception) -> None:
        self.gate.record_outcome(run, ok=False, failure=failures.of_exception(
            run.task_id, run.lease.batch_id, error, url=run.url))

    def _run_request(self, run: TaskRun, request: Request, sent: Request, request_seq: int, attempts: int,
                     task: dict) -> list:
        """Download one request (`sent`: as it goes now, a retry of it say) and run its callback (its
        errback if it failed); returns the follow-ups. NotYet when it may not go yet."""
        run.url = request.url
        page = None
        memory = self.memory if run.replay is None else None      # a reparse runs every callback
        if memory is not None:
            sent, page = memory.prepare(sent, run.lease.batch_id)
        try:
            response = self._fetch(run, sent, attempts)
            if response.status_code == 304 and response.history and memory is not None:
                response = self._fetch(run, memory.whole(sent), 0)
            if self.archive is not None and not response.replayed:      # (a replayed page is archived already)
                self.archive.record(run.lease.batch_id, response, page.whole_at if page is not None else None)
            if self.quality is not None:
                self.quality.answered(run, response)
        except NotArchived:
            run.not_archived += 1
            return []
        except RequestFailed as failure:
            if self.quality is not None:
                self.quality.failed(run, sent.url, failure.response_or_exception)
            if memory is not None:
                memory.failed(run, request, failure.response_or_exception, page)
            run.last_failure = failure
            try:
                return self._run_errback(run, request, request_seq, failure, task)
            finally:
                run.last_failure = None
        block = None
        if self.auto is not None and run.replay is None and self.auto.samples(sent, response):
            run.render_sample = PageYield()
        try:
            if memory is not None and request.method == "GET":
                follow_ups = self._run_remembered(run, request, request_seq, response, page, task)
            else:
                follow_ups = self._run_callback(run, request, request.callback or self.spider.parse, request_seq,
                                                response, task)
        except BlockPage as found:
            block = BLOCK_REASONS[found.cause]
            raise
        finally:
            rendered, run.render_sample = run.render_sample, None
            if self.judges_pages and run.replay is None:
                self.breaker.page_judged(response, block)
        if rendered is not None:
            rendered.follow_ups = len(follow_ups)
            self._sample_plain(run, request, sent, rendered, task)
        return follow_ups

    def _sample_plain(self, run: TaskRun, request: Request, sent: Request, rendered: PageYield, task: dict) -> None:
        """The plain half of a render="auto" sample: `sent` fetched without a browser (once, through the chain),
        the callback run on it in a dry run, and the two yields handed to the host's choice. An attempt that failed
        for a passing reason (no answer) makes no sample."""
        assert self.auto is not None
        plain, failed = PageYield(), ""
        try:
            response = self.downloader.fetch_plain(sent, *self._spider_hooks(run))
        except RequestFailed as e:
            answered = e.response_or_exception
            if not isinstance(answered, Response):
                log.debug("task %s: %s: no render=\"auto\" sample (%s)", run.task_id, sent.url, e)
                return
            failed = ("validate() refused the plain page" if 200 <= answered.status_code < 300
                      else f"the plain fetch answered {answered.status_code}")
        else:
            if self.archive is not None:
                self.archive.record(run.lease.batch_id, response, sample=True)
            failed = self._dry_run(run, request, response, task, plain)
        self.auto.record(sent, rendered, plain, failed, run.lease.batch_id)

    def _dry_run(self, run: TaskRun, request: Request, response, task: dict, page: PageYield) -> str:
        """The request's callback on `response`, its items and requests measured into `page` and dropped: ''
        once it ran, else why it failed (its error)."""
        assert self.auto is not None
        callback = self._spider_method(request.callback or self.spider.parse)
        run.dry_run = True
        try:
            with user_code(run):
                produced = callback(request, response, task, **request.cb_kwargs)
            for result in _each(run, produced):
                if isinstance(result, Request):
                    page.follow_ups += 1
                elif isinstance(result, Mapping):
                    self.auto.item(page, result)
        except Exception as e:      # the spider's code failed on the plain page: plain is not enough there
            return f"the callback failed on the plain page: {type(e).__name__}: {e}"
        finally:
            run.dry_run = False
        return ""

    def _fetch(self, run: TaskRun, sent: Request, attempts: int):
        """Downloaded, or for a reparse's task answered from the archive (live only with --fetch-missing)."""
        def live():
            return self.downloader.fetch(sent, *self._spider_hooks(run), park=True, attempts=attempts)
        return live() if run.replay is None else run.replay.fetch(sent, *self._spider_hooks(run), live=live)

    def _run_callback(self, run: TaskRun, request: Request, callback, request_seq: int, response, task: dict,
                      held: Optional[list] = None) -> list:
        callback = self._spider_method(callback)
        with user_code(run):
            produced = callback(request, response, task, **request.cb_kwargs)
        # Its items wait for the page's judgement; a reparse's page holds no host (nothing is sent to it).
        judged = self.judges_pages and held is None and run.replay is None
        page_items: Optional[list] = [] if judged else held
        follow_ups = self._take(run, request_seq, callback, produced, page_items)
        if self.quality is not None:
            block = self.quality.parsed(run, response)
            if block is not None and self.judges_pages and run.replay is None:
                raise BlockPage(block)
        if judged:
            for item_seq, checked in page_items or ():
                self.gate.buffer_item(run, request_seq, item_seq, checked)
        return follow_ups

    def _run_remembered(self, run: TaskRun, request: Request, request_seq: int, response, page, task: dict) -> list:
        """A response whose page is remembered (recrawl/): an unchanged page (a 304, or the same body) is
        not parsed (its on_unchanged is called, if it has one) and its earlier items stand; a page whose
        items are the ones stored does not write them again."""
        assert self.memory is not None
        signature = self.memory.body_signature(response)
        if self.memory.unchanged(page, response, signature, run.lease.batch_id):
            run.render_sample = None         # no callback runs on it: no render="auto" sample to compare
            self.memory.visit(run, request, response, page, signature, settled=True)
            on_unchanged = request.revalidation.on_unchanged
            if on_unchanged is None:
                return []
            return self._run_callback(run, request, on_unchanged, request_seq, response, task)
        callback = request.callback or self.spider.parse
        if signature is not None:
            self.memory.visit(run, request, response, page, signature)
            return self._run_callback(run, request, callback, request_seq, response, task)
        held: list = []
        follow_ups = self._run_callback(run, request, callback, request_seq, response, task, held)
        visit = self.memory.visit(run, request, response, page,
                                  items_signature([checked.data for _, checked in held]))
        if visit.verdict == UNCHANGED:
            self.memory.count(ITEMS_UNCHANGED, len(held), run.lease.batch_id)
        else:
            for item_seq, checked in held:
                self.gate.buffer_item(run, request_seq, item_seq, checked)
        return follow_ups

    def _run_errback(self, run: TaskRun, request: Request, request_seq: int, failure: RequestFailed,
                     task: dict) -> list:
        """The request's errback, else the spider's failed_request: with the failure at hand, so that an
        update_task(ok=False) they call records it."""
        if request.errback is None:
            with user_code(run):
                self.spider.failed_request(request, failure.response_or_exception, task)
            return []
        errback = self._spider_method(request.errback)
        with user_code(run):
            produced = errback(request, failure.response_or_exception, task)
        return self._take(run, request_seq, errback, produced, None)

    def _spider_hooks(self, run: TaskRun) -> tuple:
        """The spider's download_midware and validate for the downloader, run as the spider's code; None
        for one it does not override (nothing to call for each attempt)."""
        def as_spider_code(method):
            def call(*args):
                with user_code(run):
                    return method(*args)
            return call

        return tuple(as_spider_code(getattr(self.spider, name)) if name in self._overridden_hooks else None
                     for name in SPIDER_HOOKS)

    def _take(self, run: TaskRun, request_seq: int, callback, produced, held: Optional[list]) -> list:
        """What a callback or errback produced: its items to the pipeline (or, `held`, checked at once and into
        that list as (item_seq, CheckedItem): an item its table cannot take stops the run before the callback's
        next line, as it would unheld), its Requests returned."""
        follow_ups, item_seq = [], 0
        for result in _each(run, produced):
            if isinstance(result, Request):
                follow_ups.append(result)
            elif isinstance(result, Mapping):      # a dict, or a batchd.Item
                if self.quality is not None:
                    self.quality.item(run, result)
                if run.render_sample is not None and self.auto is not None:
                    self.auto.item(run.render_sample, result)
                if held is None:
                    self.gate.add_item(run, request_seq, item_seq, result)
                elif (checked := self.gate.check_item(run, result)) is not None:
                    held.append((item_seq, checked))
                item_seq += 1
            elif result is not None:
                raise TypeError(f"{getattr(callback, '__name__', callback)} yielded a {type(result).__name__}; "
                                "yield dicts or batchd.Items (items) or Requests")
        return follow_ups

    def _spider_method(self, callback):
        """A callback or errback given as the name of a method of the spider, or as a callable."""
        return getattr(self.spider, callback) if isinstance(callback, str) else callback

    def _without_repeats(self, run: TaskRun, requests: list) -> list:
        """task_requests' requests, with REQUEST_FILTER_ENABLE each fingerprint once (a repeat among them is
        dropped and counted); what the batch saw before is not asked here: a task's own requests all go."""
        if not self.settings.REQUEST_FILTER_ENABLE:
            return requests
        kept, fingerprints = [], set()
        for request in requests:
            if not request.dont_filter:
                fingerprint = request.fingerprint()
                if fingerprint in fingerprints:
                    self._dropped(run, request)
                    continue
                fingerprints.add(fingerprint)
            kept.append(request)
        return kept

    def _is_duplicate(self, run: TaskRun, request: Request, own: bool) -> bool:
        """Whether REQUEST_FILTER_ENABLE drops `request` as already made in this batch. A task's own request
        (`own`: one task_requests yielded) is marked seen but never dropped: a link of another task (or this
        task's earlier lease) may have reached its URL first, and dropping it would leave the task with nothing
        to do, back to pending until BATCH_TASK_MAX_ATTEMPTS failed it."""
        if not self.settings.REQUEST_FILTER_ENABLE or request.dont_filter:
            return False
        filtered_in = EVERY_BATCH if self.settings.REQUEST_FILTER_ACROSS_BATCHES else run.lease.batch_id
        if self.seen.first_seen(filtered_in, request.fingerprint()) or own:
            return False
        self._dropped(run, request)
        return True

    def _dropped(self, run: TaskRun, request: Request) -> None:
        self.count(FILTERED, 1, run.lease.batch_id)
        log.debug("task %s: %s %s dropped as already made in batch %s%s (REQUEST_FILTER_ENABLE)", run.task_id,
                  request.method, request.url, run.lease.batch_id,
                  " or an earlier one" if self.settings.REQUEST_FILTER_ACROSS_BATCHES else "")

def _each(run: TaskRun, produced):
    """What a callback produced, one by one, each step of its generator run as the spider's code."""
    if produced is None:
        return
    iterator = iter(produced)
    while True:
        with user_code(run):
            try:
                result = next(iterator)
            except StopIteration:
                return
        yield result


def _as_requests(produced, where: str) -> list:
    if produced is None:
        return []
    if isinstance(produced, Request):
        return [produced]
    requests = list(produced)
    for request in requests:
        if not isinstance(request, Request):
            raise TypeError(f"{where} produced a {type(request).__name__}; it must yield Requests")
    return requests


BATCHD_FILES = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def from_spider_code(error: BaseException) -> tuple:
    """(exc_info, how many calls it leaves out): the error's traceback from the first call outside batchd, the
    spider's, on; batchd's calls that led there (the worker's loop, the runner, the callback's driver) say
    nothing to the spider's author. An error with no call outside batchd keeps its whole traceback."""
    start, left_out = error.__traceback__, 0
    while start is not None and start.tb_frame.f_code.co_filename.startswith(BATCHD_FILES):
        start, left_out = start.tb_next, left_out + 1
    if start is None:
        return (type(error), error, error.__traceback__), 0
    return (type(error), error, start), left_out


_logged_errors: set = set()
_logged_errors_lock = threading.Lock()


def _first_time(task: tuple, error: Exception) -> bool:
    """Whether this task (namespace, batch, id) has not failed with this error before in this process:
    its traceback is logged once, not at every attempt."""
    key = task + (type(error).__name__, str(error))
    with _logged_errors_lock:
        if key in _logged_errors:
            return False
        if len(_logged_errors) >= ERRORS_REMEMBERED:
            _logged_errors.clear()
        _logged_errors.add(key)
        return True
