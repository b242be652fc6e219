"""`batchd status` tells the truth after a batch, on every store: a finished batch shows nothing unflushed
(whatever a snapshot taken before its last flush says), its average rate from its opening to its close and no
ETA; a running batch that no supervised master samples has a rate since its opening, and one that is sampled
has its rate up to the tally as read now; `--history` shows a 0 as 0."""
import json
import re
import time
from datetime import datetime, timedelta, timezone

import pytest

from batchd.cli.status_text import render_history, render_status
from batchd.hosts.crawl_hours import CrawlHours
from batchd.hosts.terms import HostTerms
from batchd.reporting.status import batch_pace, eta_through_hours, gather_history, gather_status
from batchd.reporting.why import gather_why
from batchd.reporting.snapshots import RATE_WINDOW
from batchd.service.lifecycle import StopFlag
from batchd.web.html import batch_calendar
from harness import make_master, next_batch, spider_factory
from spiders.seed import CrawlTask


def finished_batch(backend, site, urls):
    backend.create_tasks(urls)
    return next_batch(backend, spider_factory(backend, CrawlTask, SPIDER_MAX_RETRY_TIMES=0))


def runtime_of(backend):
    return CrawlTask(batch_store=backend.store(), settings=backend.settings()).runtime


def stale_snapshot(batch_id: int, settled: int, total: int) -> dict:
    """What a supervisor running the master and a worker published before the batch's last flush."""
    now = time.time()
    worker = {"name": "worker 1", "pid": 4242, "done": 3, "failed": 0, "items": 3, "tasks": 1, "unflushed": 5,
              "silent": 0.2}
    return {"role": "run", "host": "vm", "instance": "run", "pid": 4241, "updated": now - 1, "workers_alive": 1,
            "workers_wanted": 1, "master_alive": 1, "done": 3, "failed": 0, "items": 3, "unflushed": 7,
            "in_flight": 1, "rate": 2.0, "workers": json.dumps([worker]), "batch_id": batch_id,
            "batch_settled": settled, "batch_total": total, "batch_samples": json.dumps([[now - 2, settled]])}


def test_a_finished_batch_has_nothing_unflushed_its_average_rate_and_no_eta(backend, site):
    urls = [site.url(f"/page/{n}") for n in range(1, 4)] + [site.url("/status/404")]
    record = finished_batch(backend, site, urls)
    runtime = runtime_of(backend)
    runtime.backend.board.write_status("vm:run", {k: str(v) for k, v in stale_snapshot(record["id"], 3, 4).items()},
                                       30)
    status = gather_status(runtime)
    assert status["batch"]["is_done"] and status["tasks"]["settled"] == 4
    host, = status["hosts"]
    assert (status["unflushed"], host["unflushed"], host["workers"][0]["unflushed"]) == (0, 0, 0)
    seconds = (record["update_time"] - record["batch_date"]).total_seconds()
    assert status["rate_basis"] == "whole_batch" and status["rate_seconds"] == seconds
    assert status["rate"] == pytest.approx(4 / max(seconds, 1.0))
    assert status["eta_seconds"] is None
    text = render_status(status)
    assert "unflushed items 0" in text and ", 0 unflushed," in text
    rate_line, = [line for line in text.splitlines() if line.startswith("rate ")]
    assert rate_line.endswith("finished, no ETA") and "unknown" not in rate_line


def test_a_running_batch_no_master_samples_has_its_rate_since_it_opened(backend, site):
    finished_batch(backend, site, [site.url(f"/page/{n}") for n in range(1, 4)])
    backend.reopen_last_batch()            # as if its last tasks were still out: no supervisor publishes a thing
    backend.age_last_batch(hours=1)
    status = gather_status(runtime_of(backend))
    assert not status["batch"]["is_done"] and status["hosts"] == []
    assert status["rate_basis"] == "so_far"
    assert status["rate_seconds"] == pytest.approx(3600, abs=120)
    assert status["rate"] == pytest.approx(3 / status["rate_seconds"])
    rate_line, = [line for line in render_status(status).splitlines() if line.startswith("rate ")]
    assert rate_line.startswith("rate     0.0 tasks/s on average since it opened 1h0") and "ETA 0s" in rate_line


