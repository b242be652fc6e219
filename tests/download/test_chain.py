"""The downloader middleware chain (download/chain.py) and batchd's links (download/middlewares/): the
chain's order and contract against a real local site, DOWNLOADER_MIDDLEWARES as a worker loads it (the
links' old paths too), and the cookies of one task."""
import json

import pytest
import requests

import batchd as mw
from batchd.config import Settings
from batchd.download.downloader import Downloader
from batchd.errors import ConfigError
from batchd.http import Request, RequestFailed, Response
from batchd.assembly import chain_context
from batchd.download.chain import DownloaderMiddleware, chain_from_settings
from batchd.download.middlewares.rate_limit import RateLimitMiddleware
from batchd.download.middlewares.retry import RetryMiddleware
from batchd.download.middlewares.stats import HostsInFlight, StatsMiddleware
from batchd.hosts.terms import HostTerms, Terms
from batchd.hosts.paces import HostPaces
from batchd.download.middlewares.politeness import PolitenessMiddleware
from batchd.download.middlewares.proxies import ProxyMiddleware
from batchd.download.middlewares.robots import RobotsTxtMiddleware
from batchd.task import TaskState
from batchd.download.middlewares.throttle import AutoThrottleMiddleware
from harness import Counter, InProcessBatch, retrying_downloader, settle, spider_factory, wait_for
from spiders.seed import CrawlTask

D, F = TaskState.DONE, TaskState.FAILED


class Recorder(DownloaderMiddleware):
    """Writes down every call it gets, under its name, into a shared list."""

    def __init__(self, name, calls):
        self.name, self.calls = name, calls

    def process_request(self, request):
        self.calls.append((self.name, "request", request.url.rsplit("/", 1)[-1]))

    def process_response(self, request, response):
        self.calls.append((self.name, "response", response.status_code))
        return response

    def process_exception(self, request, exception):
        self.calls.append((self.name, "exception", type(exception).__name__))
        return None


def test_requests_go_in_outermost_first_and_responses_come_out_innermost_first(site):
    calls = []
    downloader = Downloader(middlewares=[Recorder("outer", calls), Recorder("inner", calls)])
    assert downloader.fetch(Request(site.url("/page/1"))).status_code == 200
    assert calls == [("outer", "request", "1"), ("inner", "request", "1"),
                     ("inner", "response", 200), ("outer", "response", 200)]
    downloader.close()


def test_a_response_from_process_request_is_not_sent_and_skips_the_links_inside(site):
    class Cached(DownloaderMiddleware):
        def process_request(self, request):
            raw = requests.models.Response()
            raw.status_code, raw.url = 200, request.url
            return Response(raw, request, b"<h1>cached</h1>")

    calls = []
    downloader = Downloader(middlewares=[Recorder("outer", calls), Cached(), Recorder("inner", calls)])
    assert downloader.fetch(Request(site.url("/page/1"))).css("h1::text").get() == "cached"
    assert site.hits("/page/1") == 0
    assert calls == [("outer", "request", "1"), ("outer", "response", 200)]
    downloader.close()


def test_a_request_from_process_request_is_sent_instead_and_the_outer_links_see_their_own(site):
    class Redirect(DownloaderMiddleware):
        def process_request(self, request):
            return request.replace(url=request.url.replace("/page/1", "/page/2"))

    calls = []
    downloader = Downloader(middlewares=[Recorder("outer", calls), Redirect(), Recorder("inner", calls)])
    assert downloader.fetch(Request(site.url("/page/1"))).css("h1::text").get() == "Title 2"
    assert calls[1] == ("inner", "request", "2") and calls[0] == ("outer", "request", "1")


def test_a_request_from_process_response_is_the_next_attempt_with_download_midware_applied_afresh(site):
    class SecondChance(DownloaderMiddleware):
        def process_response(self, request, response):
            if response.status_code == 404 and not request.meta.get("again"):
                return Request(site.url("/echo"), meta={"again": True})
            return response

    signed = []

    def download_midware(request):
        signed.append(request.url)
        return request.replace(headers={"X-Sign": str(len(signed))})

    downloader = Downloader(middlewares=[SecondChance()])
    response = downloader.fetch(Request(site.url("/status/404")), download_midware)
    assert response.json()["headers"]["x-sign"] == "2"      # signed once per attempt, never twice
    assert signed == [site.url("/status/404"), site.url("/echo")]
    downloader.close()


def test_process_exception_may_answer_for_a_request_that_failed(site):
    class Fallback(DownloaderMiddleware):
        def process_exception(self, request, exception):
            return Request(site.url("/page/3")) if isinstance(exception, requests.ConnectionError) else None

    calls = []
    downloader = Downloader(middlewares=[Fallback(), Recorder("inner", calls)])
    assert downloader.fetch(Request(site.url("/drop"))).css("h1::text").get() == "Title 3"
    assert ("inner", "exception", "ConnectionError") in calls
    downloader.close()


