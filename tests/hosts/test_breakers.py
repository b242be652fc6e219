"""A dead host is found and spared (download/middlewares/breaker.py, the HostBreakers port of
hosts/breakers.py and of Redis): the breaker's states with a clock of the test's own, against the
one-process port and the Redis one alike, then a real worker with a dead host beside a fast one."""
import logging
import uuid
from datetime import datetime, timezone

import pytest

from batchd.hosts.breakers import BreakerPhase, LocalHostBreakers
from batchd.backends.mysql_redis.redis_client import connect_redis
from batchd.backends.mysql_redis.redis_hosts import RedisHostBreakers
from batchd.config import Settings
from batchd.download.chain import NotYet
from batchd.download.middlewares.breaker import HostBreakerMiddleware, down_reason, host_of
from batchd.http import Request, RequestFailed
from batchd.alerts.alerts import Alerts
from batchd.task import TaskState
from harness import Counter, InProcessBatch, retrying_downloader, wait_for
from httpserver import DeadHost
from spiders.seed import CrawlTask

START = 1_800_000_000.0          # the test's Unix time: 2027-01-15T08:00:00Z


class Clock:
    """Unix seconds that move only when the test (or a fetch waiting out a NotYet) says so."""

    def __init__(self):
        self.now = START

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds
        return False


@pytest.fixture(params=["local", "redis"])
def breakers(request, redis_url):
    if request.param == "local":
        yield LocalHostBreakers()
        return
    client = connect_redis(redis_url)
    namespace = "t" + uuid.uuid4().hex[:12]
    yield RedisHostBreakers(redis_url, namespace, client)
    keys = list(client.scan_iter(match=f"{namespace}:*"))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture
def made():
    downloaders = []
    yield downloaders
    for downloader in downloaders:
        downloader.close()


def breaker_of(breakers, clock, **options):
    return HostBreakerMiddleware(breakers, **{"failures": 3, "probe": 1.0, "probe_max": 4.0, "give_up": 100.0,
                                              "probe_seconds": 10.0, "clock": clock, **options})


def downloader_with(made, breaker, clock, retries=0, stats=None):
    downloader = retrying_downloader([breaker], max_retry_times=retries, clock=clock, sleep=clock.sleep, timeout=2.0)
    downloader.chain.middlewares[0].stats = stats or Counter()
    made.append(downloader)
    return downloader


def fetch(downloader, url):
    """'ok', the wait of the NotYet it met, or the reason it failed with."""
    try:
        downloader.fetch(Request(url), park=True)
        return "ok"
    except NotYet as wait:
        return round(wait.after, 3)
    except RequestFailed as failed:
        return failed.reason


def test_a_host_failing_n_times_in_a_row_opens_and_its_requests_wait(site, breakers, made):
    clock = Clock()
    downloader = downloader_with(made, breaker_of(breakers, clock), clock)
    site.mood = "503"
    url = site.url("/moody/1")
    assert [fetch(downloader, url) for _ in range(2)] == ["HTTP 503", "HTTP 503"]
    assert fetch(downloader, url) == 1.0, "the third failure opens the breaker: the request waits for the probe"
    clock.now += 0.5
    assert fetch(downloader, site.url("/moody/2")) == 0.5, "every request to the host waits"
    assert site.hits("/moody/1") == 3 and site.hits("/moody/2") == 0
    state = breakers.look(host_of(Request(url)))
    assert (state.phase, state.since, state.failures, state.next_probe) == (BreakerPhase.OPEN, START, 3, START + 1)
    assert fetch(downloader, site.url("/page/1").replace("127.0.0.1", "localhost")) == "ok", "another host goes"


def test_probes_one_at_a_time_double_their_wait_up_to_the_cap_and_an_answer_closes(site, breakers, made):
    clock = Clock()
    downloader = downloader_with(made, breaker_of(breakers, clock), clock)
    other_worker = downloader_with(made, breaker_of(breakers, clock), clock)   # it never saw the host fail
    site.mood = "503"
    url, host = site.url("/moody/1"), host_of(Request(site.url("/")))
    for _ in range(3):
        fetch(downloader, url)
    waits = []
    for _ in range(4):
        clock.now = breakers.look(host).next_probe
        waits.append(fetch(downloader, url))                 # the probe fails: the next one is further off
    assert waits == [2.0, 4.0, 4.0, 4.0] and site.hits("/moody/1") == 3 + 4
    clock.now = breakers.look(host).next_probe
    assert breakers.step(host, "claim", clock.now, 10.0)[1] == 1, "another worker's probe goes"
    assert fetch(downloader, url) == 1.0, "one probe at a time: the others look again in a second"
    assert site.hits("/moody/1") == 3 + 4
    breakers.step(host, "release", clock.now)             # (that probe did not go after all)
    site.mood = "ok"
    clock.now += 1.0
    assert fetch(downloader, url) == "ok" and breakers.look(host) is None, "the probe answered: closed"
    assert fetch(other_worker, url) == "ok" and fetch(downloader, url) == "ok"


