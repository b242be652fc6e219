"""When the next batch is due, on the store's clock (docs/architecture.md, A batch's life).

Two rules, one at a time:
- BATCH_INTERVAL (the default): with unit `day` the next batch is due on the date BATCH_INTERVAL days after
  the current batch's date (at 00:00); with unit `hour`, at the hour BATCH_INTERVAL hours after its hour.
  So a daily cron at 02:00 with an interval of 1 day opens a batch every day.
- BATCH_SCHEDULE, a cron expression (5 fields, or @daily and friends) read in BATCH_TIMEZONE: the next batch
  is due at the first time it names after the current batch's opening. Times missed while no master ran are
  so one batch, not several: the batch that opens late is dated now, and the next time is counted from it.

The expression is read by croniter (Debian 12 packages it, python3-croniter; cronsim it does not). Its
older releases (Debian's 1.3.5) step wrongly across a daylight-saving change on an aware datetime, so the
expression is walked on the zone's wall clock (naive) and only its answer is placed in the zone: a time the
change skips (02:30 on a spring night) is read with the offset before the change (an hour later by the
clock), and a time the change repeats opens once, at its first passage.

Batch dates are naive times on the store's clock (MySQL's NOW(), UTC for SQLite, local time for the memory
store); `store.clock_zone()` says in which zone, so that they can be read in BATCH_TIMEZONE. A reparse
(`batchd reparse`) fetches nothing and moves no date: either rule counts from the crawl before it
(BatchRecord.calendar_date).
"""
import dataclasses
import json
import re
from datetime import datetime, timedelta, tzinfo
from typing import Any, Optional
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import ConfigError

# The @ forms an operator may write instead of 5 fields (croniter reads them all).
ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
EXPRESSION_WORDS = "a cron expression of 5 fields (minute hour day month weekday), or " + ", ".join(ALIASES)


def check_schedule(expression: str, source: str = "settings") -> str:
    """BATCH_SCHEDULE as written ("" when unset), or a ConfigError naming it: 5 fields or an @ form, each
    field one croniter reads. Seconds (a 6th field) are refused: a batch opens at most once a minute."""
    text = " ".join(str(expression).split())
    if not text:
        return ""
    from croniter import croniter
    if text.lower() not in ALIASES and len(text.split()) != 5:
        raise ConfigError(f"setting BATCH_SCHEDULE in {source}: {expression!r} is not {EXPRESSION_WORDS}")
    try:
        croniter(text)
    except (ValueError, KeyError) as e:     # croniter's errors are ValueErrors; an unknown name a KeyError
        raise ConfigError(f"setting BATCH_SCHEDULE in {source}: {expression!r} is not {EXPRESSION_WORDS} "
                          f"({str(e).strip() or type(e).__name__})") from None
    return text


def check_timezone(name: str, source: str = "settings") -> str:
    """BATCH_TIMEZONE as written ("" is the machine's zone), or a ConfigError naming it."""
    if not name:
        return ""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"setting BATCH_TIMEZONE in {source}: {name!r} is no time zone this machine knows "
                          "(an IANA name such as Europe/Paris or UTC; tzdata holds them)") from None
    return name


def batch_zone(settings) -> Optional[tzinfo]:
    """BATCH_TIMEZONE, or None for the machine's own zone."""
    return ZoneInfo(settings.BATCH_TIMEZONE) if settings.BATCH_TIMEZONE else None


def zone_name(settings) -> str:
    return settings.BATCH_TIMEZONE or "the machine's time zone"


def in_zone(moment: datetime, zone: Optional[tzinfo]) -> datetime:
    """An aware time read in `zone` (None: the machine's own)."""
    return moment.astimezone(zone) if zone is not None else moment.astimezone()


def aware(store_time: datetime, clock: Optional[tzinfo]) -> datetime:
    """A naive time on the store's clock, whose zone is `clock` (None: the machine's own), made aware."""
    return store_time.replace(tzinfo=clock) if clock is not None else store_time.astimezone()