def test_what_the_chain_ends_with_is_judged_by_the_downloader(site):
    downloader = Downloader(middlewares=[])          # no retry middleware: a 503 fails at once
    with pytest.raises(RequestFailed) as caught:
        downloader.fetch(Request(site.url("/status/503")))
    assert caught.value.reason == "HTTP 503" and site.hits("/status/503") == 1
    downloader.close()


def test_a_link_that_raised_in_process_request_is_not_called_back_but_those_outside_are(site):
    class Refuses(DownloaderMiddleware):
        def process_request(self, request):
            raise ValueError("no thanks")

    politeness = HostPaces(HostTerms(Terms(concurrency=1)))
    calls = []
    downloader = Downloader(middlewares=[Recorder("outer", calls), PolitenessMiddleware(politeness), Refuses()])
    for _ in range(3):      # with its place not given back, the second fetch would wait for ever
        with pytest.raises(RequestFailed, match="ValueError: no thanks"):
            downloader.fetch(Request(site.url("/page/1")))
    assert calls[-1] == ("outer", "exception", "ValueError")
    downloader.close()


def test_a_link_returning_something_else_fails_the_request_naming_it(site):
    class Confused(DownloaderMiddleware):
        def process_response(self, request, response):
            return "yes"

    downloader = Downloader(middlewares=[Confused()])
    with pytest.raises(RequestFailed, match="Confused.process_response returned a str"):
        downloader.fetch(Request(site.url("/page/1")))
    downloader.close()


def test_the_stats_link_counts_attempts_statuses_bytes_and_failures(site):
    counter, in_flight = Counter(), HostsInFlight()
    downloader = retrying_downloader(max_retry_times=2, middlewares=[StatsMiddleware(counter, in_flight)])
    downloader.fetch(Request(site.url("/flaky/x?fail=1&status=503")))
    with pytest.raises(RequestFailed):
        downloader.fetch(Request(site.url("/drop")))
    counts = counter.counts
    assert counts["downloader/request_count"] == 5                  # 2 + 3 attempts
    assert (counts["downloader/response_status_count/503"], counts["downloader/response_status_count/200"]) == (1, 1)
    assert counts["downloader/exception_type_count/ConnectionError"] == 3
    assert counts["downloader/response_bytes"] > 0
    host = site.url("/").split("/")[2]                              # per host: 1 answered 2xx, 1 + 3 failed
    assert (counts[f"host/done/{host}"], counts[f"host/failed/{host}"], in_flight.by_host()) == (1, 4, {})
    downloader.close()


def test_the_retry_link_counts_retries_by_reason(site):
    counter = Counter()
    downloader = Downloader(middlewares=[RetryMiddleware(1, backoff_base=0.001, stats=counter)])
    with pytest.raises(RequestFailed, match="HTTP 500 after 2 attempts"):
        downloader.fetch(Request(site.url("/status/500")))
    assert counter.counts == {"retry/count": 1, "retry/reason_count/HTTP 500": 1, "retry/max_reached": 1}
    downloader.close()


# --- DOWNLOADER_MIDDLEWARES ------------------------------------------------------------

def chain_of(**settings):
    context = chain_context(Settings(**settings), threads=4, download=lambda request: None, host_rates=object())
    return [type(m) for m in chain_from_settings(context).middlewares]


def test_the_default_chain_has_only_the_links_the_settings_need():
    assert chain_of() == [RetryMiddleware, StatsMiddleware]
    assert chain_of(PROXY="http://127.0.0.1:1", DOMAIN_RATE_LIMIT=5.0, DOWNLOAD_DELAY=1.0, ROBOTSTXT_OBEY=True,
                    AUTOTHROTTLE_ENABLED=True) == [
        RetryMiddleware, RobotsTxtMiddleware, AutoThrottleMiddleware, ProxyMiddleware, RateLimitMiddleware,
        PolitenessMiddleware, StatsMiddleware]


def test_a_path_that_does_not_load_is_a_one_line_config_error():
    with pytest.raises(ConfigError, match="DOWNLOADER_MIDDLEWARES: cannot import 'nowhere.Thing'"):
        chain_of(DOWNLOADER_MIDDLEWARES=("nowhere.Thing",))
    with pytest.raises(ConfigError, match="'spiders.middlewares.NotAMiddleware' is not a DownloaderMiddleware"):
        chain_of(DOWNLOADER_MIDDLEWARES=("spiders.middlewares.NotAMiddleware",))
    with pytest.raises(ConfigError, match="'spiders.middlewares.Missing' is not a DownloaderMiddleware"):
        chain_of(DOWNLOADER_MIDDLEWARES=("spiders.middlewares.Missing",))


