"""AUTOTHROTTLE_ENABLED: a delay between the starts of two requests to one host, learnt from how the
host answers, kept per worker process (across its threads).

A host met for the first time gets AUTOTHROTTLE_START_DELAY. Each answer moves its delay:

  2xx                 halfway towards latency / AUTOTHROTTLE_TARGET_CONCURRENCY, the delay at which
                      about that many requests are in flight to the host at once (a host answering
                      in 0.5 s with a target of 2 gets 0.25 s): a slow host is spaced out, a fast,
                      healthy one is caught up with again, a halving at a time;
  429, 503, timeouts  doubled at once (at least to the start delay), and the host's next start is put
                      off by the new delay: it says it is overloaded, or it is;
  anything else       (a 404, a 500) may raise the delay as a 2xx would, never lower it: a quick error
                      page says nothing of how fast the host serves its pages.

The delay stays within DOWNLOAD_DELAY (the floor) and AUTOTHROTTLE_MAX_DELAY. It is told to the worker's
HostPaces (hosts/terms.py), where the politeness link spaces the host's starts by the largest of
it, the host's own delay and its Crawl-delay: without that link, the throttle learns but spaces nothing. A line at INFO names a
host whose delay rises past a notable threshold (each 4x the start delay) or comes back down, not
each request.
"""
from typing import Callable, Optional

import requests
import time

from ...errors import ConfigError
from ...hosts.paces import KEPT_HOSTS, HostPaces
from ...hosts.learnt_delays import HostThrottle
from ...http import Request, Response
from ..chain import ChainContext, DownloaderMiddleware

OVERLOADED_STATUSES = frozenset({429, 503})


class AutoThrottleMiddleware(DownloaderMiddleware):
    """Spaces each host's requests by a delay learnt from its answers (see this module's text)."""

    def __init__(self, start_delay: float = 1.0, max_delay: float = 60.0, target_concurrency: float = 1.0,
                 min_delay: float = 0.0, kept: int = KEPT_HOSTS, clock: Callable[[], float] = time.monotonic,
                 paces: Optional[HostPaces] = None):
        """`paces`: the worker's (its politeness link's), where the delays are told (None: paces of its own)."""
        self.paces = paces or HostPaces(clock=clock)
        self.throttle = HostThrottle(start_delay, max_delay, target_concurrency, min_delay, kept, clock)

    @classmethod
    def from_context(cls, context: ChainContext) -> Optional["AutoThrottleMiddleware"]:
        settings = context.settings
        if not settings.AUTOTHROTTLE_ENABLED:
            return None
        if settings.AUTOTHROTTLE_START_DELAY > settings.AUTOTHROTTLE_MAX_DELAY:
            raise ConfigError(f"AUTOTHROTTLE_START_DELAY ({settings.AUTOTHROTTLE_START_DELAY:g}) is more than "
                              f"AUTOTHROTTLE_MAX_DELAY ({settings.AUTOTHROTTLE_MAX_DELAY:g})")
        return cls(settings.AUTOTHROTTLE_START_DELAY, settings.AUTOTHROTTLE_MAX_DELAY,
                   settings.AUTOTHROTTLE_TARGET_CONCURRENCY, settings.DOWNLOAD_DELAY, paces=context.paces)

    def delay_of(self, url: str) -> float:
        """The delay between two starts of requests to `url`'s host now."""
        return self.throttle.delay_of(url)

    def process_request(self, request: Request) -> None:
        """The host's delay, told again before each attempt: the paces forget an idle host."""
        self.paces.keep_throttle_delay(request.url, self.throttle.delay_for_attempt(request.url))

    def process_response(self, request: Request, response: Response) -> Response:
        status = response.status_code
        if status in OVERLOADED_STATUSES:
            self._slow_down(request.url, f"HTTP {status}")
        else:
            delay = self.throttle.follow_latency(request.url, response.elapsed, may_lower=200 <= status < 300)
            self.paces.keep_throttle_delay(request.url, delay)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        if isinstance(exception, requests.Timeout):
            self._slow_down(request.url, type(exception).__name__)
        return None

    def _slow_down(self, url: str, why: str) -> None:
        """An overloaded host: its next start is put off by the new delay too."""
        self.paces.keep_throttle_delay(url, self.throttle.slow_down(url, why), put_off=True)
