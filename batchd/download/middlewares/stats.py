"""StatsMiddleware: the batch's downloader counters (settle/batch_stats.py's BatchStats adds them up per batch).

It stands inside batchd's other links (the latency link excepted), so it counts what is really sent:
every attempt, retries included, and no request robots.txt forbade; a response is counted as it came
back, before any link outside it judges it:

    downloader/request_count                       attempts sent
    downloader/response_count                      responses, and by status (.../response_status_count/200)
    downloader/response_bytes                      bytes of the bodies
    downloader/exception_count                     attempts that got no response, and by exception
                                                   (.../exception_type_count/ReadTimeout)

and per host (hosts/counts.py names them; the flush keeps the busiest hosts only):

    host/done/<host>, host/failed/<host>           attempts answered 2xx/3xx; answered otherwise or not at all
    host/le<i>/<host>                              answered attempts by latency bucket (p50, p95)

and the attempts in flight per host now (HostsInFlight: a worker's gauge, published with its flushes).

A page the spider's validate() rejected came back all the same: it is counted as a response.
"""
import collections
import threading
from typing import Optional
from urllib.parse import urlsplit

from ...hosts.counts import FAILED, answered_names, host_label, name
from ...http import Request, Response
from ..chain import ChainContext, Counts, DownloaderMiddleware, PageRejected


class HostsInFlight:
    """Attempts being sent now, per host, across a worker's threads (a host leaves once it has none)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._hosts: collections.Counter = collections.Counter()

    def began(self, host: str) -> None:
        with self._lock:
            self._hosts[host] += 1

    def ended(self, host: str) -> None:
        with self._lock:
            self._hosts[host] -= 1
            if self._hosts[host] <= 0:
                del self._hosts[host]

    def by_host(self) -> dict:
        with self._lock:
            return dict(self._hosts)


class StatsMiddleware(DownloaderMiddleware):
    """The batch's counters of what was sent and what came back (innermost: every attempt counts)."""

    def __init__(self, stats: Counts, in_flight: Optional[HostsInFlight] = None):
        self.stats, self.in_flight = stats, in_flight or HostsInFlight()

    @classmethod
    def from_context(cls, context: ChainContext) -> "StatsMiddleware":
        return cls(context.stats, context.in_flight)

    def process_request(self, request: Request) -> None:
        self.stats.inc("downloader/request_count")
        self.in_flight.began(_host(request))

    def process_response(self, request: Request, response: Response) -> Response:
        host = _host(request)
        self.in_flight.ended(host)
        self.stats.inc("downloader/response_count")
        self.stats.inc(f"downloader/response_status_count/{response.status_code}")
        self.stats.inc("downloader/response_bytes", len(response.content))
        for counter in answered_names(host, response.status_code < 400, response.elapsed):
            self.stats.inc(counter)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        if isinstance(exception, PageRejected):     # a page came back; validate() turned it down
            self.process_response(request, exception.response)
            return None
        host = _host(request)
        self.in_flight.ended(host)
        self.stats.inc("downloader/exception_count")
        self.stats.inc(f"downloader/exception_type_count/{type(exception).__name__}")
        self.stats.inc(name(FAILED, host))
        return None


def _host(request: Request) -> str:
    return host_label(urlsplit(request.url).netloc)
