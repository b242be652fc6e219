"""The calendar (batchd/schedule.py): BATCH_SCHEDULE's next time in BATCH_TIMEZONE from batch dates on a store's
clock, the settings' checks, and CRAWL_HOURS' windows, without a store or a real hour waited."""
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from batchd.config import Settings, coerce, parse_hosts, validate
from batchd.errors import ConfigError
from batchd.model import BatchRecord
from batchd.schedule import closed_until, due_text, next_due, open_seconds_for, which_rule

PARIS = ZoneInfo("Europe/Paris")


class StoreClock:
    """A store's clock zone, as BatchStore.clock_zone gives it."""

    def __init__(self, zone):
        self.zone = zone

    def clock_zone(self):
        return self.zone


def scheduled(expression, opened, store_zone=timezone.utc, zone="Europe/Paris"):
    settings = Settings(BATCH_SCHEDULE=expression, BATCH_TIMEZONE=zone)
    return next_due(BatchRecord(id=1, batch_date=opened), settings, StoreClock(store_zone))


@pytest.mark.parametrize("expression, opened, due", [
    # Monday 03:00 in Paris is 02:00 UTC in winter: a batch opened on Monday at 02:00:05 UTC waits a week.
    ("0 3 * * mon", datetime(2026, 12, 7, 2, 0, 5), datetime(2026, 12, 14, 2, 0)),
    ("0 3 * * mon", datetime(2026, 12, 6, 12, 0), datetime(2026, 12, 7, 2, 0)),
    # Across the spring change (29 March 2026): 03:00 on Monday 30 March is 01:00 UTC (summer time).
    ("0 3 * * mon", datetime(2026, 3, 28, 12, 0), datetime(2026, 3, 30, 1, 0)),
    ("@monthly", datetime(2026, 3, 15, 0, 0), datetime(2026, 3, 31, 22, 0)),     # 1 April 00:00 CEST
    # 02:30 does not exist on 29 March: read with the offset before the change (01:30 UTC), once.
    ("30 2 * * *", datetime(2026, 3, 28, 12, 0), datetime(2026, 3, 29, 1, 30)),
    # 02:30 happens twice on 25 October: it opens at the first (00:30 UTC), and next on the 26th.
    ("30 2 * * *", datetime(2026, 10, 24, 12, 0), datetime(2026, 10, 25, 0, 30)),
    ("30 2 * * *", datetime(2026, 10, 25, 0, 30, 5), datetime(2026, 10, 26, 1, 30)),
    ("@hourly", datetime(2026, 12, 7, 10, 59, 59), datetime(2026, 12, 7, 11, 0)),
])
def test_a_schedule_names_the_next_time_after_the_batch_in_its_zone(expression, opened, due):
    assert scheduled(expression, opened) == due


def test_batch_dates_on_a_store_clock_of_another_zone_are_read_in_it():
    """A MySQL server at UTC+08:00: its NOW() of 10:00 is 02:00 UTC, 03:00 in Paris."""
    shanghai = timezone(timedelta(hours=8))
    assert scheduled("0 3 * * *", datetime(2026, 12, 7, 9, 0), shanghai) == datetime(2026, 12, 7, 10, 0)
    assert scheduled("0 3 * * *", datetime(2026, 12, 7, 10, 0), shanghai) == datetime(2026, 12, 8, 10, 0)
    settings = Settings(BATCH_SCHEDULE="0 3 * * *", BATCH_TIMEZONE="Europe/Paris")
    assert due_text(BatchRecord(id=1, batch_date=datetime(2026, 12, 7, 9, 0)), settings,
                    StoreClock(shanghai)) == "2026-12-07 03:00 Europe/Paris"


@pytest.mark.parametrize("written", ["@daily", "@weekly", "@hourly", "@monthly", "@yearly", "@annually",
                                     "@midnight", "0 3 * * mon", "*/15 1-5 * * *", " 0  3 *  * 1 "])
def test_a_schedule_of_five_fields_or_an_at_form_is_taken(written):
    assert Settings(BATCH_SCHEDULE=coerce("BATCH_SCHEDULE", written, "the environment")).BATCH_SCHEDULE