def test_a_block_page_opens_the_breaker_and_a_probes_page_is_judged_before_it_closes(site, breakers, made):
    """QUALITY_BLOCK_HOLD (worker/task_run.py judges each page after its callback): a block page holds its host as
    failures would; a probe's 2xx page keeps the breaker probing until judged, a block page again fails the probe
    (the wait doubles, `since` stays for HOST_DOWN_GIVE_UP), a good one closes it."""
    clock = Clock()
    breaker = breaker_of(breakers, clock).judge_pages()
    downloader = downloader_with(made, breaker, clock)
    url, host = site.url("/page/1"), host_of(Request(site.url("/")))
    page = downloader.fetch(Request(url), park=True)
    breaker.page_judged(page, None)
    assert breakers.look(host) is None, "a page that is no block page changes nothing"
    breaker.page_judged(page, "a block marker")
    state = breakers.look(host)
    assert (state.phase, state.since, state.failures, state.next_probe) == (BreakerPhase.OPEN, START, 1, START + 1)
    assert fetch(downloader, url) == 1.0, "the host's requests wait for the probe"
    clock.now += 1.0
    probe = downloader.fetch(Request(url), park=True)
    assert breakers.look(host).phase is BreakerPhase.PROBING, "answered, but not judged yet"
    assert fetch(downloader, url) == 1.0
    breaker.page_judged(probe, "a block marker")
    state = breakers.look(host)
    assert (state.phase, state.since, state.failures, state.next_probe) == (BreakerPhase.OPEN, START, 2,
                                                                            START + 1 + 2)
    clock.now = state.next_probe
    probe = downloader.fetch(Request(url), park=True)
    breaker.page_judged(probe, None)
    assert breakers.look(host) is None and fetch(downloader, url) == "ok", "a good probe's page closes it"


def test_failures_while_the_breaker_opens_or_is_open_charge_no_retry(site, breakers, made):
    clock, stats = Clock(), Counter()
    downloader = downloader_with(made, breaker_of(breakers, clock, failures=2), clock, retries=5, stats=stats)
    site.mood = "503"

    def heal_after_three_probes(seconds):
        clock.now += seconds
        if site.hits("/moody/1") >= 2 + 3:
            site.mood = "ok"
        return False
    downloader.sleep = heal_after_three_probes
    assert downloader.fetch(Request(site.url("/moody/1"))).status_code == 200
    assert site.hits("/moody/1") == 2 + 3 + 1
    assert stats.counts.get("retry/count") == 1, "only the failure before the breaker opened was a retry"
    assert breakers.look(host_of(Request(site.url("/")))) is None


def test_retry_after_holds_the_whole_host_off(site, breakers, made):
    clock = Clock()
    downloader = downloader_with(made, breaker_of(breakers, clock, probe_max=60.0), clock)
    assert fetch(downloader, site.url("/flaky/a?fail=1&status=429&retry_after=30")) == "HTTP 429"
    assert fetch(downloader, site.url("/page/1")) == 30.0, "another page of the host waits too"
    clock.now += 30
    assert fetch(downloader, site.url("/page/1")) == "ok" and site.hits("/page/1") == 1
    assert fetch(downloader, site.url("/flaky/b?fail=1&status=503&retry_after=3600")) == "HTTP 503"
    assert fetch(downloader, site.url("/page/2")) == 60.0, "held off HOST_BREAKER_PROBE_MAX at most"


def test_a_host_down_past_give_up_fails_its_requests_at_once_with_one_reason_one_alert(site, breakers, made,
                                                                                          caplog):
    clock = Clock()
    alerts = Alerts(Settings(), "breakers")
    workers = [breaker_of(breakers, clock, failures=1, give_up=3.0, alerts=alerts) for _ in range(2)]
    first, second = (downloader_with(made, breaker, clock) for breaker in workers)
    for breaker in workers:
        breaker.batch_started(7)
    site.mood = "503"
    assert fetch(first, site.url("/moody/1")) == 1.0
    clock.now += 3.5                       # probes at +1 and +3 were due; none went: the host is down
    host = host_of(Request(site.url()))
    reason = down_reason(host, START, 3.0)
    assert reason == f"host {host} down since 2027-01-15T08:00:00Z (HOST_DOWN_GIVE_UP=3 s)"
    with caplog.at_level(logging.WARNING):
        got = [fetch(downloader, site.url(f"/moody/{n}")) for n in range(2, 8) for downloader in (first, second)]
    assert set(got) == {reason}, got
    assert sum(site.hits(f"/moody/{n}") for n in range(1, 8)) == 1 + 1 + 1, \
        "the failure that opened the breaker, one probe, and the one request of the second worker before it knew"
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and "ALERT host_down" in said[0] and reason in said[0], said
    assert breakers.states(10)[host].phase is BreakerPhase.DOWN
    for breaker in workers:
        breaker.batch_started(8)           # a new batch: said once again
    with caplog.at_level(logging.WARNING):
        caplog.clear()
        fetch(second, site.url("/moody/9"))
    assert len([r for r in caplog.records if "ALERT host_down" in r.getMessage()]) == 1