def on_store_clock(moment: datetime, clock: Optional[tzinfo]) -> datetime:
    """An aware time as a naive time on the store's clock (what batch dates and store.now() are)."""
    return in_zone(moment, clock).replace(tzinfo=None)


def next_scheduled(expression: str, after: datetime, zone: Optional[tzinfo]) -> datetime:
    """The first time `expression` names after the aware time `after`, aware in `zone` (module doc: walked on
    the zone's wall clock)."""
    from croniter import croniter
    wall = in_zone(after, zone).replace(tzinfo=None)
    following = croniter(expression, wall).get_next(datetime)
    return following.replace(tzinfo=zone) if zone is not None else following.astimezone()


def next_due(batch, settings, store) -> datetime:
    """When the batch after `batch` is due, as a naive time on the store's clock."""
    if settings.BATCH_SCHEDULE:
        clock = store.clock_zone()
        due = next_scheduled(settings.BATCH_SCHEDULE, aware(batch.calendar_date, clock), batch_zone(settings))
        return on_store_clock(due, clock)
    if settings.BATCH_INTERVAL_UNIT == "hour":
        return batch.calendar_date.replace(minute=0, second=0, microsecond=0) + timedelta(hours=settings.BATCH_INTERVAL)
    return datetime.combine(batch.calendar_date.date(), datetime.min.time()) + timedelta(days=settings.BATCH_INTERVAL)


def due_text(batch, settings, store) -> str:
    """When the next batch is due, for a line: on the store's clock with BATCH_INTERVAL (as ever); in
    BATCH_TIMEZONE, named, with BATCH_SCHEDULE (the zone its expression is read in)."""
    due = next_due(batch, settings, store)
    if not settings.BATCH_SCHEDULE:
        return f"{due:%Y-%m-%d %H:%M}"
    shown = in_zone(aware(due, store.clock_zone()), batch_zone(settings))
    return f"{shown:%Y-%m-%d %H:%M} {settings.BATCH_TIMEZONE or shown.tzname()}"


def is_due(batch, now: datetime, settings, store) -> bool:
    """No batch yet is due; otherwise the rule of the current settings, `now` on the store's clock."""
    return batch is None or now >= next_due(batch, settings, store)


def which_rule(settings) -> str:
    """One line on which rule opens batches: with both BATCH_SCHEDULE and a BATCH_INTERVAL of its own, the
    schedule wins (the interval is then unused, and the line says so)."""
    if not settings.BATCH_SCHEDULE:
        return f"batches open every {settings.BATCH_INTERVAL} {settings.BATCH_INTERVAL_UNIT}(s) (BATCH_INTERVAL)"
    line = f"batches open at {settings.BATCH_SCHEDULE!r} in {zone_name(settings)} (BATCH_SCHEDULE)"
    if interval_set(settings):
        line += (f"; BATCH_INTERVAL={settings.BATCH_INTERVAL} {settings.BATCH_INTERVAL_UNIT} is not used: "
                 "BATCH_SCHEDULE wins")
    return line


def interval_set(settings) -> bool:
    """BATCH_INTERVAL (or its unit) differs from its default."""
    defaults = {f.name: f.default for f in dataclasses.fields(settings)}
    return any(getattr(settings, name) != defaults[name] for name in ("BATCH_INTERVAL", "BATCH_INTERVAL_UNIT"))


# -- CRAWL_HOURS: when a host's tasks may be leased (globally, and per host in [hosts."..."] tables)
HOURS_WORDS = 'a list of "HH:MM-HH:MM" windows in BATCH_TIMEZONE ("22:00-04:00" crosses midnight; [] is every hour)'
WINDOW = re.compile(r"^([01]\d|2[0-4]):([0-5]\d)-([01]\d|2[0-4]):([0-5]\d)$")
DAY_MINUTES = 24 * 60