@pytest.mark.parametrize("written, why", [
    ("0 0 * * * *", ""), ("* * *", ""), ("@sometimes", ""), ("0 25 * * *", "out of range"),
    ("0 3 * * someday", "not acceptable")])
def test_a_bad_schedule_is_one_line_naming_it(written, why):
    with pytest.raises(ConfigError) as raised:
        coerce("BATCH_SCHEDULE", written, "config file /etc/batchd/batchd.toml")
    message = str(raised.value)
    assert message.startswith(f"setting BATCH_SCHEDULE in config file /etc/batchd/batchd.toml: {written!r} is not "
                              "a cron expression of 5 fields") and why in message and "\n" not in message


def test_a_bad_zone_is_one_line_naming_it():
    with pytest.raises(ConfigError, match=r"^setting BATCH_TIMEZONE in settings: 'Europe/Atlantis' is no time zone"):
        validate(Settings(BATCH_TIMEZONE="Europe/Atlantis"))


def test_the_schedule_wins_over_an_interval_and_says_so():
    assert which_rule(Settings()) == "batches open every 7 day(s) (BATCH_INTERVAL)"
    assert which_rule(Settings(BATCH_SCHEDULE="@daily", BATCH_TIMEZONE="UTC")) == \
        "batches open at '@daily' in UTC (BATCH_SCHEDULE)"
    assert which_rule(Settings(BATCH_SCHEDULE="@daily", BATCH_INTERVAL=2)) == (
        "batches open at '@daily' in the machine's time zone (BATCH_SCHEDULE); BATCH_INTERVAL=2 day is not used: "
        "BATCH_SCHEDULE wins")


def paris(hour, minute=0, day=7):
    return datetime(2026, 12, day, hour, minute, tzinfo=PARIS)


@pytest.mark.parametrize("windows, at, opens", [
    (("01:00-06:00",), paris(3), None),
    (("01:00-06:00",), paris(6), paris(1, day=8)),                 # the end is not in the window
    (("22:00-04:00",), paris(23, 30), None),                       # crossing midnight: open before it...
    (("22:00-04:00",), paris(3, 59), None),                        # ... and after it
    (("22:00-04:00",), paris(12), paris(22)),
    (("22:00-04:00", "12:30-13:00"), paris(12), paris(12, 30)),    # the earliest window to open
    (("00:00-24:00",), paris(12), None),
])
def test_crawl_hours_say_when_a_closed_window_opens(windows, at, opens):
    assert closed_until(windows, at, PARIS) == opens


def test_work_within_crawl_hours_counts_the_closed_hours_it_waits_through():
    at = paris(12)
    assert open_seconds_for(3600, (), at, PARIS) == 3600
    assert open_seconds_for(3600, ("22:00-04:00",), at, PARIS) == 11 * 3600         # 10 h closed, then 1 h
    assert open_seconds_for(8 * 3600, ("22:00-04:00",), at, PARIS) == 36 * 3600     # 6 h a night: two nights
    assert open_seconds_for(8 * 3600, ("22:00-24:00", "00:00-04:00"), at, PARIS) == 36 * 3600   # touching: one


@pytest.mark.parametrize("written", ['["25:00-04:00"]', '"01:00-01:00"', '["1:00-4:00"]', '[4]', '{"a": 1}'])
def test_bad_crawl_hours_are_one_line_naming_them(written):
    with pytest.raises(ConfigError, match=r"^setting CRAWL_HOURS in the environment: .* is not"):
        coerce("CRAWL_HOURS", written, "the environment")


def test_a_hosts_own_crawl_hours_are_a_term_of_its_table():
    hosts = parse_hosts({"partner.example": {"crawl_hours": ["22:00-04:00"]}, "*.example": {"crawl_hours": []}},
                        "config file f")
    assert hosts == {"partner.example": {"crawl_hours": ("22:00-04:00",)}, "*.example": {"crawl_hours": ()}}
    with pytest.raises(ConfigError, match=r'^config file f: \[hosts."partner.example"\] crawl_hours: \'22-4\' is not'):
        parse_hosts({"partner.example": {"crawl_hours": "22-4"}}, "config file f")