class CountedBreakers(LocalHostBreakers):
    """The one-process port, counting the calls a worker makes to it (each a round trip with Redis)."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def step(self, *args):
        self.calls += 1
        return super().step(*args)

    def look(self, host):
        self.calls += 1
        return super().look(host)


def test_a_healthy_host_costs_no_round_trip_and_one_that_failed_once_a_read_a_second(site, made):
    clock, counted = Clock(), CountedBreakers()
    downloader = downloader_with(made, breaker_of(counted, clock), clock)
    assert all(fetch(downloader, site.url(f"/page/{n}")) == "ok" for n in range(20)) and counted.calls == 0
    assert fetch(downloader, site.url("/status/500")) == "HTTP 500" and counted.calls == 1
    assert all(fetch(downloader, site.url(f"/page/{n}")) == "ok" for n in range(20))
    assert counted.calls == 1, "its answer forgot the failure: the host costs nothing again"


def test_states_show_the_hosts_with_a_breaker_newest_first(breakers):
    breakers.step("a.example", "trip", START, (5, 5.0))
    breakers.step("b.example", "hold_off", START + 1, START + 60)
    breakers.step("a.example", "claim", START + 5, 30.0)
    shown = breakers.states(10)
    assert list(shown) == ["a.example", "b.example"]
    assert (shown["a.example"].phase, shown["a.example"].since, shown["a.example"].failures,
            shown["a.example"].next_probe) == (BreakerPhase.PROBING, START, 5, START + 5)
    assert shown["b.example"].phase is BreakerPhase.CLOSED and shown["b.example"].not_before == START + 60
    assert list(breakers.states(1)) == ["a.example"]
    breakers.close("a.example")
    assert list(breakers.states(10)) == ["b.example"]
    with pytest.raises(ValueError):
        breakers.step("a.example", "explode", START)


# -- a real worker ---------------------------------------------------------------------------------------

DEAD_TASKS, FAST_TASKS = 30, 60
BREAKER_SETTINGS = dict(REQUEST_TIMEOUT=0.3, DOWNLOAD_TIMEOUT=0.5, SPIDER_MAX_RETRY_TIMES=3, SPIDER_THREAD_COUNT=4,
                        HOST_BREAKER_FAILURES=3, HOST_BREAKER_PROBE=0.2, HOST_BREAKER_PROBE_MAX=0.4)


def test_a_dead_hosts_tasks_are_spared_then_failed_with_one_reason_while_a_fast_host_finishes(backend, site,
                                                                                               caplog):
    """Two workers, a dead host's tasks first in id order. Without the breaker each would cost its four
    attempts of 0.3 s (120 connections); with it the dead host sees the failures that open its breaker,
    those in flight then, and a probe every 0.2 to 0.4 s until HOST_DOWN_GIVE_UP, after which its tasks
    fail at once, each with the one reason."""
    give_up = 2.0
    with DeadHost() as dead:
        backend.create_tasks([dead.url(f"/item/{n}") for n in range(DEAD_TASKS)]
                             + [site.url(f"/page/{n}") for n in range(FAST_TASKS)])
        settings = backend.settings(HOST_DOWN_GIVE_UP=give_up, **BREAKER_SETTINGS)
        fast_ids = range(DEAD_TASKS + 1, DEAD_TASKS + FAST_TASKS + 1)
        with caplog.at_level(logging.WARNING), \
                InProcessBatch(lambda: CrawlTask(batch_store=backend.store(), settings=settings), workers=2):
            wait_for(lambda: all(backend.states()[i] == TaskState.DONE for i in fast_ids), timeout=30,
                     message="the fast host's tasks done")
            wait_for(lambda: set(backend.states().values()) == {TaskState.DONE, TaskState.FAILED}, timeout=30,
                     message="every task settled")
            accepted = dead.accepted
    states = backend.states()
    assert [i for i, state in states.items() if state == TaskState.FAILED] == list(range(1, DEAD_TASKS + 1))
    probes_most = int(give_up / BREAKER_SETTINGS["HOST_BREAKER_PROBE"]) + 2
    before_each_worker_knew = 2 * (BREAKER_SETTINGS["HOST_BREAKER_FAILURES"] + BREAKER_SETTINGS["SPIDER_THREAD_COUNT"])
    assert accepted <= before_each_worker_knew + probes_most, accepted
    reasons = {row["reason"] for row in backend.failures().values()}
    assert len(reasons) == 1 and next(iter(reasons)).startswith("host 127.0.0.1:"), reasons
    assert next(iter(reasons)).endswith(f"(HOST_DOWN_GIVE_UP={give_up:g} s)")
    alerts = [r.getMessage() for r in caplog.records if "ALERT host_down" in r.getMessage()]
    assert len(alerts) == 1 and next(iter(reasons)) in alerts[0], alerts


def test_the_reason_names_the_time_in_utc():
    assert down_reason("example.com", datetime(2026, 12, 4, 21, 30, tzinfo=timezone.utc).timestamp(), 1800) == \
        "host example.com down since 2026-12-04T21:30:00Z (HOST_DOWN_GIVE_UP=1800 s)"
