"""The master's calendar: when the next batch is due (BATCH_INTERVAL or BATCH_SCHEDULE, batchd/schedule.py), and
which hosts' tasks it may claim now (CRAWL_HOURS, hosts/crawl_hours.py).

Kept apart from the patrol so that each part of it asks one question: `is_due`, `due_text`, `note_overlap` for the
opening; `hold_claims` before a claim; `tasks_wait`, `eta_text` for the progress and the close.
"""
import logging
import time
from datetime import datetime
from typing import Optional

from ..config import Settings
from ..errors import ConfigError
from ..hosts.crawl_hours import EVERY_HOST, CrawlHours, HoursNow
from ..hosts.terms import HostTerms
from ..settle.progress_rate import eta_words
from ..schedule import due_text, interval_set, is_due, next_due, which_rule

log = logging.getLogger("batchd.master")


class Timing:
    def __init__(self, settings: Settings, store, host_field: Optional[str], clock=time.time):
        self.settings, self.store = settings, store
        self.hours = CrawlHours(HostTerms.from_settings(settings), settings, clock)
        self.hours.check_host_field(host_field)
        self.last: Optional[HoursNow] = None       # the crawl hours at the last claim (None: none are set)
        # The last claim found only hosts waiting: none before a full patrol's interval (monotonic) has passed or
        # the first of them may go on (Unix time, on the hours' clock).
        self._idle_until = (0.0, 0.0)
        self._last_claim: Optional[HoursNow] = None    # the crawl hours at the last claim made (the hosts it held)
        self._overlap_told: Optional[int] = None
        self._waits_told: tuple = ()
        # Both rules set is a config that says two things: the one that holds is said louder.
        log.log(logging.WARNING if settings.BATCH_SCHEDULE and interval_set(settings) else logging.INFO, "%s",
                which_rule(settings))

    # -- the opening
    def next_due(self, batch) -> datetime:
        return next_due(batch, self.settings, self.store)

    def due_text(self, batch) -> str:
        return due_text(batch, self.settings, self.store)

    def is_due(self, batch, now: datetime) -> bool:
        return is_due(batch, now, self.settings, self.store)

    def note_overlap(self, batch) -> None:
        """A batch still running at the next batch's time: it goes on, and the next opens once it finishes (the
        overdue alert says so too, at most every ALERT_REPEAT_SECONDS); said once a batch."""
        if self._overlap_told == batch.id:
            return
        self._overlap_told = batch.id
        log.info("batch %d is still running at the next batch's time (%s, %s): the next opens once it finishes, "
                 "not beside it", batch.id, self.due_text(batch),
                 "BATCH_SCHEDULE" if self.settings.BATCH_SCHEDULE else "BATCH_INTERVAL")

    # -- the claims
    def hold_claims(self, sends: bool = True) -> Optional[HoursNow]:
        """Before a claim: the crawl hours now, handed to the store's claim (None: no crawl hours are set, or the
        batch sends no request: a reparse, batchd reparse). A claim is pointless while every host waits, or for a
        while after one found only waiting hosts (`claims` False then): until the earliest of them may go on, or
        BATCH_MONITOR_INTERVAL has passed."""
        if not sends and self.hours.any:
            self.store.hold_hosts(None)
        if not self.hours.any or not sends:
            return None
        now = self.last = self.hours.now()
        now.claims = not now.everything_waits and (time.monotonic() >= self._idle_until[0]
                                                   or self.hours.clock() >= self._idle_until[1])
        if now.claims and not self.store.hold_hosts(now.held) and self.hours.own:
            raise ConfigError(f"{self.store.describe()} claims in id order: a [hosts] table's crawl_hours needs a "
                              "store whose claims go across hosts (MySQL, SQLite, memory; BATCH_TASK_HOST_FIELD)")
        if now.everything_waits:
            self._tell_waits(now)
        return now

    def claimed(self, now: Optional[HoursNow], count: int, resetting: bool = False) -> None:
        """After a claim: one that took nothing while hosts waited makes the next claims wait a little (not during
        a reset: the rows it walks next may be of other hosts)."""
        if now is None or not now.claims:
            return
        self._last_claim = now
        if count == 0 and now.held_count and not resetting:
            opens = min(now.held_hosts.values(), default=None)
            self._idle_until = (time.monotonic() + self.settings.BATCH_MONITOR_INTERVAL,
                                opens.timestamp() if opens is not None else 0.0)
        self._tell_waits(now)

    def tasks_wait(self) -> bool:
        """Every host waits, or the last claim left tasks pending for their hosts' hours: a pause in the batch's
        progress is no stall."""
        now = self.last
        return now is not None and (now.everything_waits or self._held_last)

    @property
    def _held_last(self) -> bool:
        """The last claim made held some hosts' tasks."""
        return self._last_claim is not None and self._last_claim.held_count > 0

    def may_close(self, full: bool) -> bool:
        """Whether a dry queue may close the batch: not while the last claim left tasks waiting for their hours
        (they are pending: the batch is not over); while every host waits no claim tells, so a full patrol asks
        the table (its tasks may all be settled)."""
        now = self.last
        if now is None or not self.tasks_wait():
            return True
        return full and now.everything_waits and not self._held_last

    def _tell_waits(self, now: HoursNow) -> None:
        """One line each time the set of waiting hosts changes (not at each claim)."""
        waiting = (EVERY_HOST,) if now.everything_waits else tuple(sorted(now.held_hosts))
        if waiting == self._waits_told:
            return
        self._waits_told = waiting
        if not waiting:
            log.info("crawl hours: no host waits now")
        elif now.everything_waits:
            log.info("crawl hours: every host waits (CRAWL_HOURS %s) until %s; nothing is claimed meanwhile, the "
                     "tasks in flight finish", ", ".join(self.settings.CRAWL_HOURS), _when(now.last_opening()))
        else:
            shown = ", ".join(f"{host} until {_when(opens)}" for host, opens in sorted(now.held_hosts.items()))
            more = now.held_count - len(now.held_hosts)
            log.info("crawl hours: the tasks of %d host(s) wait for their hours: %s%s; the others go on",
                     now.held_count, shown, f" and {more} more" if more else "")

    # -- the progress
    def eta_text(self, remaining: int, rate: float) -> str:
        """The ETA of `remaining` tasks at `rate` a second, counting the hours the crawl waits: the global
        CRAWL_HOURS' closed hours walked through, and no sooner than the last waiting host's hours open."""
        if remaining <= 0:
            return "0s"
        work = remaining / rate if rate > 0 else None
        seconds, opens = self.hours.seconds_for(work), self.hosts_wait_until()
        if opens is not None:
            seconds = max(seconds, opens.timestamp() - self.hours.clock()) if seconds is not None else None
            if seconds is None:
                return f"unknown (hosts wait until {_when(opens)})"
        return "unknown" if seconds is None else eta_words(seconds)

    def hosts_wait_until(self) -> Optional[datetime]:
        """When the hours of the last host the claims left waiting open (every host waiting: of every host); None
        when none waits. The batch ends no sooner; the ledger carries it to `batchd status` (its ETA)."""
        waits = self.last if self.last is not None and self.last.everything_waits else self._last_claim
        return waits.last_opening() if waits is not None and self.tasks_wait() else None


def _when(moment: Optional[datetime]) -> str:
    return "?" if moment is None else f"{moment:%Y-%m-%d %H:%M %Z}".strip()

