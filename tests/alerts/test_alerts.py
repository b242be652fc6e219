"""Alerts (batchd/alerts.py) received on a local webhook (tests/httpserver.py's /hook): a stall once the
workers are stopped mid-batch, the failure ratio of a batch of failing URLs, an overdue batch (once per
ALERT_REPEAT_SECONDS, not at every patrol), items dumped to FAILED_ITEMS_PATH, a batch closed with quality
flags (one alert naming the first few); the failure ratio judged from 100 settled tasks, and no stall while paused; a webhook nobody answers holds no patrol up and is
logged once; ALERT_WEBHOOK is checked like every setting."""
import logging
import socket
import time

import pytest

from batchd.alerts.alerts import Alerts
from batchd.config import Settings, load_settings
from batchd.errors import ConfigError
from batchd.service.lifecycle import StopFlag
from batchd.model import Progress
from batchd.task import TaskState
from harness import (InProcessBatch, RefusingMemoryStore, batch_done, make_master, next_batch, spider_factory,
                     stays_true, wait_for)
from httpserver import TestSite
from servers import spare_port
from spiders.seed import CrawlTask
from spiders.shop import ShopTask
from supervised import slow_urls
from taskdb import MemoryBackend


def alerts_of(site, kind):
    return [body for body in site.received() if body["kind"] == kind]


def alert_lines(caplog, kind):
    """The messages of the WARNING lines of this kind of alert."""
    prefix = f"ALERT {kind}: "
    return [r.getMessage()[len(prefix):] for r in caplog.records if r.getMessage().startswith(prefix)]


def test_workers_stopped_mid_batch_raise_one_stall_alert(backend, site, caplog):
    backend.create_tasks(slow_urls(site, 30, seconds=0.1))
    settings = dict(STALL_ALERT_SECONDS=1, ALERT_WEBHOOK=site.url("/hook"), SPIDER_THREAD_COUNT=1)
    with caplog.at_level(logging.INFO, logger="batchd"):
        with InProcessBatch(spider_factory(backend, CrawlTask, **settings)) as batch:
            wait_for(lambda: list(backend.states().values()).count(TaskState.DONE) >= 2, message="two tasks done")
            assert alerts_of(site, "stall") == []
            batch.stop("worker")
            stall, = wait_for(lambda: alerts_of(site, "stall"), message="the stall alert on the webhook")
            stays_true(lambda: len(alerts_of(site, "stall")) == 1, 1.0, message="one stall alert per batch")
            namespace = batch.loops[0][3].leases.namespace           # (the master's)
    assert (stall["namespace"], stall["batch"], stall["total"], stall["host"]) == (namespace, 1, 30,
                                                                                 socket.gethostname())
    assert 2 <= stall["settled"] < 30 and stall["stalled_seconds"] >= 1 and stall["time"].endswith("+00:00")
    assert stall["message"].startswith("batch 1 has settled no task for ")
    assert alert_lines(caplog, "stall") == [stall["message"]]


def test_a_batch_of_failing_urls_raises_the_failure_alert_at_its_close(backend, site, caplog):
    backend.create_tasks([site.url("/page/1")] + [site.url(f"/status/500?n={n}") for n in range(4)])
    with caplog.at_level(logging.WARNING, logger="batchd"):
        with InProcessBatch(spider_factory(backend, CrawlTask, SPIDER_MAX_RETRY_TIMES=0,
                                           ALERT_WEBHOOK=site.url("/hook"))):
            wait_for(lambda: batch_done(backend), message="the batch closed")
            failures, = wait_for(lambda: alerts_of(site, "failures"), message="the failure alert")
    assert (failures["batch"], failures["done"], failures["failed"], failures["ratio"]) == (1, 1, 4, 0.8)
    assert alert_lines(caplog, "failures") == [
        "batch 1: 4 of 5 settled tasks failed (80%, above FAILURE_ALERT_RATIO=0.2)"]


