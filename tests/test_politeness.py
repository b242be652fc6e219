"""Politeness toward a site (batchd/politeness.py), as a worker's downloader takes its turns: at most
CONCURRENT_REQUESTS_PER_DOMAIN requests in flight to a host, DOWNLOAD_DELAY between two starts, each
host on its own; measured at the local site (tests/httpserver.py)."""
import threading

from batchd.config import Settings
from batchd.downloader import Downloader
from batchd.http import Request
from batchd.politeness import Politeness
from batchd.task import TaskState
from batchd.worker import politeness_for
from harness import InProcessBatch, wait_for
from spiders.seed import CrawlTask


def fetch_all(downloader, urls):
    threads = [threading.Thread(target=downloader.fetch, args=(Request(url),)) for url in urls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)


def test_at_most_so_many_requests_in_flight_to_one_host(site):
    downloader = Downloader(politeness=Politeness(concurrency=2, delay=0))
    fetch_all(downloader, [site.url(f"/slow?seconds=0.2&n={n}") for n in range(8)])
    assert site.hits("/slow") == 8 and site.most_in_flight == 2
    downloader.close()


def test_requests_to_one_host_start_download_delay_apart_each_host_on_its_own(site):
    downloader = Downloader(politeness=Politeness(concurrency=8, delay=0.15, randomize=False))
    other_host = site.url("/page/9").replace("127.0.0.1", "localhost")
    fetch_all(downloader, [site.url(f"/page/{n}") for n in range(4)] + [other_host])
    starts = [at for at, path in site.hit_times if path.startswith("/page/") and path != "/page/9"]
    gaps = [later - earlier for earlier, later in zip(starts, starts[1:])]
    assert len(starts) == 4 and min(gaps) >= 0.14, gaps
    other = next(at for at, path in site.hit_times if path == "/page/9")
    assert other < starts[1], "the other host did not wait behind this one's delay"
    downloader.close()


def test_a_randomised_delay_lies_between_half_and_one_and_a_half_times(site):
    politeness = Politeness(concurrency=8, delay=0.1)
    downloader = Downloader(politeness=politeness)
    for n in range(6):
        downloader.fetch(Request(site.url(f"/page/{n}")))
    starts = [at for at, _ in site.hit_times]
    assert all(0.045 <= later - earlier <= 0.2 for earlier, later in zip(starts, starts[1:]))
    downloader.close()


def test_no_politeness_is_made_where_it_could_hold_nothing_back():
    assert politeness_for(Settings(), threads=4) is None                       # 8 per host, no delay
    assert politeness_for(Settings(CONCURRENT_REQUESTS_PER_DOMAIN=2), threads=4).concurrency == 2
    assert politeness_for(Settings(DOWNLOAD_DELAY=0.5), threads=4).delay == 0.5


def test_a_batch_with_one_request_at_a_time_per_host(backend, site):
    backend.create_tasks([site.url(f"/slow?seconds=0.05&n={n}") for n in range(12)])

    def spider():
        return CrawlTask(batch_store=backend.store(),
                         settings=backend.settings(SPIDER_THREAD_COUNT=4, CONCURRENT_REQUESTS_PER_DOMAIN=1))

    with InProcessBatch(spider):
        wait_for(lambda: set(backend.states().values()) == {TaskState.DONE}, message="every task done")
    assert site.most_in_flight == 1
