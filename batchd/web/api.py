"""What each route of `batchd web` answers: the JSON API under /api/ (docs/web.md), and the data the pages
draw, read from the sources `batchd status` reads (reporting/status.py, reporting/why.py,
reporting/failed_tasks.py), the batch page's own figures beside them (reporting/batch_figures.py: its top
failure reasons, bytes, 304s, what a re-crawl found, its life drawn from its record once the master's samples
are gone), and a closed batch's data quality from the one `batchd quality` reads (reporting/quality_report.py).

Every read and every action runs on one guarded thread, the store thread (StoreThread): whatever the
number of browsers, the dashboard holds one connection per store (the MySQL store keeps one per thread),
and a question asked again within CACHE_SECONDS is answered from memory. A request waits for its answer
up to STORE_WAIT; past it, it gets 503 while the read goes on.

A URL from a crawl is shown with its password redacted (config.redact_url); every string from a crawl is
data here (JSON), escaped by the pages (html.py).
"""
import json
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional
from urllib.parse import parse_qs

from ..config import redact_url
from ..errors import BatchdError
from ..service.threads import start_thread
from ..control.actions import ask_open_batch, pause, resume
from ..control.requeue import requeue_failed
from ..reporting.batch_figures import gather_batch_figures
from ..reporting.failed_tasks import NoSuchBatch, failed_tasks
from ..reporting.quality_report import gather_quality
from ..reporting.status import gather_history, gather_hosts, gather_status
from ..reporting.why import gather_why

log = logging.getLogger("batchd.web")

CACHE_SECONDS = 1.0
STORE_WAIT = 8.0               # below the server's REQUEST_DEADLINE: the 503 still reaches the client
HISTORY_COUNT = 30             # batches in the history's chart and table
FAILURES_SHOWN = 100           # failed tasks listed for a reason
ACTIONS = ("pause", "resume", "open-batch", "requeue")


class StoreBusy(Exception):
    """The store thread did not answer within STORE_WAIT."""


@dataclass
class _Job:
    read: Callable[[], Any]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: Optional[BaseException] = None


class StoreThread:
    def __init__(self) -> None:
        self._jobs: queue.Queue = queue.Queue()
        self._cache: dict = {}             # key -> (monotonic time, result)
        self._lock = threading.Lock()
        start_thread(self._serve, "batchd-web-store")

    def ask(self, key: Optional[tuple], read: Callable[[], Any]) -> Any:
        """`read()`'s result (cached under `key` for CACHE_SECONDS; None: an action, never cached)."""
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(key) if key is not None else None
        if cached is not None and now - cached[0] < CACHE_SECONDS:
            return cached[1]
        job = _Job(read)
        self._jobs.put(job)
        if not job.done.wait(STORE_WAIT):
            raise StoreBusy(f"the stores did not answer within {STORE_WAIT:g} s")
        if job.error is not None:
            raise job.error
        if key is not None:
            with self._lock:
                self._cache = {k: v for k, v in self._cache.items() if now - v[0] < CACHE_SECONDS}
                self._cache[key] = (time.monotonic(), job.result)
        return job.result

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job.result = job.read()
            except Exception as e:      # the asker answers it (an outage: 503 with its words)
                job.error = e
            job.done.set()


