"""The master's calendar (master/timing.py), on every store: BATCH_SCHEDULE opens one batch for the times missed,
waits for a batch still running, and CRAWL_HOURS holds a host's tasks outside its hours while the others go on.
The crawl hours are read on a clock the test sets; no real hour is waited."""
import logging
from datetime import datetime, timedelta, timezone

import pytest

from batchd.config import Settings
from batchd.errors import ConfigError
from batchd.master.timing import Timing
from batchd.service.lifecycle import StopFlag
from batchd.task import TaskState
from harness import make_master, stays_true, work_off

P, D, R = TaskState.PENDING, TaskState.DONE, TaskState.PROCESSING
NIGHT = {"night.example": {"crawl_hours": ["22:00-04:00"]}}


class Clock:
    """Unix time as the test sets it (CrawlHours' clock)."""

    def __init__(self, at: datetime):
        self.now = at.timestamp()

    def __call__(self) -> float:
        return self.now

    def set(self, at: datetime) -> None:
        self.now = at.timestamp()


def utc(hour: int) -> datetime:
    return datetime(2026, 12, 7, hour, 0, tzinfo=timezone.utc)


def patrol(master) -> bool:
    return master.patrol(StopFlag())


def states(backend) -> list:
    return [state for _, state in sorted(backend.states().items())]


def hourly_half_an_hour_off() -> str:
    """Every hour, at a minute half an hour from now: no scheduled time comes while the test runs."""
    return f"{(datetime.now().minute + 30) % 60} * * * *"


def test_times_missed_while_no_master_ran_open_one_batch(backend, caplog):
    backend.create_tasks(["http://x.invalid/1", "http://x.invalid/2"])
    with caplog.at_level(logging.WARNING, logger="batchd"):
        master, spider = make_master(backend, BATCH_SCHEDULE=hourly_half_an_hour_off(), BATCH_INTERVAL=3)
    assert "BATCH_INTERVAL=3 day is not used: BATCH_SCHEDULE wins" in caplog.text
    patrol(master)
    work_off(spider.runtime, {1: D, 2: D})
    assert patrol(master) is True and len(backend.records()) == 1      # closed; the next hour not come yet
    backend.age_last_batch(hours=5)               # five hourly times passed with no master
    patrol(master)
    work_off(spider.runtime, {1: D, 2: D})
    assert patrol(master) is True
    assert patrol(master) is True and len(backend.records()) == 2      # one batch for the five, none more
    last = spider.runtime.store.last_batch()
    assert timedelta(0) < master.timing.next_due(last) - last.batch_date <= timedelta(hours=1)


def test_a_batch_running_at_its_next_scheduled_time_goes_on_and_says_so(backend, caplog):
    backend.create_tasks(["http://x.invalid/1"])
    master, spider = make_master(backend, BATCH_SCHEDULE=hourly_half_an_hour_off())
    patrol(master)
    backend.age_last_batch(hours=2)
    with caplog.at_level(logging.INFO, logger="batchd"):
        patrol(master)
    assert "is still running at the next batch's time" in caplog.text and "BATCH_SCHEDULE" in caplog.text
    assert "ALERT overdue" in caplog.text and len(backend.records()) == 1
    work_off(spider.runtime, {1: D})
    assert patrol(master) is True
    patrol(master)                                 # due since: it opens now that the last one finished
    assert len(backend.records()) == 2


def test_a_hosts_tasks_wait_for_its_crawl_hours_while_the_others_go_on(backend, caplog):
    backend.create_tasks([f"http://{host}.example/{i}" for host in ("night", "day") for i in range(3)])
    master, spider = make_master(backend, BATCH_TASK_HOST_FIELD="url", BATCH_TIMEZONE="UTC", HOSTS=NIGHT,
                                 STALL_ALERT_SECONDS=0.05)
    clock = master.timing.hours.clock = Clock(utc(12))
    with caplog.at_level(logging.INFO, logger="batchd"):
        patrol(master)
        assert states(backend) == [P, P, P, R, R, R]                # night.example's wait in the table
        work_off(spider.runtime, {task_id: D for task_id in range(4, 7)})
        # Its tasks all wait: the batch is neither closed nor stalled, and no claim is made at each patrol.
        stays_true(lambda: patrol(master) is False, 0.3, message="the batch stays open while its tasks wait")
    assert "night.example until 2026-12-07 22:00 UTC" in caplog.text and "ALERT stall" not in caplog.text
    assert not backend.records()[-1]["is_done"] and states(backend) == [P, P, P, D, D, D]
    assert master.timing.eta_text(3, 1.0) == "10h00m"                # no sooner than 22:00
    assert master.timing.hosts_wait_until() == utc(22)              # what the ledger tells `batchd status`

    clock.set(utc(23))                             # its hours open: its tasks are claimed at the next patrol
    patrol(master)
    assert states(backend) == [R, R, R, D, D, D]
    work_off(spider.runtime, {task_id: D for task_id in range(1, 4)})
    assert patrol(master) is True


def test_outside_the_global_crawl_hours_nothing_is_claimed_and_a_finished_batch_still_closes(backend):
    backend.create_tasks(["http://x.invalid/1", "http://x.invalid/2"])
    master, spider = make_master(backend, CRAWL_HOURS=["01:00-06:00"], BATCH_TIMEZONE="UTC")
    clock = master.timing.hours.clock = Clock(utc(12))
    assert patrol(master) is False and states(backend) == [P, P]
    assert master.timing.eta_text(2, 1.0) == "13h00m"             # 13 h closed, then 2 s of work
    clock.set(utc(2))
    patrol(master)
    assert states(backend) == [R, R]
    clock.set(utc(7))                              # closed again while its tasks are in flight: they finish
    work_off(spider.runtime, {1: D, 2: D})
    assert patrol(master) is True                 # nothing was left to wait: the batch closes


def test_a_worker_gives_back_unstarted_a_task_whose_hosts_hours_closed(backend):
    backend.create_tasks(["http://night.example/1", "http://day.example/1"])
    master, spider = make_master(backend, BATCH_TASK_HOST_FIELD="url", BATCH_TIMEZONE="UTC", HOSTS=NIGHT)
    master.timing.hours.clock = Clock(utc(23))
    patrol(master)                                 # both claimed, the night's hours open
    worker = spider.runtime.worker()
    worker.hours.clock = Clock(utc(5))             # and now closed
    leases = spider.runtime.backend.leases
    taken = [leases.lease("test-worker", 60) for _ in range(2)]
    assert [worker._outside_hours(lease) for lease in taken] == [True, False]
    master.timing.hours.clock = Clock(utc(5))
    patrol(master)                                 # the night's is the master's again: pending, not claimed
    assert states(backend) == [P, R] and leases.leased_count() == 1 and leases.pending_count() == 0


def test_a_hosts_own_hours_need_the_host_column():
    with pytest.raises(ConfigError, match=r'^\[hosts."night.example"\] crawl_hours: .* need BATCH_TASK_HOST_FIELD'):
        Timing(Settings(HOSTS=NIGHT), store=None, host_field=None)


def test_without_crawl_hours_the_eta_is_the_work_left_at_the_rate():
    timing = Timing(Settings(), store=None, host_field=None)
    assert (timing.eta_text(0, 0.0), timing.eta_text(10, 0.0), timing.eta_text(150, 10.0)) == ("0s", "unknown", "0m15s")