class EchoSpider(CrawlTask):
    def parse(self, request, response, task):
        yield {"url": task["url"], "title": response.json()["headers"].get("x-token")}
        self.update_task(task["id"], ok=True)


def test_a_spiders_middleware_runs_in_the_workers_chain_and_a_chain_without_retries_retries_nothing(backend, site):
    backend.create_tasks([site.url("/echo"), site.url("/flaky/f?fail=1&status=503")])
    chain = ("spiders.middlewares.TokenMiddleware", "batchd.download.middlewares.stats.StatsMiddleware")
    assert settle(backend, EchoSpider, DOWNLOADER_MIDDLEWARES=chain) == {1: D, 2: F}
    assert [item["title"] for item in backend.items()] == ["from-middleware"]
    assert site.hits("/flaky/f") == 1


class CookieSpider(CrawlTask):
    """Each task: a page that sets a cookie naming the task, then /echo, whose Cookie header is the item."""

    def task_requests(self, task):
        yield mw.Request(f"{task['url']}/set-cookie?task={task['id']}", callback=self.echo)

    def echo(self, request, response, task):
        yield mw.Request(response.urljoin("/echo"), callback=self.parse, dont_filter=True)

    def parse(self, request, response, task):
        yield {"url": task["url"], "title": response.json()["headers"].get("cookie")}
        self.update_task(task["id"], ok=True)


def test_cookies_are_kept_across_the_requests_of_a_task_and_never_reach_the_next_task(backend, site):
    backend.create_tasks([site.url("")] * 3)
    assert settle(backend, CookieSpider, SPIDER_THREAD_COUNT=1) == {1: D, 2: D, 3: D}
    assert sorted(item["title"] for item in backend.items()) == ["task=1", "task=2", "task=3"]


def test_the_batch_record_counts_what_the_chain_saw(backend, site):
    backend.create_tasks([site.url("/flaky/c?fail=2&status=503"), site.url("/status/404"), site.url("/page/1")])
    with InProcessBatch(spider_factory(backend, CrawlTask)):
        wait_for(lambda: backend.records() and backend.records()[-1]["is_done"], message="the batch closed")
    assert backend.states() == {1: D, 2: F, 3: D}
    stats = json.loads(backend.records()[-1]["stats"])
    assert stats["downloader/request_count"] == 5                      # 3 + 1 + 1 attempts
    assert stats["downloader/response_status_count/503"] == 2
    assert stats["downloader/response_status_count/200"] == 2
    assert stats["downloader/response_status_count/404"] == 1
    assert stats["retry/reason_count/HTTP 503"] == 2
    assert stats["item/stored"] == 2 and stats["downloader/response_bytes"] > 0


def test_the_paths_batchds_links_had_before_the_layout_by_role_still_load(caplog):
    """Users' config files name batchd.middleware.RetryMiddleware (the first layout), or
    batchd.download.chain.RetryMiddleware (before one file per link), and the like: same classes, one warning
    each, naming the path to write."""
    from batchd.download.chain import _middleware_class
    from batchd.download.middlewares.latency import FetchLatencyMiddleware
    old = {"batchd.middleware.RetryMiddleware": RetryMiddleware, "batchd.download.chain.RetryMiddleware": RetryMiddleware,
           "batchd.robots.RobotsTxtMiddleware": RobotsTxtMiddleware,
           "batchd.throttle.AutoThrottleMiddleware": AutoThrottleMiddleware,
           "batchd.proxies.ProxyMiddleware": ProxyMiddleware,
           "batchd.middleware.RateLimitMiddleware": RateLimitMiddleware,
           "batchd.download.chain.RateLimitMiddleware": RateLimitMiddleware,
           "batchd.politeness.PolitenessMiddleware": PolitenessMiddleware,
           "batchd.middleware.StatsMiddleware": StatsMiddleware, "batchd.download.chain.StatsMiddleware": StatsMiddleware,
           "batchd.metrics.FetchLatencyMiddleware": FetchLatencyMiddleware,
           "batchd.reporting.metrics.FetchLatencyMiddleware": FetchLatencyMiddleware}
    with caplog.at_level("WARNING", logger="batchd"):
        for path, cls in old.items():
            assert _middleware_class(path) is cls
            assert _middleware_class(path) is cls
    moved = [r.getMessage() for r in caplog.records if "has moved" in r.getMessage()]
    assert len(moved) == len(old)
    for path, cls in old.items():
        (line,) = [m for m in moved if f" {path} has moved" in m]
        assert line.endswith(f"has moved; write {cls.__module__}.{cls.__name__}")
    assert ("DOWNLOADER_MIDDLEWARES: batchd.middleware.RetryMiddleware has moved; write "
            "batchd.download.middlewares.retry.RetryMiddleware") in moved
