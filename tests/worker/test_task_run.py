"""Requests that fail, callbacks that raise, tasks that never settle: on every store, each ends
its task the documented way and never stops the worker."""
import json
import logging
import traceback

import batchd as mw
from batchd.task import TaskState
from harness import next_batch, settle as settle_batch, spider_factory
from taskdb import bring_back
from spiders.seed import CrawlTask

D, F = TaskState.DONE, TaskState.FAILED


def factory(backend, cls=CrawlTask, **settings):
    return spider_factory(backend, cls, **settings)


def settle(backend, spider_cls=CrawlTask, timeout=30, **settings):
    return settle_batch(backend, spider_cls, timeout, **settings)


def test_503_twice_then_200_ends_done(backend, site):
    backend.create_tasks([site.url("/flaky/a?fail=2&status=503")])
    assert settle(backend) == {1: D}
    assert site.hits("/flaky/a") == 3
    assert len(backend.items()) == 1


def test_404_fails_at_once_with_url_and_reason_in_one_line(backend, site, caplog):
    url = site.url("/status/404")
    backend.create_tasks([url, site.url("/page/1")])
    with caplog.at_level(logging.WARNING, logger="batchd"):
        assert settle(backend) == {1: F, 2: D}
    assert site.hits("/status/404") == 1
    lines = [r.getMessage() for r in caplog.records if "task 1 failed" in r.getMessage()]
    assert len(lines) == 1 and url in lines[0] and "HTTP 404" in lines[0]


def test_retries_exhausted_calls_failed_request(backend, site, caplog):
    backend.create_tasks([site.url("/status/500")])
    with caplog.at_level(logging.WARNING, logger="batchd"):
        assert settle(backend, SPIDER_MAX_RETRY_TIMES=2) == {1: F}
    assert site.hits("/status/500") == 3
    assert "HTTP 500 after 3 attempts" in caplog.text


def test_a_malformed_url_fails_that_task_alone(backend, site, caplog):
    backend.create_tasks(["htp:/not a url", site.url("/page/2")])
    with caplog.at_level(logging.WARNING, logger="batchd"):
        assert settle(backend) == {1: F, 2: D}
    assert "htp:/not a url" in caplog.text


class RaisingSpider(CrawlTask):
    def parse(self, request, response, task):
        if task["id"] == 1:
            raise ValueError("no title here")
        yield from super().parse(request, response, task)


def test_an_exception_in_a_callback_fails_the_task_and_names_it_with_its_traceback_once(backend, site, caplog):
    backend.create_tasks([site.url("/page/1"), site.url("/page/2")])
    with caplog.at_level(logging.ERROR, logger="batchd"):
        assert settle(backend, RaisingSpider) == {1: F, 2: D}
        bring_back(backend, 1)                             # the same task fails the same way again
        assert settle(backend, RaisingSpider) == {1: F, 2: D}
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    first, again = (r.getMessage() for r in errors)
    assert first.startswith("task 1 failed: ValueError: no title here (the traceback starts in the spider's code: ")
    assert first.endswith(" calls of batchd's own above it are left out)")
    assert again == "task 1 failed: ValueError: no title here"
    assert [bool(r.exc_info) for r in errors] == [True, False], "the traceback at ERROR, once per task and error"
    frames = traceback.extract_tb(errors[0].exc_info[2])
    assert frames[0].filename.endswith("tests/worker/test_task_run.py") and frames[0].name == "parse", \
        "the spider's call first"
    assert 'raise ValueError("no title here")' in caplog.text and "batchd/worker/" not in caplog.text


def test_a_failure_line_cuts_a_long_url_in_the_middle_and_keeps_the_reason(backend, site, caplog):
    """A URL of 480 characters that fails: the line cuts it to 160 in the middle (its start and its end shown),
    and keeps the reason; the failure record keeps the URL whole."""
    path = "/status/404?" + "q" * 440 + "&end=1"
    backend.create_tasks([site.url(path)])
    with caplog.at_level(logging.WARNING, logger="batchd"):
        assert settle(backend) == {1: F}
    line, = [r.getMessage() for r in caplog.records if "task 1 failed" in r.getMessage()]
    assert len(line) < 250 and line.startswith("task 1 failed: GET http://127.0.0.1:")
    assert "…" in line and line.endswith("&end=1: HTTP 404")
    record, = backend.failures().values()
    assert record["url"] == site.url(path)


class ForgetfulSpider(CrawlTask):
    def parse(self, request, response, task):
        yield {"url": task["url"]}                 # ... and never update_task()


