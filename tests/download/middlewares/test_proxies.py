"""Proxies (batchd/proxies.py) through real local forward proxies (tests/httpserver.py TestProxy):
one for every request, a pool rotated request by request, a dead one retired and never retried
through, lists read from a file and from a URL, credentials kept out of the log."""
import logging
from urllib.parse import urlencode

import pytest

from batchd.config import Settings
from batchd.errors import ConfigError
from batchd.http import Request
from batchd.download.middlewares.proxies import ProxyMiddleware, ProxyPool, proxy_pool
from batchd.task import TaskState
from harness import InProcessBatch, retrying_downloader, wait_for
from httpserver import TestProxy
from servers import spare_port
from spiders.seed import CrawlTask


@pytest.fixture
def proxies():
    with TestProxy() as first, TestProxy() as second:
        yield first, second


def dead_proxy() -> str:
    return f"http://127.0.0.1:{spare_port()}"      # nothing listens there: connection refused


def downloader(pool, **options):
    return retrying_downloader(middlewares=[ProxyMiddleware(pool)], **options)


def pool_of(*entries, max_failures=2, retire=60.0, refresh=300.0):
    return ProxyPool(entries, refresh, max_failures, retire)


def test_one_proxy_carries_every_request_with_its_credentials(site):
    with TestProxy(user="crawler", password="s3cret") as proxy:
        fetcher = downloader(proxy_pool(Settings(PROXY=proxy.url())))
        assert fetcher.fetch(Request(site.url("/page/1"))).headers["Via"] == "1.1 test-proxy"
        assert proxy.requests == [site.url("/page/1")]
        fetcher.close()


def test_a_pool_rotates_request_by_request(site, proxies):
    first, second = proxies
    fetcher = downloader(pool_of(first.url(), second.url()))
    for n in range(10):
        fetcher.fetch(Request(site.url(f"/page/{n}")))
    assert (len(first.requests), len(second.requests)) == (5, 5)
    fetcher.close()


def test_a_dead_proxy_is_not_retried_through_and_is_retired_after_its_failures(site, proxies, caplog):
    live, dead = proxies[0], dead_proxy()
    pool = pool_of(dead, live.url(), max_failures=2)
    fetcher = downloader(pool)
    with caplog.at_level(logging.WARNING, logger="batchd"):
        for n in range(6):
            assert fetcher.fetch(Request(site.url(f"/page/{n}"))).status_code == 200
    assert len(live.requests) == 6, "every page through the live proxy, a failed attempt retried through it"
    assert [r.getMessage() for r in caplog.records] == \
        [f"proxy {dead} retired for 60 s: 2 failures in a row"]
    assert all(pool.pick() == live.url() for _ in range(4)), "the retired proxy rests"
    fetcher.close()


def test_a_requests_own_proxy_wins_over_the_pool(site, proxies):
    first, second = proxies
    fetcher = downloader(pool_of(first.url()))
    fetcher.fetch(Request(site.url("/page/1"), proxy=second.url()))
    assert (first.requests, second.requests) == ([], [site.url("/page/1")])
    fetcher.close()


def test_lists_of_proxies_from_a_file_and_a_url_read_again_when_due(site, proxies, tmp_path):
    first, second = proxies
    listing = tmp_path / "proxies.txt"
    listing.write_text(f"# ours\n{first.url()}\n\n")
    now = [0.0]
    pool = ProxyPool([str(listing)], refresh=60, max_failures=3, retire_seconds=60, clock=lambda: now[0])
    assert pool.proxies == [first.url()]
    listing.write_text(f"{second.url().split('//')[1]}\n")       # host:port is http://host:port
    assert pool.pick() == first.url(), "not due yet"
    now[0] = 61.0
    assert pool.pick() == second.url() and pool.proxies == [second.url()]
    listing.unlink()
    now[0] = 200.0
    assert pool.pick() == second.url(), "an unreadable list leaves the last one serving"


def test_a_list_from_a_url_and_the_errors_naming_what_is_wrong(site, proxies, tmp_path):
    first, second = proxies
    listing = site.url("/text?" + urlencode({"body": f"{first.url()}\n{second.url()}\n"}))
    assert ProxyPool([listing], 60, 3, 60).proxies == [first.url(), second.url()]
    with pytest.raises(ConfigError, match="PROXY_POOL: could not read .*/status/404"):
        ProxyPool([site.url("/status/404")], 60, 3, 60)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n# none\n")
    with pytest.raises(ConfigError, match="PROXY_POOL: no proxy in " + str(empty)):
        ProxyPool([str(empty)], 60, 3, 60)
    with pytest.raises(ConfigError, match="set PROXY .* or PROXY_POOL .*, not both"):
        proxy_pool(Settings(PROXY="http://a:1", PROXY_POOL=("http://b:2",)))
    assert proxy_pool(Settings()) is None


def test_a_password_never_reaches_a_log_line(proxies, caplog):
    pool = pool_of("http://crawler:hunter2@127.0.0.1:9", proxies[0].url(), max_failures=1)
    with caplog.at_level(logging.WARNING, logger="batchd"):
        pool.failed("http://crawler:hunter2@127.0.0.1:9")
    assert "hunter2" not in caplog.text and "crawler:***@127.0.0.1:9" in caplog.text


def test_a_batch_crawls_through_a_pool_with_a_dead_proxy(backend, site, proxies):
    live = proxies[0]
    backend.create_tasks([site.url(f"/page/{n}") for n in range(1, 21)])
    settings = {"PROXY_POOL": (dead_proxy(), live.url()), "PROXY_MAX_FAILURES": 1}

    def spider():
        return CrawlTask(batch_store=backend.store(), settings=backend.settings(**settings))

    with InProcessBatch(spider):
        wait_for(lambda: set(backend.states().values()) == {TaskState.DONE}, message="every task done")
    assert sorted(live.requests) == sorted(site.url(f"/page/{n}") for n in range(1, 21))
    assert len(backend.items()) == 20
