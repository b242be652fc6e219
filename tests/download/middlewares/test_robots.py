"""ROBOTSTXT_OBEY (batchd/robots.py): requests checked against their origin's robots.txt, served by the
local site (tests/httpserver.py: site.robots_txt), through a real Downloader and its chain."""
import logging
import socket
import threading

import pytest

from batchd.config import Settings, load_settings
from batchd.download.downloader import Downloader
from batchd.http import Request, RequestFailed
from batchd.download.chain import MiddlewareChain, sleep_without_stop
from batchd.download.middlewares.politeness import PolitenessMiddleware
from batchd.download.middlewares.robots import RobotsTxtMiddleware
from batchd.cli.starter import CONFIG_FILE, write_starter
from batchd.task import TaskState
from batchd.assembly import downloader_for
from harness import Counter, InProcessBatch, settle, wait_for
from pacing import SEND_JITTER
from spiders.seed import CrawlTask

FORBIDDEN = "forbidden by robots.txt"


class Obeying:
    """A Downloader whose chain is a RobotsTxtMiddleware (made with `options`) and the politeness link that
    keeps its Crawl-delay, and what it counted."""

    def __init__(self, **options):
        self.counter = Counter()
        self.downloader = Downloader(timeout=5.0, middlewares=[])
        self.robots = RobotsTxtMiddleware(self.downloader.download_once, stats=self.counter, **options)
        self.downloader.use(MiddlewareChain([self.robots, PolitenessMiddleware(self.robots.paces)]))

    def fetch(self, url, **request):
        return self.downloader.fetch(Request(url, **request))

    def refused(self, url, **request) -> str:
        """The reason `url` failed with (it must fail)."""
        with pytest.raises(RequestFailed) as caught:
            self.fetch(url, **request)
        return caught.value.reason

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.downloader.close()


def test_a_disallowed_request_fails_at_once_unsent_and_an_allowed_one_is_fetched(site):
    site.robots_txt = "User-agent: *\nDisallow: /page/2\n"
    with Obeying() as obeying:
        assert obeying.fetch(site.url("/page/1")).status_code == 200
        with pytest.raises(RequestFailed) as caught:
            obeying.fetch(site.url("/page/2"))
    assert (caught.value.reason, caught.value.attempts) == (FORBIDDEN, 1)
    assert site.hits("/page/2") == 0 and site.hits("/robots.txt") == 1
    assert obeying.counter.counts == {"robotstxt/request_count": 1, "robotstxt/forbidden": 1}


def test_the_rules_matched_are_those_of_the_requests_user_agent_else_user_agents_first(site):
    site.robots_txt = "User-agent: otherbot\nDisallow: /\n\nUser-agent: *\nDisallow: /private\n"
    with Obeying() as obeying:
        assert obeying.fetch(site.url("/page/1")).status_code == 200
        assert obeying.refused(site.url("/page/1"), headers={"User-Agent": "otherbot/2.0"}) == FORBIDDEN
        assert obeying.refused(site.url("/private/1")) == FORBIDDEN
    downloader = downloader_for(Settings(ROBOTSTXT_OBEY=True, USER_AGENT=("otherbot/1.0", "kind/1.0")), 2,
                                sleep_without_stop)
    with pytest.raises(RequestFailed, match=FORBIDDEN):
        downloader.fetch(Request(site.url("/page/1")))
    assert downloader.fetch(Request(site.url("/page/1"), headers={"User-Agent": "kind/1.0"})).status_code == 200
    downloader.close()


@pytest.mark.parametrize("status", [404, 403, 410])
def test_a_4xx_robots_txt_allows_everything(site, status):
    site.robots_txt, site.robots_status = "User-agent: *\nDisallow: /\n", status   # an error page, not rules
    with Obeying() as obeying:
        assert obeying.fetch(site.url("/page/1")).status_code == 200


def test_no_robots_txt_at_all_allows_everything(site):
    with Obeying() as obeying:
        assert obeying.fetch(site.url("/page/1")).status_code == 200
    assert site.hits("/robots.txt") == 1


def test_a_5xx_robots_txt_disallows_the_origin_for_a_while_then_it_is_read_again(site):
    site.robots_txt, site.robots_status = "", 503
    with Obeying(unreachable_for=0.3) as obeying:
        assert obeying.refused(site.url("/page/1")) == f"{FORBIDDEN} (unreachable: HTTP 503)"
        assert obeying.refused(site.url("/page/2")).startswith(FORBIDDEN)
        assert site.hits("/robots.txt") == 1, "within the while, the verdict is kept"
        site.robots_status = 200
        wait_for(lambda: _fetched(obeying, site.url("/page/3")), message="the origin allowed again")
    assert site.hits("/robots.txt") == 2 and site.hits("/page/1") == site.hits("/page/2") == 0


def _fetched(obeying, url) -> bool:
    try:
        return obeying.fetch(url).status_code == 200
    except RequestFailed:
        return False


def test_an_unreachable_origin_is_disallowed_naming_the_error():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with Obeying() as obeying:
        reason = obeying.refused(f"http://127.0.0.1:{port}/page/1")
    assert reason.startswith(f"{FORBIDDEN} (unreachable: ConnectionError")