def test_a_task_never_written_back_returns_to_the_queue_at_once_until_the_attempt_limit(backend, site, caplog):
    backend.create_tasks([site.url("/page/1")])
    with caplog.at_level(logging.WARNING, logger="batchd"):
        # The lease (600 s) never expires here: each return to the queue is the worker's own write-back.
        states = settle(backend, ForgetfulSpider, BATCH_TASK_MAX_ATTEMPTS=3, timeout=20)
    assert states == {1: F}
    assert site.hits("/page/1") == 3
    assert caplog.text.count("task 1: its requests ended without update_task(); it goes back to pending") == 3
    assert "task 1 failed: leased 3 times" in caplog.text
    assert len(backend.items()) == 1, "its item landed (an upsert: one row however many runs)"


class BadYieldSpider(CrawlTask):
    def parse(self, request, response, task):
        yield "not an item"


def test_yielding_something_else_than_items_or_requests_fails_the_task(backend, site, caplog):
    backend.create_tasks([site.url("/page/1")])
    with caplog.at_level(logging.ERROR, logger="batchd"):
        assert settle(backend, BadYieldSpider) == {1: F}
    assert "parse yielded a str" in caplog.text


class DoubleRequestSpider(CrawlTask):
    def task_requests(self, task):
        yield mw.Request(task["url"], callback=self.parse)
        yield mw.Request(task["url"], callback=self.parse)


def test_request_deduplication_drops_a_repeat_as_a_request_without_items(backend, site):
    backend.create_tasks([site.url("/page/1"), site.url("/page/2")])
    assert settle(backend, DoubleRequestSpider, REQUEST_FILTER_ENABLE=True) == {1: D, 2: D}
    assert (site.hits("/page/1"), site.hits("/page/2")) == (1, 1)
    assert len(backend.items()) == 2


def test_request_deduplication_is_off_by_default(backend, site):
    backend.create_tasks([site.url("/page/1")])
    assert settle(backend, DoubleRequestSpider) == {1: D}
    assert site.hits("/page/1") == 2


class LinkingSpider(CrawlTask):
    """A page of links follows its relative one (/page/1) and its 404 to parse_page; each task is done."""

    def parse(self, request, response, task):
        if "/links" in request.url:
            yield response.follow(response.css("a.relative")[0], callback=self.parse_page)
            yield response.follow(response.css("a.gone")[0], callback=self.parse_page, errback=self.gone)
        yield {"url": response.url}
        self.update_task(task["id"], ok=True)

    def parse_page(self, request, response, task):
        yield {"url": response.url}

    def gone(self, request, failure, task):
        yield {"url": request.url, "gone": failure.status_code}


def test_request_deduplication_never_drops_a_tasks_own_request_that_a_link_reached_first(backend, site, caplog):
    """Issue 34: task 2's page was reached first as a link of task 1; its own request was dropped as seen, and
    the task went back to pending BATCH_TASK_MAX_ATTEMPTS times and failed. Task 3, a second page of links, is
    crawled, and its links (reached by task 1's) are dropped: counted in the batch's counters, logged by URL."""
    crawl_links_twice(backend, site, caplog)


def test_a_bloom_request_filter_drops_the_links_already_made_as_the_exact_one_does(mysql_backend, site, caplog):
    crawl_links_twice(mysql_backend, site, caplog, REQUEST_FILTER="bloom")


def test_across_batches_the_links_made_in_an_earlier_batch_are_dropped_and_the_tasks_own_requests_go(
        backend, site, caplog):
    crawl_links_in_two_batches(backend, site, caplog)


def test_across_batches_on_a_bloom_filter_too(mysql_backend, site, caplog):
    crawl_links_in_two_batches(mysql_backend, site, caplog, REQUEST_FILTER="bloom")


def crawl_links_in_two_batches(backend, site, caplog, **settings):
    """REQUEST_FILTER_ACROSS_BATCHES: a batch crawls its task again (a task's own request always goes) but not
    the links an earlier batch followed with it on; a batch without it kept its links in a filter of its own, and
    a batch that trusts no validator forgets them."""
    backend.create_tasks([site.url("/links")])
    for across, hits in ((False, (1, 1, 1)), (True, (2, 2, 2)), (True, (3, 2, 2))):
        with caplog.at_level(logging.DEBUG, logger="batchd.worker"):
            caplog.clear()
            record = next_batch(backend, factory(backend, LinkingSpider, REQUEST_FILTER_ENABLE=True,
                                                 REQUEST_FILTER_ACROSS_BATCHES=across, **settings))
        assert (site.hits("/links"), site.hits("/page/1"), site.hits("/status/404")) == hits, across
        stats = json.loads(record["stats"]) if isinstance(record["stats"], str) else dict(record["stats"])
        if hits[0] == 3:       # (the batch before it made its links into the filter across batches)
            assert stats.get("dupefilter/filtered") == 2, stats
            assert f"dropped as already made in batch {record['id']} or an earlier one" in caplog.text
        assert backend.states() == {1: D}
    # A batch that trusts no validator (its spider changed, or --refetch) follows them again.
    with caplog.at_level(logging.INFO, logger="batchd.master"):
        next_batch(backend, factory(backend, LinkingSpider, REQUEST_FILTER_ENABLE=True,
                                    REQUEST_FILTER_ACROSS_BATCHES=True, **settings), refetch=True)
    assert (site.hits("/links"), site.hits("/page/1"), site.hits("/status/404")) == (4, 3, 3)
    assert "every callback runs, and the links earlier batches followed are followed again" in caplog.text