def test_the_rate_runs_to_the_tally_as_read_now():
    """Samples of the master a while ago, and the tally read now: the window ends now."""
    class Record:
        is_done = False
    now = time.time()
    samples = [(now - 20.0, 10), (now - 10.0, 20)]
    tasks = {"total": 100, "settled": 40, "done": 40}
    pace = batch_pace(Record(), tasks, samples, now, None)      # type: ignore[arg-type]
    assert (pace.basis, pace.as_of) == ("window", now)
    assert pace.rate == pytest.approx(30 / 20.0) and pace.seconds == pytest.approx(20.0)
    stale = [(now - 3 * RATE_WINDOW, 0), (now - 2 * RATE_WINDOW, 10)]     # the master went quiet long ago
    assert batch_pace(Record(), dict(tasks, settled=10), stale, now, None).rate == 0.0  # type: ignore[arg-type]


def test_history_shows_0_as_0_and_rates_to_one_decimal(backend, site):
    finished_batch(backend, site, [site.url("/status/404"), site.url("/status/404?again")])    # no item at all
    entry, = gather_history(runtime_of(backend), 5)
    assert (entry["done"], entry["failed"], entry["items"]) == (0, 2, 0)
    row = render_history([entry]).splitlines()[1].split()    # opened and closed take two words each
    assert row[7:12] == ["2", "0", "2", "2", "0"]             # opened with, done, failed, total, items
    assert re.fullmatch(r"(>=)?\d+\.\d/s", row[-1]), row


def test_status_and_the_dashboard_show_the_next_batchs_time_and_the_hosts_waiting(backend):
    """BATCH_SCHEDULE's next time in BATCH_TIMEZONE, and a host outside its crawl hours with when they open
    (hours closed now: they open in one to two hours)."""
    hour = datetime.now(timezone.utc).hour
    closed = f"{(hour + 2) % 24:02d}:00-{(hour + 3) % 24:02d}:00"
    backend.create_tasks(["http://night.example/1"])
    master, spider = make_master(backend, BATCH_SCHEDULE="0 3 * * mon", BATCH_TIMEZONE="Europe/Paris",
                                 BATCH_TASK_HOST_FIELD="url", HOSTS={"night.example": {"crawl_hours": [closed]}})
    master.patrol(StopFlag())
    status = gather_status(spider.runtime)
    due = status["next_batch"]["due"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d 03:00 Europe/Paris", due)
    assert datetime.strptime(due[:10], "%Y-%m-%d").weekday() == 0
    waiting, = status["hosts_waiting"]
    assert waiting["hosts"] == "night.example" and waiting["windows"] == [closed]
    assert timedelta(0) < datetime.fromisoformat(waiting["until"]) - datetime.now(timezone.utc) <= timedelta(hours=2)
    text = render_status(status)
    assert f"next     batch due {due} (BATCH_SCHEDULE '0 3 * * mon')" in text
    assert f"waiting  hosts night.example until {waiting['until']} (crawl hours {closed})" in text
    assert json.loads(json.dumps(status))["hosts_waiting"] == [waiting]
    assert gather_why(spider.runtime)["verdict"] == (
        f"1 task pending, hosts outside their crawl hours: night.example until {waiting['until']} (CRAWL_HOURS)")
    page = batch_calendar(status)
    assert f"Next batch due <b>{due}</b>" in page and "<td>night.example</td>" in page
    # The ETA: no sooner than the last host the master's claims left waiting may go on (its ledger's wait_until).
    hours, now = CrawlHours(HostTerms(), spider.runtime.settings), time.time()
    assert (eta_through_hours(hours, 60.0, now + 3600, now), eta_through_hours(hours, 60.0, 0.0, now)) == (3600, 60)
