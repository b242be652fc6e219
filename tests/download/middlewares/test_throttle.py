"""AUTOTHROTTLE (download/middlewares/throttle.py, its learnt delays in hosts/learnt_delays.py): each host's delay between request starts, learnt from its answers,
measured where batchd sends (tests/pacing.py) to the local site (tests/httpserver.py: /moody answers as
site.mood says) through a real Downloader whose chain holds the throttle. The delays follow the latency the
downloader measures, longer on a busy machine: the bounds above a delay are taken from what it measured."""
import logging

import pytest

from batchd.config import Settings
from batchd.download.downloader import Downloader
from batchd.errors import ConfigError
from batchd.http import Request, RequestFailed
from batchd.assembly import chain_context
from batchd.download.middlewares.politeness import PolitenessMiddleware
from batchd.download.middlewares.throttle import AutoThrottleMiddleware
from pacing import LATE_WAKE, SEND_JITTER


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


def longest_latency(sends, first=0, last=None) -> float:
    """The longest latency the downloader measured for the answers `first` to `last` (Python slice bounds)."""
    return max(seconds for _, seconds in sends.latencies[first:last])


def test_503s_double_the_delay_and_healthy_answers_bring_it_back_down(site, sends, caplog):
    url = site.url("/moody/1")
    with Throttled(start_delay=0.05, max_delay=0.8) as throttled, caplog.at_level(logging.INFO, logger="batchd"):
        site.mood = "503"
        assert not any([throttled.fetch(url) for _ in range(5)])
        assert throttled.throttle.delay_of(url) == 0.8, "0.05 doubled four times, held to the maximum"
        site.mood = "ok"
        assert all([throttled.fetch(url) for _ in range(7)])
        # Halved 7 times, each time halfway towards the latency (a few ms on an idle machine): at most what is
        # left of 0.8 and the longest latency the seven answers took.
        assert throttled.throttle.delay_of(url) <= 0.8 / 2 ** 7 + longest_latency(sends, 5) + 1e-9
    gaps = sends.gaps("/moody/")
    # Each 503 doubles the delay and puts the next start off by it; then a start is booked with the delay as
    # it was when the one before started: 0.8, 0.8, 0.4, 0.2, 0.1... (or more, halfway towards a longer latency).
    delays = [0.1, 0.2, 0.4, 0.8, 0.8, 0.8, 0.4, 0.2, 0.1, 0.05, 0.025]
    assert len(gaps) == 11 and all(gap >= delay - SEND_JITTER for gap, delay in zip(gaps, delays)), gaps
    slack = LATE_WAKE + longest_latency(sends)
    assert all(gap <= delay + slack for gap, delay in zip(gaps, delays)), (gaps, slack)
    said = [r.getMessage() for r in caplog.records if "between the starts of its requests" in r.getMessage()]
    assert len(said) == 2, said     # past 4x the start, and back: not a line per request
    assert "slowed down (HTTP 503)" in said[0] and "sped up again" in said[1]


def test_a_slow_host_is_spaced_by_its_latency_over_the_target_concurrency(site, sends):
    url = site.url("/moody/2")
    with Throttled(start_delay=0.05, max_delay=5.0, target_concurrency=0.5) as throttled:
        site.mood = "0.2"
        assert all([throttled.fetch(url) for _ in range(6)])
        slowed = throttled.throttle.delay_of(url)
        site.mood = "ok"
        assert all([throttled.fetch(url) for _ in range(6)])
        recovered = throttled.throttle.delay_of(url)
    # Towards 0.2 s (and what a busy machine adds) / 0.5, halfway at a time from 0.05.
    assert 0.35 < slowed <= longest_latency(sends, 0, 6) / 0.5 + 1e-9
    assert recovered <= slowed / 2 ** 6 + longest_latency(sends, 6) / 0.5 + 1e-9
    gaps = sends.gaps("/moody/")
    assert gaps[5] >= 0.34 and gaps[-1] < 0.1 + LATE_WAKE + longest_latency(sends, 6), gaps


def test_a_timeout_raises_the_delay_sharply(site, sends):
    url = site.url("/moody/3")
    with Throttled(start_delay=0.05, max_delay=5.0) as throttled:
        site.mood = "1"
        assert not throttled.fetch(url, timeout=0.1)
        assert throttled.throttle.delay_of(url) == pytest.approx(0.1)
        site.mood = "ok"
        assert throttled.fetch(url)
    assert sends.gaps("/moody/")[0] >= 0.1 - SEND_JITTER


def test_the_delay_is_never_below_download_delay_and_each_host_has_its_own(site, sends):
    url = site.url("/moody/4")
    other_host = site.url("/moody/5").replace("127.0.0.1", "localhost")
    with Throttled(start_delay=0.0, min_delay=0.15) as throttled:
        assert all([throttled.fetch(url) for _ in range(4)])
        assert throttled.fetch(other_host)
        assert throttled.throttle.delay_of(url) == 0.15
    starts = sends.starts("/moody/4")
    assert len(starts) == 4 and all(later - earlier >= 0.15 - SEND_JITTER
                                    for earlier, later in zip(starts, starts[1:])), starts
    # Sent once the fourth was answered: sooner than this host's delay, unless that answer took as long.
    other = sends.starts("/moody/5")[0]
    assert other - starts[-1] < max(0.15 - SEND_JITTER, sends.latencies[3][1] + LATE_WAKE), \
        "the other host waited behind this one's delay"


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