def crawl_links_twice(backend, site, caplog, **settings):
    backend.create_tasks([site.url("/links"), site.url("/page/1"), site.url("/links?again")])
    with caplog.at_level(logging.INFO, logger="batchd"), caplog.at_level(logging.DEBUG, logger="batchd.worker"):
        record = next_batch(backend, factory(backend, LinkingSpider, REQUEST_FILTER_ENABLE=True,
                                             SPIDER_THREAD_COUNT=1, **settings))
    assert backend.states() == {1: D, 2: D, 3: D}
    assert "leased" not in caplog.text
    assert (site.hits("/links"), site.hits("/page/1"), site.hits("/status/404")) == (2, 2, 1)
    stats = json.loads(record["stats"]) if isinstance(record["stats"], str) else dict(record["stats"])
    assert stats.get("dupefilter/filtered") == 2, stats
    dropped = [r.getMessage() for r in caplog.records if "dropped as already made" in r.getMessage()]
    assert sorted(line.split()[3] for line in dropped) == [site.url("/page/1"), site.url("/status/404")]
    assert "dupefilter/filtered 2" in next(r.getMessage() for r in caplog.records
                                           if r.getMessage().startswith("batch 1 done:"))


class FollowingSpider(CrawlTask):
    """Follows the links of /links: pages to parse_page with cb_kwargs; the 404 and a 410 to errbacks
    (one named, one a method), which yield an item instead of failing the task."""

    def parse(self, request, response, task):
        yield from response.follow_all(css="a.relative, a.spaced", callback=self.parse_page, cb_kwargs={"via": "links"})
        yield response.follow(response.css("a.gone")[0], callback=self.parse_page, errback="gone")
        yield mw.Request(response.urljoin("/status/410"), callback=self.parse_page, errback=self.gone)
        self.update_task(task["id"], ok=True)

    def parse_page(self, request, response, task, via="?"):
        yield {"url": response.url, "title": response.css("h1::text").get(), "via": via}

    def gone(self, request, failure, task):
        yield {"url": request.url, "title": None, "via": f"errback: HTTP {failure.status_code}"}


def test_followed_links_reach_their_callback_with_cb_kwargs_and_failures_their_errback(backend, site, caplog):
    backend.create_tasks([site.url("/links")])
    with caplog.at_level(logging.WARNING, logger="batchd"):
        assert settle(backend, FollowingSpider) == {1: D}
    assert sorted((item["url"], item["via"]) for item in backend.items()) == [
        (site.url("/page/1"), "links"), (site.url("/page/2"), "links"),
        (site.url("/status/404"), "errback: HTTP 404"), (site.url("/status/410"), "errback: HTTP 410")]
    assert "failed" not in caplog.text, "an errback replaces failed_request"


class HookedSpider(CrawlTask):
    """Signs every request with a token, and rejects the page titled 'Title 2' as a ban page."""

    def download_midware(self, request):
        return request.replace(headers={**(request.headers or {}), "X-Token": "t-1"})

    def validate(self, request, response):
        return "<h1>Title 2</h1>" not in response.text

    def parse(self, request, response, task):
        yield {"url": task["url"], "title": response.json()["headers"]["x-token"]}
        self.update_task(task["id"], ok=True)


def test_download_midware_changes_each_request_and_validate_rejects_a_ban_page(backend, site, caplog):
    backend.create_tasks([site.url("/echo"), site.url("/page/2")])
    with caplog.at_level(logging.WARNING, logger="batchd"):
        assert settle(backend, HookedSpider, SPIDER_MAX_RETRY_TIMES=1) == {1: D, 2: F}
    assert [item["title"] for item in backend.items()] == ["t-1"], "the token the server saw"
    assert site.hits("/page/2") == 2
    lines = [r.getMessage() for r in caplog.records if "task 2 failed" in r.getMessage()]
    assert len(lines) == 1 and "rejected by validate() after 2 attempts" in lines[0], lines