def test_garbage_allows_everything_and_so_does_a_file_over_the_size_bound(site, caplog):
    site.robots_txt = "<html><body>\x00\ufffd{{{ Disallow /page</body></html>"
    with Obeying() as obeying:
        assert obeying.fetch(site.url("/page/1")).status_code == 200
    site.robots_txt = "User-agent: *\n" + "Disallow: /page\n" * 200
    with Obeying(maxsize=1024) as obeying, caplog.at_level(logging.WARNING, logger="batchd"):
        assert obeying.fetch(site.url("/page/1")).status_code == 200
    assert "robots.txt is over 1024 bytes: not honoured" in caplog.text


def test_robots_txt_itself_is_never_checked(site):
    site.robots_txt = "User-agent: *\nDisallow: /\n"
    with Obeying() as obeying:
        assert obeying.fetch(site.url("/robots.txt")).text == site.robots_txt
        assert obeying.refused(site.url("/page/1")) == FORBIDDEN
    assert site.hits("/robots.txt") == 2       # the request above, and the check of /page/1


def fetch_together(obeying, urls):
    start = threading.Barrier(len(urls))

    def fetch(url):
        start.wait(10)
        obeying.fetch(url)

    threads = [threading.Thread(target=fetch, args=(url,)) for url in urls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)


def test_read_once_per_origin_across_eight_threads_and_again_in_a_new_batch(site):
    site.robots_txt, site.robots_delay = "User-agent: *\nDisallow: /private\n", 0.3
    other_origin = site.url("/page/9").replace("127.0.0.1", "localhost")
    with Obeying() as obeying:
        fetch_together(obeying, [site.url(f"/page/{n}") for n in range(8)] + [other_origin])
        assert site.hits("/robots.txt") == 2, "once for each origin"
        assert sum(site.hits(f"/page/{n}") for n in range(10)) == 9
        obeying.downloader.batch_started(2)
        obeying.fetch(site.url("/page/1"))
        assert site.hits("/robots.txt") == 3
        obeying.fetch(site.url("/page/2"))
    assert site.hits("/robots.txt") == 3
    assert obeying.counter.counts["robotstxt/request_count"] == 3


def test_past_the_bound_on_origins_the_oldest_is_forgotten_and_read_again(site):
    other_origin = site.url("/page/2").replace("127.0.0.1", "localhost")
    with Obeying(kept=1) as obeying:
        for url in (site.url("/page/1"), other_origin, site.url("/page/3")):
            obeying.fetch(url)
    assert site.hits("/robots.txt") == 3


def test_a_crawl_delay_spaces_the_starts_of_requests_to_the_origin(site, sends):
    site.robots_txt = "User-agent: *\nCrawl-delay: 0.2\n"
    with Obeying() as obeying:
        for n in range(3):
            obeying.fetch(site.url(f"/page/{n}"))
    gaps = sends.gaps("/page/")      # when the downloader sent them (tests/pacing.py)
    assert len(gaps) == 2 and all(gap >= 0.2 - SEND_JITTER for gap in gaps), gaps


def test_a_worker_fails_a_disallowed_task_with_the_reason_and_does_the_allowed_one(backend, site, caplog):
    site.robots_txt = "User-agent: *\nDisallow: /page/2\n"
    forbidden = site.url("/page/2")
    backend.create_tasks([site.url("/page/1"), forbidden])
    with caplog.at_level(logging.WARNING, logger="batchd"):
        assert settle(backend, CrawlTask, ROBOTSTXT_OBEY=True) == {1: TaskState.DONE, 2: TaskState.FAILED}
    lines = [r.getMessage() for r in caplog.records if "task 2 failed" in r.getMessage()]
    assert len(lines) == 1 and forbidden in lines[0] and FORBIDDEN in lines[0]
    assert site.hits("/page/2") == 0 and site.hits("/robots.txt") == 1


def test_a_project_batchd_init_writes_obeys_robots_txt(tmp_path):
    write_starter(str(tmp_path))
    assert load_settings(config_files=tmp_path / CONFIG_FILE).ROBOTSTXT_OBEY is True
    assert Settings().ROBOTSTXT_OBEY is False


def test_a_crawl_delay_holds_across_the_workers_of_the_namespace(mysql_backend, site, sends):
    """Two workers, each with its own pace and connection: the site sees one request per Crawl-delay in all,
    not one per worker (the rate-limit link books it in Redis's HostRates)."""
    site.robots_txt = "User-agent: *\nCrawl-delay: 0.1\n"
    mysql_backend.create_tasks([site.url(f"/page/{n}") for n in range(1, 13)])

    def spider():
        return CrawlTask(batch_store=mysql_backend.store(),
                         settings=mysql_backend.settings(ROBOTSTXT_OBEY=True, SPIDER_THREAD_COUNT=4))

    with InProcessBatch(spider, workers=2):
        wait_for(lambda: set(mysql_backend.states().values()) == {TaskState.DONE}, message="every task done")
    starts = sends.starts("/page/")
    # Eleven slots after the first, less a tenth for the latency of Redis's answers (as in test_politeness.py).
    assert len(starts) == 12 and starts[-1] - starts[0] >= 11 * 0.1 * 0.9, starts