def parse_crawl_hours(raw: Any, where: str) -> tuple:
    """CRAWL_HOURS (or a host's crawl_hours) as a tuple of "HH:MM-HH:MM" texts; () for every hour. A list (TOML,
    code), a JSON array (the environment) or one window; a ConfigError naming `where` and the culprit."""
    if raw is None or (isinstance(raw, (list, tuple)) and not raw):
        return ()
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.lstrip().startswith("[") else [raw]
        except ValueError:
            raise ConfigError(f"{where}: {raw!r} is not {HOURS_WORDS}") from None
    if not isinstance(raw, (list, tuple)):
        raise ConfigError(f"{where}: {raw!r} is not {HOURS_WORDS}")
    for window in raw:
        if not isinstance(window, str) or not _window_ok(window.strip()):
            raise ConfigError(f'{where}: {window!r} is not a window "HH:MM-HH:MM" (from one time of day to '
                              'another, never the same, up to 24:00; "22:00-04:00" crosses midnight)')
    return tuple(window.strip() for window in raw)


def _window_ok(window: str) -> bool:
    match = WINDOW.match(window)
    if match is None:
        return False
    start, end = window_minutes(window)
    return start < DAY_MINUTES and start != end


def window_minutes(window: str) -> tuple:
    """(start, end) of a checked window, in minutes of the day (an end of 24:00 is 1440)."""
    start, end = window.split("-")
    return tuple(int(part[:2]) * 60 + int(part[3:]) for part in (start, end))


def closed_until(windows: tuple, now: datetime, zone: Optional[tzinfo]) -> Optional[datetime]:
    """None while one of `windows` is open at the aware time `now` (or none is set: every hour); else when the
    next one opens, aware in `zone`. Read on the zone's wall clock (a window crossing midnight is open from its
    start to the end of the day and from midnight to its end)."""
    if not windows:
        return None
    wall = in_zone(now, zone).replace(tzinfo=None)
    minute = wall.hour * 60 + wall.minute
    spans = [window_minutes(window) for window in windows]
    if any(start <= minute < end if start < end else (minute >= start or minute < end) for start, end in spans):
        return None
    today = datetime.combine(wall.date(), datetime.min.time())
    opens = min(today + timedelta(minutes=start, days=0 if start > minute else 1) for start, _ in spans)
    return opens.replace(tzinfo=zone) if zone is not None else opens.astimezone()


def open_seconds_for(work: float, windows: tuple, now: datetime, zone: Optional[tzinfo]) -> float:
    """Seconds from the aware time `now` until `work` seconds of crawling are done when it goes on only
    within `windows` (none: every hour, `work` itself): the closed hours it waits through are counted.
    Walked window by window, for at most a year of them."""
    if not windows:
        return work
    at, left = in_zone(now, zone), work
    for _ in range(2 * 366 * max(1, len(windows))):
        opens = closed_until(windows, at, zone)
        if opens is not None:
            at = opens
            continue
        closes = _closes_after(windows, at, zone)
        span = (closes - at).total_seconds()
        if span >= left:
            return (at - now).total_seconds() + left
        at, left = closes, left - span
    return (at - now).total_seconds() + left


def _closes_after(windows: tuple, at: datetime, zone: Optional[tzinfo]) -> datetime:
    """When the crawl hours open at the aware time `at` close: the end of the window open then, and of any
    window open at that end (windows that touch or overlap are one span)."""
    wall = in_zone(at, zone).replace(tzinfo=None, second=0, microsecond=0)
    for _ in range(2 * len(windows) + 2):
        end = _open_window_end(windows, wall)
        if end is None:
            break
        wall = end
    return wall.replace(tzinfo=zone) if zone is not None else wall.astimezone()


def _open_window_end(windows: tuple, wall: datetime) -> Optional[datetime]:
    """The latest end of the windows open at the naive wall time `wall`, None when none is."""
    minute, today = wall.hour * 60 + wall.minute, datetime.combine(wall.date(), datetime.min.time())
    ends = []
    for start, end in (window_minutes(window) for window in windows):
        if start < end and start <= minute < end:
            ends.append(today + timedelta(minutes=end))
        elif start > end and minute >= start:            # crossing midnight, before it: ends tomorrow
            ends.append(today + timedelta(days=1, minutes=end))
        elif start > end and minute < end:               # crossing midnight, after it: ends today
            ends.append(today + timedelta(minutes=end))
    return max(ends) if ends else None
