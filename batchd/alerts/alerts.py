"""Alerts: what an operator must hear of without reading the progress lines.

    stall         the batch is open, not paused, has tasks left, and its settled count has not moved
                  for STALL_ALERT_SECONDS (the master, at each progress check)
    failures      failed / settled above FAILURE_ALERT_RATIO, once FAILURES_CHECKED_FROM tasks settled,
                  and at the close (the master)
    overdue       the next batch is due and this one is still open (the master's patrol)
    late          the next batch is not due yet, but at the batch's rate its tasks left settle only after it is:
                  now + left / rate > the due time (the master, at each progress check, unless paused)
    items_dumped  items went to FAILED_ITEMS_PATH instead of the database (a worker's lander)
    host_down     a host's breaker stayed open HOST_DOWN_GIVE_UP seconds: its tasks fail at once (the first
                  worker of the namespace to see it, once per host and batch: download/middlewares/breaker.py)
    quality       the batch closed flagged (batchd/quality/rules.py): one alert per flagged batch, naming the
                  batch, how many flags, and the first FLAGS_NAMED of them (the master, at the close)

Each alert is one WARNING line (what, which batch, the figures) and, with ALERT_WEBHOOK set, a POST:
batchd's JSON {"namespace", "kind", "batch", "message", "host", "time", ...figures}, or a chat's text
message (ALERT_WEBHOOK_FORMAT; webhooks.py). One alert of a kind per batch per ALERT_REPEAT_SECONDS: a
condition that holds at every patrol is said once, then again only if it lasts. The POST leaves from a
sender thread with a small queue, so a patrol or a flush never waits for a webhook; a webhook that fails
or answers no is logged once per distinct error, not per alert, and tried again with the next alert.
"""
import collections
import logging
import socket
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Optional

from ..config import Settings
from ..model import Progress
from ..service.systemd import escape_controls
from .webhooks import WebhookSender

log = logging.getLogger("batchd.alerts")

FAILURES_CHECKED_FROM = 100   # settled tasks before the failure ratio means something (the close checks it anyway)
FLAGS_NAMED = 3               # flags a quality alert names: a chat message stays a few lines, however many there are
FLAG_TEXT_MOST = 200          # characters of one flag's message in it (the crawl's text: a host, a field)


class Alerts:
    """The alerts of one master or one worker: the conditions it watches, the rate limit, the webhook."""

    def __init__(self, settings: Settings, namespace: str):
        self.settings, self.namespace = settings, namespace
        self.host = socket.gethostname()
        self.sender = WebhookSender(settings.ALERT_WEBHOOK, settings.ALERT_WEBHOOK_FORMAT,
                                    settings.ALERT_WEBHOOK_SECRET) if settings.ALERT_WEBHOOK else None
        self._lock = threading.Lock()
        self._raised: dict = {}                       # (kind, batch id, about) -> when last raised (monotonic)
        self._settled_since: Optional[tuple] = None   # (batch id, settled count, since when unchanged)

    def raise_alert(self, kind: str, batch_id: int, message: str, about: str = "", **figures) -> bool:
        """One WARNING line and a POST, unless this kind was raised for this batch (and this `about`: a host
        down, say) within ALERT_REPEAT_SECONDS."""
        now, repeat = time.monotonic(), self.settings.ALERT_REPEAT_SECONDS
        with self._lock:
            self._raised = {key: at for key, at in self._raised.items() if now - at < repeat}
            if (kind, batch_id, about) in self._raised:
                return False
            self._raised[(kind, batch_id, about)] = now
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
    def progress_checked(self, batch_id: int, progress: Progress, paused: bool, rate: Optional[float] = None,
                         now: Optional[datetime] = None, due: Optional[datetime] = None) -> None:
        """At each progress check of an open batch: a stall, the failure ratio once enough tasks settled, and,
        given the rate (settled tasks per second), the store's clock and when the next batch is due, a late
        batch."""
        self._check_stall(batch_id, progress, paused)
        if progress.settled >= FAILURES_CHECKED_FROM:
            self.check_failures(batch_id, progress.done, progress.failed)
        if rate is not None and now is not None and due is not None and not paused:
            self.check_late(batch_id, progress, rate, now, due)

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

    def check_late(self, batch_id: int, progress: Progress, rate: float, now: datetime, due: datetime) -> None:
        """The batch's tasks left, at `rate`, settle after the next batch is due. Not judged without a rate
        (a stall says that), nor once the next is due (overdue says that)."""
        left = progress.total - progress.settled
        if left <= 0 or rate <= 0 or now >= due:
            return
        eta = now + timedelta(seconds=left / rate)
        if eta > due:
            self.raise_alert("late", batch_id, f"batch {batch_id} will not finish before the next is due: "
                             f"{left} tasks left at {rate:.1f} tasks/s settle at about {eta:%Y-%m-%d %H:%M}, "
                             f"the next batch is due at {due:%Y-%m-%d %H:%M}",
                             left=left, rate=round(rate, 3), eta=eta.isoformat(sep=" ", timespec="seconds"),
                             due=due.isoformat(sep=" "))

    def quality_flagged(self, batch_id: int, flags: list) -> None:
        """The batch closed flagged: `flags` as its record keeps them ({"host", "kind", "field", "message", ...}).
        Their messages come from the crawl: control characters are escaped and each is cut, so a chat gets a
        few bounded lines whatever a site called itself."""
        named = [_bounded(flag["message"]) for flag in flags[:FLAGS_NAMED]]
        more = f" (+{len(flags) - FLAGS_NAMED} more: batchd quality --batch {batch_id})" \
            if len(flags) > FLAGS_NAMED else ""
        self.raise_alert("quality", batch_id, f"batch {batch_id} closed with {len(flags)} quality "
                         f"flag{'' if len(flags) == 1 else 's'}: {'; '.join(named)}{more}",
                         flags=len(flags), kinds=dict(collections.Counter(f["kind"] for f in flags)),
                         first=[{"host": _bounded(f["host"]), "kind": f["kind"],
                                 "field": None if f["field"] is None else _bounded(f["field"]), "message": text}
                                for f, text in zip(flags, named)])

    def overdue(self, batch_id: int, due: datetime) -> None:
        self.raise_alert("overdue", batch_id, f"batch {batch_id} is overdue: the next was due at {due}, it opens "
                         "once this one finishes", due=due.isoformat(sep=" "))

    # -- a worker's
    def items_dumped(self, batch_id: int, items: int, path: str, reason: str) -> None:
        self.raise_alert("items_dumped", batch_id, f"batch {batch_id}: {items} items written to {path} instead of "
                         f"the database ({reason})", items=items, path=path)


def _bounded(text: str) -> str:
    """Text from the crawl in an alert: control characters escaped, FLAG_TEXT_MOST characters at most."""
    shown = escape_controls(str(text))
    return shown if len(shown) <= FLAG_TEXT_MOST else shown[:FLAG_TEXT_MOST - 1] + "…"
