"""Politeness toward a site (batchd/politeness.py), as a worker's downloader takes its turns: at most
CONCURRENT_REQUESTS_PER_DOMAIN requests in flight to a host, DOWNLOAD_DELAY between two starts, each
host on its own; measured where batchd sends (tests/pacing.py), against the local site (tests/httpserver.py)."""

import time

from batchd.config import Settings
from batchd.download.downloader import Downloader
from batchd.http import Request
from batchd.hosts.terms import HostTerms, Terms
from batchd.hosts.paces import HostPaces
from batchd.assembly import chain_context
from batchd.download.middlewares.politeness import PolitenessMiddleware
from batchd.task import TaskState

from harness import InProcessBatch, fetch_all, wait_for
from pacing import LATE_WAKE, SEND_JITTER
from spiders.seed import CrawlTask


def paces(concurrency=8, delay=0.0, randomize=True):
    """A worker's per-host paces with the same terms at every host."""
    return HostPaces(HostTerms(Terms(concurrency=concurrency, delay=delay)), randomize)


def test_at_most_so_many_requests_in_flight_to_one_host(site):
    downloader = Downloader(middlewares=[PolitenessMiddleware(paces(concurrency=2))])
    fetch_all(downloader, [site.url(f"/slow?seconds=0.2&n={n}") for n in range(8)])
    assert site.hits("/slow") == 8 and site.most_in_flight == 2
    downloader.close()


def test_requests_to_one_host_start_download_delay_apart_each_host_on_its_own(site, sends):
    downloader = Downloader(middlewares=[PolitenessMiddleware(paces(delay=0.15, randomize=False))])
    other_host = site.url("/page/9").replace("127.0.0.1", "localhost")
    fetch_all(downloader, [site.url(f"/page/{n}") for n in range(4)] + [other_host])
    starts, gaps = sends.starts("/page/", host="127.0.0.1"), sends.gaps("/page/", host="127.0.0.1")
    # When the downloader sent them (tests/pacing.py); with no delay kept the gaps would be a few milliseconds.
    assert len(starts) == 4 and min(gaps) >= 0.15 - SEND_JITTER, gaps
    # Were the two hosts paced as one, every two of the five starts would stand a delay apart; the other host's
    # stands closer than that to one of this host's (whenever its thread got going on a busy machine).
    other = sends.starts("/page/", host="localhost")[0]
    assert min(abs(other - at) for at in starts) < 0.15 - SEND_JITTER, "the other host waited behind this one's delay"
    downloader.close()


def test_a_randomised_delay_lies_between_half_and_one_and_a_half_times(site, sends):
    # The gaps the paces choose, on a clock of the test's own: each start books the next one gap later.
    now = [1000.0]
    chosen, url = [], site.url("/page/0")
    clocked = HostPaces(HostTerms(Terms(delay=0.1)), randomize=True, clock=lambda: now[0])
    for _ in range(200):
        assert clocked.take(url) == 0
        clocked.give_back(url)
        chosen.append(clocked.take(url))        # taking nothing: how long before the next start
        now[0] += chosen[-1]
    assert 0.05 <= min(chosen) and max(chosen) <= 0.15 and max(chosen) - min(chosen) > 0.05, (min(chosen), max(chosen))
    # And kept by a downloader: each gap at least the least of them; longer by what a busy machine adds (a wake
    # late, an answer slow: never shorter, tests/pacing.py), at most the longest and the answer before it.
    downloader = Downloader(middlewares=[PolitenessMiddleware(paces(delay=0.1))])
    for n in range(6):
        downloader.fetch(Request(site.url(f"/page/{n}")))
    gaps, latencies = sends.gaps("/page/"), [seconds for _, seconds in sends.latencies]
    assert len(gaps) == 5 and all(0.05 - SEND_JITTER <= gap <= max(0.15, latency) + LATE_WAKE
                                  for gap, latency in zip(gaps, latencies)), (gaps, latencies)
    downloader.close()