def test_a_flagged_batch_raises_one_quality_alert_naming_its_first_flags(backend, site, caplog):
    with TestSite() as captcha, TestSite() as odd:
        captcha.captcha, odd.price_text = True, "N/A"
        backend.create_tasks([s.url(f"/shop/{n}") for s in (site, captcha, odd) for n in range(1, 13)])
        with caplog.at_level(logging.WARNING, logger="batchd"):
            # the captcha site's pages are flagged at the close, not held (QUALITY_BLOCK_HOLD: tests/quality/test_block_pages.py)
            record = next_batch(backend, spider_factory(backend, ShopTask, ALERT_WEBHOOK=site.url("/hook"),
                                                        QUALITY_MIN_COVERAGE={"price": 0.9}, QUALITY_BLOCK_HOLD=False))
        assert record["outcome"] == "flagged"
        alert, = wait_for(lambda: alerts_of(site, "quality"), message="the quality alert on the webhook")
        captcha_host, odd_host = (s.url("/").split("/")[2] for s in (captcha, odd))
    # Three flags (the captcha site's soft block and marker, the odd site's price floor): each named.
    assert (alert["batch"], alert["flags"], alert["kinds"]) == (1, 3, {"soft_block": 1, "block_marker": 1,
                                                                       "coverage_floor": 1})
    assert {(f["host"], f["kind"]) for f in alert["first"]} == {(captcha_host, "soft_block"),
                                                                (captcha_host, "block_marker"),
                                                                (odd_host, "coverage_floor")}
    assert alert["message"].startswith("batch 1 closed with 3 quality flags: ") and "more" not in alert["message"]
    assert alert_lines(caplog, "quality") == [alert["message"]]
    assert alerts_of(site, "failures") == []


def test_a_quality_alert_names_three_flags_escaped_and_cut(site):
    hostile = "evil\x1b[2J\n" + "x" * 500
    flags = [{"host": hostile, "kind": "coverage_drop", "field": "t.title\r", "now": 0.1, "before": 0.9,
              "message": f"{hostile}: t.title has a value in 10% of its items"} for _ in range(5)]
    alerts = Alerts(Settings(ALERT_WEBHOOK=site.url("/hook"), ALERT_WEBHOOK_FORMAT="dingtalk"), "ns")
    alerts.quality_flagged(7, flags)
    alerts.close()
    body, = wait_for(lambda: site.received(), message="the chat message")
    text = body["text"]["content"]
    assert text.startswith("batchd ns@") and "ALERT quality: batch 7 closed with 5 quality flags: " in text
    assert text.endswith("(+2 more: batchd quality --batch 7)")
    assert "\x1b" not in text and "\n" not in text and "\r" not in text and text.count("\\x1b") == 3
    assert len(text) < 3 * 200 + 200


def test_an_overdue_batch_alerts_once_not_at_every_patrol(backend, site, caplog):
    backend.create_tasks(["http://x.invalid/1"])
    master, _ = make_master(backend, BATCH_INTERVAL=1, ALERT_WEBHOOK=site.url("/hook"))
    master.patrol(StopFlag())
    backend.age_last_batch(days=2)
    with caplog.at_level(logging.WARNING, logger="batchd"):
        for _ in range(3):
            master.patrol(StopFlag())
    overdue, = wait_for(lambda: alerts_of(site, "overdue"), message="the overdue alert")
    master.alerts.close()
    assert len(alerts_of(site, "overdue")) == 1 and len(alert_lines(caplog, "overdue")) == 1
    assert overdue["batch"] == 1 and "is overdue: the next was due at" in overdue["message"]
    assert len(backend.records()) == 1


def test_the_masters_patrol_raises_the_late_alert_from_its_rate(backend, site, caplog):
    """Hourly batches: the next is due within the hour. One task of a hundred settled in the last 100 s:
    99 left at 0.01/s need 2.75 hours, and the patrol says so, once."""
    from harness import work_off
    backend.create_tasks([f"http://x.invalid/{n}" for n in range(1, 101)])
    master, spider = make_master(backend, BATCH_INTERVAL=1, BATCH_INTERVAL_UNIT="hour",
                                 ALERT_WEBHOOK=site.url("/hook"))
    master.patrol(StopFlag())
    work_off(spider.runtime, {1: TaskState.DONE})
    master.rate.samples.clear()
    master.rate.samples.append((time.monotonic() - 100, 0))     # the patrols of the last 100 s, in short
    with caplog.at_level(logging.WARNING, logger="batchd"):
        master.patrol(StopFlag())
        master.patrol(StopFlag())
    late, = wait_for(lambda: alerts_of(site, "late"), message="the late alert")
    master.alerts.close()
    assert late["batch"] == 1 and len(alert_lines(caplog, "late")) == 1
    assert late["left"] == 99 and 0.005 < late["rate"] < 0.02


