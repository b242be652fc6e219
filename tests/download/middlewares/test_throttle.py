"""AUTOTHROTTLE (download/middlewares/throttle.py, its learnt delays in hosts/learnt_delays.py): each host's delay between request starts, learnt from its answers,
measured at the local site (tests/httpserver.py: /moody answers as site.mood says) through a real
Downloader whose chain holds the throttle."""
import logging

import pytest

from batchd.config import Settings
from batchd.download.downloader import Downloader
from batchd.errors import ConfigError
from batchd.http import Request, RequestFailed
from batchd.assembly import chain_context
from batchd.download.middlewares.politeness import PolitenessMiddleware
from batchd.download.middlewares.throttle import AutoThrottleMiddleware


class Throttled:
    """A Downloader (no retries) whose chain is an AutoThrottleMiddleware made with `options`, and the
    politeness link that spaces the starts by the delays it learns."""

    def __init__(self, **options):
        self.throttle = AutoThrottleMiddleware(**options)
        self.downloader = Downloader(timeout=5.0, middlewares=[self.throttle, PolitenessMiddleware(self.throttle.paces)])

    def fetch(self, url, **request) -> bool:
        """True if `url` came back 2xx; False if it failed."""
        try:
            self.downloader.fetch(Request(url, **request))
        except RequestFailed:
            return False
        return True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.downloader.close()


def gaps_between_starts(site, prefix="/moody/"):
    starts = [at for at, path in site.hit_times if path.startswith(prefix)]
    return [later - earlier for earlier, later in zip(starts, starts[1:])]


def test_503s_double_the_delay_and_healthy_answers_bring_it_back_down(site, caplog):
    url = site.url("/moody/1")
    with Throttled(start_delay=0.05, max_delay=0.8) as throttled, caplog.at_level(logging.INFO, logger="batchd"):
        site.mood = "503"
        assert not any([throttled.fetch(url) for _ in range(5)])
        assert throttled.throttle.delay_of(url) == 0.8, "0.05 doubled four times, held to the maximum"
        site.mood = "ok"
        assert all([throttled.fetch(url) for _ in range(7)])
        assert throttled.throttle.delay_of(url) < 0.04       # halved 7 times, towards the latency
    gaps = gaps_between_starts(site)
    overloaded, healthy = gaps[:4], gaps[4:]
    assert all(later > earlier * 1.6 for earlier, later in zip(overloaded, overloaded[1:])), gaps
    assert overloaded[-1] >= 0.38 and healthy[0] >= 0.78, gaps
    # 0.8, 0.4, 0.2, 0.1: a start is booked with the delay as it was when the one before started
    assert healthy[1] > healthy[2] > healthy[3] > healthy[4], gaps
    assert healthy[-1] < 0.1, gaps
    said = [r.getMessage() for r in caplog.records if "between the starts of its requests" in r.getMessage()]
    assert len(said) == 2, said     # past 4x the start, and back: not a line per request
    assert "slowed down (HTTP 503)" in said[0] and "sped up again" in said[1]


def test_a_slow_host_is_spaced_by_its_latency_over_the_target_concurrency(site):
    url = site.url("/moody/2")
    with Throttled(start_delay=0.05, max_delay=5.0, target_concurrency=0.5) as throttled:
        site.mood = "0.2"
        assert all([throttled.fetch(url) for _ in range(6)])
        slowed = throttled.throttle.delay_of(url)
        site.mood = "ok"
        assert all([throttled.fetch(url) for _ in range(6)])
        recovered = throttled.throttle.delay_of(url)
    assert 0.35 < slowed < 0.6, "towards 0.2 s (and some) / 0.5"
    assert recovered < 0.05
    gaps = gaps_between_starts(site)
    assert gaps[5] >= 0.34 and gaps[-1] < 0.1, gaps


def test_a_timeout_raises_the_delay_sharply(site):
    url = site.url("/moody/3")
    with Throttled(start_delay=0.05, max_delay=5.0) as throttled:
        site.mood = "1"
        assert not throttled.fetch(url, timeout=0.1)
        assert throttled.throttle.delay_of(url) == pytest.approx(0.1)
        site.mood = "ok"
        assert throttled.fetch(url)
    assert gaps_between_starts(site)[0] >= 0.095


def test_the_delay_is_never_below_download_delay_and_each_host_has_its_own(site):
    url = site.url("/moody/4")
    other_host = site.url("/moody/5").replace("127.0.0.1", "localhost")
    with Throttled(start_delay=0.0, min_delay=0.15) as throttled:
        assert all([throttled.fetch(url) for _ in range(4)])
        assert throttled.fetch(other_host)
        assert throttled.throttle.delay_of(url) == 0.15
    starts = [at for at, path in site.hit_times if path == "/moody/4"]
    # (the site stamps a hit as it reads it: the first one, on a new connection, came 10 ms late once in CI)
    assert all(later - earlier >= 0.12 for earlier, later in zip(starts, starts[1:])), starts
    other = next(at for at, path in site.hit_times if path == "/moody/5")
    assert other - starts[-1] < 0.1, "the other host did not wait behind this one's delay"


def test_past_the_bound_on_hosts_an_idle_one_is_forgotten(site):
    url, other_host = site.url("/moody/6"), site.url("/moody/7").replace("127.0.0.1", "localhost")
    with Throttled(start_delay=0.01, max_delay=1.0, kept=1) as throttled:
        site.mood = "503"
        throttled.fetch(url)
        assert throttled.throttle.delay_of(url) == 0.02
        site.mood = "ok"
        throttled.fetch(other_host)
        assert throttled.throttle.delay_of(url) == 0.01, "forgotten: a host not heard from"


def test_the_settings_make_the_throttle_and_a_start_over_the_maximum_is_refused():
    def made(**settings):
        return AutoThrottleMiddleware.from_context(chain_context(Settings(**settings)))

    assert made() is None
    throttle = made(AUTOTHROTTLE_ENABLED=True, AUTOTHROTTLE_START_DELAY=2.0, AUTOTHROTTLE_MAX_DELAY=30.0,
                    AUTOTHROTTLE_TARGET_CONCURRENCY=4.0, DOWNLOAD_DELAY=0.5).throttle
    assert (throttle.start_delay, throttle.max_delay, throttle.target_concurrency, throttle.min_delay) == (
        2.0, 30.0, 4.0, 0.5)
    with pytest.raises(ConfigError, match=r"AUTOTHROTTLE_START_DELAY \(9\) is more than AUTOTHROTTLE_MAX_DELAY \(3\)"):
        made(AUTOTHROTTLE_ENABLED=True, AUTOTHROTTLE_START_DELAY=9.0, AUTOTHROTTLE_MAX_DELAY=3.0)