def test_no_politeness_is_made_where_it_could_hold_nothing_back():
    def link(**settings):
        return PolitenessMiddleware.from_context(chain_context(Settings(**settings), threads=4))

    assert link() is None                                           # 8 per host, no delay
    assert link(CONCURRENT_REQUESTS_PER_DOMAIN=2).paces.terms.defaults.concurrency == 2
    assert link(DOWNLOAD_DELAY=0.5).paces.terms.defaults.delay == 0.5
    assert link(HOSTS={"a.example": {"delay": 0.5}}) is not None
    assert link(ROBOTSTXT_OBEY=True) is not None                    # Crawl-delay is kept here


def test_a_batch_with_one_request_at_a_time_per_host(backend, site):
    backend.create_tasks([site.url(f"/slow?seconds=0.05&n={n}") for n in range(12)])

    def spider():
        return CrawlTask(batch_store=backend.store(),
                         settings=backend.settings(SPIDER_THREAD_COUNT=4, CONCURRENT_REQUESTS_PER_DOMAIN=1))

    with InProcessBatch(spider):
        wait_for(lambda: set(backend.states().values()) == {TaskState.DONE}, message="every task done")
    assert site.most_in_flight == 1


# --- DOMAIN_RATE_LIMIT: the HostRates port ------------------------------------------------

def rates_of(backend, **settings):
    """A worker's HostRates on the backend (a store of its own for the memory backend)."""
    if backend.store() is None:
        backend.create_tasks([])
    runtime = CrawlTask(batch_store=backend.store(), settings=backend.settings(**settings)).runtime
    return runtime.backend.host_rates(runtime.namespace)


def booked(reserve, count) -> tuple:
    """(the waits of `count` bookings one after the other, the seconds they took): a wait is counted from when its
    booking was made, so each is shorter than its slot's distance from the first by up to the time between them."""
    started = time.monotonic()
    waits = [reserve() for _ in range(count)]
    return waits, time.monotonic() - started


CLOCKS = 0.01       # Redis's clock against this process's: the port books in Redis's TIME


def test_each_booking_starts_one_interval_after_the_last(backend):
    rates = rates_of(backend)
    waits, took = booked(lambda: rates.reserve("one.example", 10, 1), 4)
    assert waits[0] == 0 and all(0.1 * n - took - CLOCKS <= w <= 0.1 * n + CLOCKS
                                 for n, w in enumerate(waits)), (waits, took)
    assert rates.reserve("b.example", 10, 1) == 0, "another host books on its own"


def test_a_burst_starts_together_after_a_lull(backend):
    rates = rates_of(backend)
    waits, took = booked(lambda: rates.reserve("burst.example", 10, 3), 5)
    assert waits[:3] == [0, 0, 0], waits
    assert 0.1 - took - CLOCKS <= waits[3] <= 0.1 + CLOCKS and 0.2 - took - CLOCKS <= waits[4] <= 0.2 + CLOCKS, \
        (waits, took)


def test_on_redis_the_limit_holds_for_every_worker_of_the_namespace(mysql_backend):
    one, other = rates_of(mysql_backend), rates_of(mysql_backend)
    assert one is not other and one.redis is not other.redis, "two workers, two connections"
    started = time.monotonic()
    assert one.reserve("shared.example", 5, 1) == 0
    second = other.reserve("shared.example", 5, 1)
    took = time.monotonic() - started
    assert 0.2 - took - CLOCKS <= second <= 0.2 + CLOCKS, ("booked behind the other worker's request", second, took)


def test_a_batch_of_two_workers_keeps_to_the_rate(shared_backend, site, sends):
    shared_backend.create_tasks([site.url(f"/page/{n}") for n in range(1, 13)])

    def spider():
        return CrawlTask(batch_store=shared_backend.store(),
                         settings=shared_backend.settings(DOMAIN_RATE_LIMIT=20, SPIDER_THREAD_COUNT=4))

    with InProcessBatch(spider, workers=2):
        wait_for(lambda: set(shared_backend.states().values()) == {TaskState.DONE}, message="every task done")
    starts = sends.starts("/page/")
    # Slots 1/20 s apart, each request sent at its slot or later: the twelfth eleven slots after the first, less
    # a tenth: a worker turns the wait the port answers into a time of its own when the answer comes back, so a
    # slow answer (Redis's, on a busy machine) moves its slot a little later than the port booked it.
    assert len(starts) == 12 and starts[-1] - starts[0] >= 11 / 20 * 0.9, starts
