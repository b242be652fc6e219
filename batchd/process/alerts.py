"""Alerts: what an operator must hear of without reading the progress lines.

    stall         the batch is open, not paused, has tasks left, and its settled count has not moved
                  for STALL_ALERT_SECONDS (the master, at each progress check)
    failures      failed / settled above FAILURE_ALERT_RATIO, once FAILURES_CHECKED_FROM tasks settled,
                  and at the close (the master)
    overdue       the next batch is due and this one is still open (the master's patrol)
    items_dumped  items went to FAILED_ITEMS_PATH instead of the database (a worker's lander)

Each alert is one WARNING line (what, which batch, the figures) and, with ALERT_WEBHOOK set, a JSON
POST {"namespace", "kind", "batch", "message", "host", "time", ...figures}. One alert of a kind per
batch per ALERT_REPEAT_SECONDS: a condition that holds at every patrol is said once, then again
only if it lasts. The POST leaves from a sender thread with a small queue, so a patrol or a flush
never waits for a webhook; a webhook that fails is logged once, not per alert, and tried again
with the next alert.
"""
import logging
import queue
import socket
import threading
import time
from datetime import datetime, timezone
from typing import Optional
from urllib.parse import urlsplit

import requests

from ..config import Settings
from ..model import Progress
from .threads import check_in, start_thread

log = logging.getLogger("batchd.alerts")

FAILURES_CHECKED_FROM = 100   # settled tasks before the failure ratio means something (the close checks it anyway)
QUEUE_SIZE = 100              # alerts waiting for the webhook; more are only logged (the webhook is failing)
POST_TIMEOUT = 5.0            # seconds to connect, and to wait for the answer
IDLE_WAIT = 1.0               # seconds the sender sleeps on an empty queue between two check-ins


def webhook_name(url: str) -> str:
    """The webhook as a log line names it: scheme and host only (the path of a chat's webhook is its secret)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "") + "/..."


class WebhookSender:
    """POSTs alerts to ALERT_WEBHOOK from a thread of its own (started with the first alert) through a
    small queue: `send` never blocks."""

    def __init__(self, url: str):
        self.url = url
        self._queue: queue.Queue = queue.Queue(QUEUE_SIZE)
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._stopping = threading.Event()
        self._failing = False        # the last POST failed (said once, until one succeeds)

    def send(self, payload: dict) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = start_thread(self._send_loop, "batchd-alerts")
        try:
            self._queue.put_nowait(payload)
        except queue.Full:
            pass     # only while the webhook fails or hangs, which is logged; the alert's line is in the log

    def close(self, timeout: float = POST_TIMEOUT) -> None:
        """Send what is queued, for at most `timeout` seconds (a last alert before a once-mode exit), then stop."""
        self._stopping.set()
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _send_loop(self) -> None:
        while True:
            check_in(within=IDLE_WAIT + 1)
            try:
                payload = self._queue.get(timeout=IDLE_WAIT)
            except queue.Empty:
                if self._stopping.is_set():
                    return
                continue
            check_in(within=2 * POST_TIMEOUT + 1)    # a connect, then the answer
            self._post(payload)

    def _post(self, payload: dict) -> None:
        try:
            # stream: the answer's body is never read; its status says whether the alert was taken.
            with requests.post(self.url, json=payload, timeout=POST_TIMEOUT, stream=True) as answer:
                answer.raise_for_status()
        except requests.RequestException as e:
            if not self._failing:
                log.warning("alert webhook %s fails (%s: %s); alerts are still logged, and each next one is "
                            "tried on it again", webhook_name(self.url), type(e).__name__, e)
            self._failing = True
            return
        if self._failing:
            log.info("alert webhook %s takes alerts again", webhook_name(self.url))
        self._failing = False


class Alerts:
    """The alerts of one master or one worker: the conditions it watches, the rate limit, the webhook."""

    def __init__(self, settings: Settings, namespace: str):
        self.settings, self.namespace = settings, namespace
        self.host = socket.gethostname()
        self.sender = WebhookSender(settings.ALERT_WEBHOOK) if settings.ALERT_WEBHOOK else None
        self._lock = threading.Lock()
        self._raised: dict = {}                       # (kind, batch id) -> when last raised (monotonic)
        self._settled_since: Optional[tuple] = None   # (batch id, settled count, since when unchanged)

    def raise_alert(self, kind: str, batch_id: int, message: str, **figures) -> bool:
        """One WARNING line and a POST, unless this kind was raised for this batch within ALERT_REPEAT_SECONDS."""
        now, repeat = time.monotonic(), self.settings.ALERT_REPEAT_SECONDS
        with self._lock:
            self._raised = {key: at for key, at in self._raised.items() if now - at < repeat}
            if (kind, batch_id) in self._raised:
                return False
            self._raised[(kind, batch_id)] = now
        log.warning("ALERT %s: %s", kind, message)
        if self.sender is not None:
            self.sender.send({"namespace": self.namespace, "kind": kind, "batch": batch_id, "message": message,
                              "host": self.host, "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                              **figures})
        return True

    def close(self) -> None:
        if self.sender is not None:
            self.sender.close()

    # -- the master's
    def progress_checked(self, batch_id: int, progress: Progress, paused: bool) -> None:
        """At each progress check of an open batch: a stall, and the failure ratio once enough tasks settled."""
        self._check_stall(batch_id, progress, paused)
        if progress.settled >= FAILURES_CHECKED_FROM:
            self.check_failures(batch_id, progress.done, progress.failed)

    def _check_stall(self, batch_id: int, progress: Progress, paused: bool) -> None:
        now, limit = time.monotonic(), self.settings.STALL_ALERT_SECONDS
        known = self._settled_since
        if paused or known is None or known[:2] != (batch_id, progress.settled):
            self._settled_since = (batch_id, progress.settled, now)    # a pause is no stall: counted from the resume
            return
        still = now - known[2]
        if limit and progress.settled < progress.total and still >= limit:
            self.raise_alert("stall", batch_id, f"batch {batch_id} has settled no task for {still:.0f} s "
                             f"(STALL_ALERT_SECONDS={limit:g}): {progress.settled}/{progress.total} settled, "
                             f"{progress.processing} processing, {progress.pending} pending",
                             settled=progress.settled, total=progress.total, processing=progress.processing,
                             pending=progress.pending, stalled_seconds=round(still))

    def check_failures(self, batch_id: int, done: int, failed: int) -> None:
        settled, limit = done + failed, self.settings.FAILURE_ALERT_RATIO
        ratio = failed / settled if settled else 0.0
        if ratio > limit:
            self.raise_alert("failures", batch_id, f"batch {batch_id}: {failed} of {settled} settled tasks failed "
                             f"({ratio:.0%}, above FAILURE_ALERT_RATIO={limit:g})",
                             done=done, failed=failed, ratio=round(ratio, 4))

    def overdue(self, batch_id: int, due: datetime) -> None:
        self.raise_alert("overdue", batch_id, f"batch {batch_id} is overdue: the next was due at {due}, it opens "
                         "once this one finishes", due=due.isoformat(sep=" "))

    # -- a worker's
    def items_dumped(self, batch_id: int, items: int, path: str, reason: str) -> None:
        self.raise_alert("items_dumped", batch_id, f"batch {batch_id}: {items} items written to {path} instead of "
                         f"the database ({reason})", items=items, path=path)
