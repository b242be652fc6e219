"""When batchd sent each request, recorded at the sender: the pacing tests measure a pace where batchd keeps it.

A pace (DOWNLOAD_DELAY, a host's delay or rate, Crawl-delay, the throttle's delay) is a promise about when
batchd *sends* a request. The local site's arrival times (site.hit_times) add the time the request takes to
reach the site's thread, and on a busy machine that thread, one of the test process's, waits for the CPU and
the GIL: a late arrival followed by one on time reads as a gap shorter than the pace, which batchd never made.

`Sends` records (time.monotonic(), url) as each attempt enters Downloader.download_once, the one door every
attempt leaves batchd by, whichever downloader (a test's, or an InProcessBatch worker's) sends it, and the
latency the downloader measured for each answer (what the throttle learns from, longer on a busy machine):

    def test_...(site, sends):            # the fixture in tests/conftest.py
        ...
        assert min(sends.gaps("/page/")) >= 0.15 - SEND_JITTER

What is left between the pace's decision and this record is the chain's own code after the politeness and
rate links, in the sending thread: SEND_JITTER bounds it, far below any pace a test holds (without a pace
the gaps are a few milliseconds, so a removed pace still fails).
"""
import threading
import time
from urllib.parse import urlsplit

from batchd.download.downloader import Downloader

# A pace is decided in the politeness or rate link; the record is taken a few links further in, by the same
# thread. On a loaded machine that thread may lose the CPU in between: a preemption or two of the GIL's 5 ms.
SEND_JITTER = 0.02
# A thread that waited out a pace may wake late on a busy machine, and an answer take longer: that makes a gap
# longer, never shorter. An allowance for the upper bounds only (a pace's lower bound is its own); 0.27 s was
# seen at a load of 19 on two CPUs.
LATE_WAKE = 0.3


class Sends:
    """Every attempt sent by any Downloader of this process while installed (`install()`, `remove()`)."""

    def __init__(self):
        self.sent: list = []          # (time.monotonic(), url) of every attempt, in the order they left
        self.latencies: list = []     # (url, seconds) of every attempt answered: what the downloader measured
        self._lock = threading.Lock()
        self._original = None

    def install(self) -> "Sends":
        original = self._original = Downloader.download_once
        record = self._record

        def download_once(downloader, request):
            record(request.url)
            response = original(downloader, request)
            with self._lock:
                self.latencies.append((request.url, response.elapsed))
            return response
        Downloader.download_once = download_once      # type: ignore[method-assign]
        return self

    def remove(self) -> None:
        if self._original is not None:
            Downloader.download_once = self._original   # type: ignore[method-assign]
            self._original = None

    def _record(self, url: str) -> None:
        at = time.monotonic()
        with self._lock:
            self.sent.append((at, url))

    def starts(self, prefix: str = "/", host=None) -> list:
        """When each request whose path starts with `prefix` (and whose host is `host`, if given) was sent."""
        with self._lock:
            sent = list(self.sent)
        return [at for at, url in sent if urlsplit(url).path.startswith(prefix)
                and (host is None or urlsplit(url).hostname == host)]

    def gaps(self, prefix: str = "/", host=None) -> list:
        """The seconds between one start and the next, of the requests `starts()` picks."""
        starts = self.starts(prefix, host)
        return [later - earlier for earlier, later in zip(starts, starts[1:])]