class Dashboard:
    """The namespaces shown (each a Runtime, by namespace name) and what the routes answer about them."""

    def __init__(self, runtimes: list, token: Optional[str]):
        self.runtimes = {runtime.namespace: runtime for runtime in runtimes}
        self.token = token
        self.store = StoreThread()

    @property
    def actions(self) -> bool:
        return self.token is not None

    def runtime(self, namespace: Optional[str]):
        """The namespace asked for (the first when none is); KeyError for one not shown."""
        return self.runtimes[namespace or next(iter(self.runtimes))]

    # -- what the pages and /api/ read
    def namespaces(self) -> list:
        return [{"namespace": name, "table": runtime.layout.table} for name, runtime in self.runtimes.items()]

    def status(self, namespace: Optional[str]) -> dict:
        runtime = self.runtime(namespace)
        return self.store.ask(("status", runtime.namespace), lambda: gather_status(runtime))

    def batch(self, namespace: Optional[str]) -> dict:
        """What the batch page shows beside the status: read after it, of the batch it shows."""
        status = self.status(namespace)
        runtime = self.runtime(namespace)
        return self.store.ask(("batch", runtime.namespace, status["time"]),
                              lambda: gather_batch_figures(runtime, status))

    def why(self, namespace: Optional[str]) -> dict:
        runtime = self.runtime(namespace)
        return self.store.ask(("why", runtime.namespace), lambda: gather_why(runtime))

    def hosts(self, namespace: Optional[str]) -> dict:
        runtime = self.runtime(namespace)
        return self.store.ask(("hosts", runtime.namespace), lambda: gather_hosts(runtime))

    def history(self, namespace: Optional[str]) -> list:
        runtime = self.runtime(namespace)
        return self.store.ask(("history", runtime.namespace), lambda: gather_history(runtime, HISTORY_COUNT))

    def failures(self, namespace: Optional[str], reason: Optional[str]) -> dict:
        runtime = self.runtime(namespace)
        report = self.store.ask(("failures", runtime.namespace, reason),
                                lambda: failed_tasks(runtime, reason=reason or None, limit=FAILURES_SHOWN))
        return {**report, "failures": [{**record, "url": redact_url(record.get("url")) if record.get("url") else
                                        record.get("url")} for record in report["failures"]]}

    def quality(self, namespace: Optional[str], batch: Optional[int] = None) -> dict:
        """A closed batch's quality (None: the last one closed), the figures `batchd quality --json` prints;
        NoSuchBatch for a batch not closed yet."""
        runtime = self.runtime(namespace)
        return self.store.ask(("quality", runtime.namespace, batch), lambda: gather_quality(runtime, batch))

    def last_quality(self, namespace: Optional[str]) -> dict:
        """For the batch page: {"quality": the last closed batch's, None before one closed}, or {"unread": why
        it cannot be read now} (in an outage the page shows what it can, as `batchd status` does)."""
        try:
            return {"quality": self.quality(namespace)}
        except NoSuchBatch:
            return {"quality": None}
        except (BatchdError, StoreBusy) as e:
            return {"unread": outage_words(e)}

    # -- the actions (the server has checked the token)
    def act(self, action: str, namespace: Optional[str], arguments: dict) -> str:
        runtime = self.runtime(namespace)
        if action == "pause":
            said = self.store.ask(None, lambda: pause(runtime))
        elif action == "resume":
            said = self.store.ask(None, lambda: resume(runtime))
        elif action == "open-batch":
            force = str(arguments.get("force", "")).lower() in ("1", "true", "yes", "on")
            last_id, _ = self.store.ask(None, lambda: ask_open_batch(runtime, force))
            said = (f"asked the master to open the batch after {last_id}" if last_id is not None
                    else "asked the master to open the first batch") + (" (the open one closed as it stands)"
                                                                         if force else "")
        else:
            reason = arguments.get("reason") or None
            said = self.store.ask(None, lambda: requeue_failed(runtime, reason=reason))
        log.info("batchd web: %s on namespace %s: %s", action, runtime.namespace, said)
        return said


def action_arguments(query: dict, body: bytes) -> dict:
    """An action's arguments: the query string's, with a form's or a JSON object's (an API client's) over them."""
    text = body.decode("utf-8", "replace").strip()
    if not text.startswith("{"):
        return {**query, **{name: values[0] for name, values in parse_qs(text).items()}}
    try:
        given = json.loads(text)
    except ValueError:
        given = None
    if not isinstance(given, dict):
        return query
    return {**query, **{name: value for name, value in given.items() if isinstance(value, (str, int, bool))}}


def outage_words(error: BaseException) -> str:
    if isinstance(error, (BatchdError, StoreBusy)):      # (BackendUnavailable is one): their words are for people
        return str(error)
    return f"{type(error).__name__}: {error}"
