"""Crawl hours (CRAWL_HOURS, and a [hosts."..."] table's crawl_hours): which hosts wait now, and until when.

A host's windows are those of its terms (hosts/terms.py: itself, its longest `*.` pattern, else the global
CRAWL_HOURS), read in BATCH_TIMEZONE (batchd/schedule.py). The master asks once per claim
(`HoursNow`, one look at the clock): the store's claim then takes no task of a host that waits
(BatchStore.hold_hosts), so its tasks stay pending in the table, and the batch stays open, until its hours
come; the tasks already leased finish. Telling a task's host takes the master's host column
(BATCH_TASK_HOST_FIELD): without one, only the global CRAWL_HOURS can hold the claims, all at once.
"""
import time
from datetime import datetime, timezone
from typing import Callable, Optional

from ..config import Settings
from ..errors import ConfigError
from ..schedule import batch_zone, closed_until, open_seconds_for
from .terms import HostTerms

EVERY_HOST = "*"          # the name the global CRAWL_HOURS goes by where hosts are listed
MOST_NAMED = 50           # waiting hosts named in a claim's account (the others are counted)


class CrawlHours:
    """The crawl hours of every host, on a clock that tests can set (`clock`: Unix time)."""

    def __init__(self, terms: HostTerms, settings: Settings, clock: Callable[[], float] = time.time):
        self.terms, self.zone, self.clock = terms, batch_zone(settings), clock
        self.windows = settings.CRAWL_HOURS
        self.own = {pattern: t.crawl_hours for pattern, t in terms.patterns.items()
                    if t.crawl_hours != settings.CRAWL_HOURS}     # the patterns whose hours are their own

    @property
    def any(self) -> bool:
        """Some host has crawl hours: else every host is crawled at every hour (nothing to ask)."""
        return bool(self.windows) or any(self.own.values())

    def check_host_field(self, host_field: Optional[str]) -> None:
        """Hours of a host's own need the master to tell a task's host: a ConfigError naming them otherwise."""
        if self.own and not host_field:
            pattern = next(iter(self.own))
            raise ConfigError(f'[hosts."{pattern}"] crawl_hours: a host\'s own crawl hours need '
                              "BATCH_TASK_HOST_FIELD (the task table's column the master tells a task's host by)")

    def now(self) -> "HoursNow":
        return HoursNow(self, datetime.fromtimestamp(self.clock(), timezone.utc))

    def every_pattern(self) -> list:
        """(hosts, windows) of every set of hosts with crawl hours: "*" (CRAWL_HOURS), then each pattern's own."""
        listed = [(EVERY_HOST, self.windows)] if self.windows else []
        return listed + [(pattern, windows) for pattern, windows in self.own.items() if windows]

    def waiting(self, at: Optional[datetime] = None) -> list:
        """[{hosts, windows, until}] of the hosts (patterns, "*" for every other host) waiting at `at` (now):
        what `batchd status` and the dashboard show; `until` is an ISO time in BATCH_TIMEZONE."""
        at = at or datetime.fromtimestamp(self.clock(), timezone.utc)
        shown = []
        for hosts, windows in self.every_pattern():
            until = closed_until(windows, at, self.zone)
            if until is not None:
                shown.append({"hosts": hosts, "windows": list(windows), "until": until.isoformat(timespec="minutes")})
        return shown

    def seconds_for(self, work: Optional[float], at: Optional[datetime] = None) -> Optional[float]:
        """Seconds until `work` seconds of crawling are done within the global CRAWL_HOURS (None: unknown)."""
        if work is None:
            return None
        at = at or datetime.fromtimestamp(self.clock(), timezone.utc)
        return open_seconds_for(work, self.windows, at, self.zone)


class HoursNow:
    """The crawl hours at one moment: `held(host)` for a claim, and the account of the hosts it held."""

    def __init__(self, hours: CrawlHours, at: datetime):
        self.hours, self.at = hours, at
        self._by_pattern: dict = {}          # terms' pattern -> when its hours open (None: open now)
        self.held_hosts: dict = {}           # host -> when its hours open: MOST_NAMED of those a claim held
        self.held_count = 0                  # hosts a claim held, named or not
        self.claims = True                   # whether the master claims at all with them (master/timing.py)

    def opens(self, pattern: str, windows: tuple) -> Optional[datetime]:
        if pattern not in self._by_pattern:
            self._by_pattern[pattern] = closed_until(windows, self.at, self.hours.zone)
        return self._by_pattern[pattern]

    @property
    def everything_waits(self) -> bool:
        """No host's hours are open: a claim would take nothing (and need not read a row)."""
        return (self.opens("", self.hours.windows) is not None
                and all(self.opens(pattern, windows) is not None for pattern, windows in self.hours.own.items()))

    def held(self, host: str) -> bool:
        terms = self.hours.terms.for_host(host)
        opens = self.opens(terms.pattern, terms.crawl_hours)
        if opens is not None and host not in self.held_hosts:
            self.held_count += 1
            if len(self.held_hosts) < MOST_NAMED:
                self.held_hosts[host] = opens
        return opens is not None

    def last_opening(self) -> Optional[datetime]:
        """When the hours of the last host a claim held (everything waiting: of every host) open: the batch
        ends no sooner. None when none waits."""
        waiting = self._by_pattern.values() if self.everything_waits else self.held_hosts.values()
        return max((opens for opens in waiting if opens is not None), default=None)