def test_items_dumped_to_the_failed_items_file_raise_an_alert(failed_items_path, site, caplog):
    backend = MemoryBackend(failed_items_path)
    store = backend.create_tasks([site.url(f"/page/{n}") for n in range(1, 4)], store_class=RefusingMemoryStore)
    store.down.set()             # the database takes no item: after ITEM_FLUSH_GIVE_UP they go to the file
    factory = spider_factory(backend, CrawlTask, ITEM_FLUSH_GIVE_UP=0.5, ALERT_WEBHOOK=site.url("/hook"))
    with caplog.at_level(logging.WARNING, logger="batchd"):
        with InProcessBatch(factory):
            dumped = wait_for(lambda: alerts_of(site, "items_dumped"), message="the items_dumped alert")
            store.down.clear()
            wait_for(lambda: batch_done(backend), message="the batch closed")
    assert dumped[0]["batch"] == 1 and dumped[0]["path"] == failed_items_path and dumped[0]["items"] >= 1
    assert alert_lines(caplog, "items_dumped")[0].startswith(f"batch 1: {dumped[0]['items']} items written to "
                                                             f"{failed_items_path} instead of the database (")


@pytest.mark.parametrize("webhook", ["refused", "silent"])
def test_a_dead_webhook_holds_no_patrol_up_and_is_logged_once(failed_items_path, caplog, webhook):
    """Nothing listens (each POST refused at once), or a listener never answers (each POST waits its timeout):
    five alerts, one a patrol (ALERT_REPEAT_SECONDS=0), and the patrols go on at their pace."""
    with socket.socket() as listener:
        if webhook == "silent":
            listener.bind(("127.0.0.1", 0))
            listener.listen(8)           # connections complete in the kernel's backlog, and are never answered
            port = listener.getsockname()[1]
        else:
            port = spare_port()
        backend = MemoryBackend(failed_items_path)
        backend.create_tasks(["http://x.invalid/1"])
        master, _ = make_master(backend, BATCH_INTERVAL=1, ALERT_REPEAT_SECONDS=0,
                                ALERT_WEBHOOK=f"http://127.0.0.1:{port}/hook/secret-token")
        master.patrol(StopFlag())
        backend.age_last_batch(days=2)
        with caplog.at_level(logging.INFO, logger="batchd"):
            started = time.monotonic()
            for _ in range(5):
                master.patrol(StopFlag())
            # A patrol that waited for a POST would wait its POST_TIMEOUT; five on the memory store take a few
            # ms, and on a busy machine less than a second or two.
            assert time.monotonic() - started < 2.0
            if webhook == "refused":
                master.alerts.close()       # every POST tried
                assert len(alert_lines(caplog, "overdue")) == 5
                failing = [r.getMessage() for r in caplog.records if "alert webhook" in r.getMessage()]
                assert len(failing) == 1 and failing[0].startswith(f"alert webhook http://127.0.0.1:{port}/... fails")
            else:
                master.alerts.sender.close(timeout=0)


def test_failures_are_judged_from_100_settled_tasks_and_a_pause_is_no_stall(caplog):
    alerts = Alerts(Settings(STALL_ALERT_SECONDS=0.1), "ns")
    with caplog.at_level(logging.WARNING, logger="batchd"):
        alerts.progress_checked(1, Progress(total=500, done=60, failed=39, pending=401, processing=0), paused=False)
        assert alert_lines(caplog, "failures") == []                  # 39% of 99: too few to judge yet
        alerts.progress_checked(1, Progress(total=500, done=60, failed=40, pending=400, processing=0), paused=False)
        assert alert_lines(caplog, "failures") == ["batch 1: 40 of 100 settled tasks failed (40%, above "
                                                   "FAILURE_ALERT_RATIO=0.2)"]
        stuck = Progress(total=500, done=60, failed=40, pending=400, processing=0)

        def check(paused):
            alerts.progress_checked(1, stuck, paused)
            return alert_lines(caplog, "stall")
        stays_true(lambda: check(paused=True) == [], 0.5, message="no stall alert while paused")
        assert wait_for(lambda: check(paused=False), message="a stall counted from the resume")


@pytest.mark.parametrize("url", ["ftp://example.com/hook", "example.com/hook", "http://"])
def test_alert_webhook_must_be_an_http_url(url):
    with pytest.raises(ConfigError, match="setting ALERT_WEBHOOK: .* may hold only an http:// or https:// URL"):
        load_settings(overrides={"ALERT_WEBHOOK": url}, environ={})
