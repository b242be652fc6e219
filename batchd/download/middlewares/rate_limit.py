"""DOMAIN_RATE_LIMIT: at most that many attempts a second to one host, across every worker of the
namespace (DOMAIN_RATE_BURST of them may start at once); a host's [hosts] table may set its own rate
and burst (hosts/terms.py).

The slots are booked in the HostRates port (Redis: shared by every worker of the namespace; SQLite and
memory: by the worker's process): each attempt books the host's next slot; one whose slot is still to
come raises NotYet until then (its task is set aside), keeping the slot in the request's meta, so that
its next attempt takes the slot it booked rather than another. When the port cannot be reached the link does not stop the crawl: it spaces this
worker's own requests by 1 / DOMAIN_RATE_LIMIT until the port answers again. Not in the chain when
no host has a rate (DOMAIN_RATE_LIMIT 0 and no [hosts] rate, and ROBOTSTXT_OBEY off) or the backend has no
HostRates.

robots.txt's Crawl-delay is booked here too, as a rate of one request per Crawl-delay (burst 1), or the host's
own rate when it is lower: a site asks it of the crawler, not of each worker, so every worker of the namespace
shares it. The robots link, outside this one, has told the worker's HostPaces the host's Crawl-delay by then.
"""
from typing import Callable, Optional
from urllib.parse import urlsplit

import time

from ...errors import BackendUnavailable
from ...http import Request
from ..chain import ChainContext, DownloaderMiddleware, not_yet_if
from ...hosts.terms import HostTerms, Terms
from ...hosts.paces import HostPaces

BOOKED_SLOT = "_batchd_rate_slot"      # the meta key of the time.monotonic() of the slot an attempt booked


class RateLimitMiddleware(DownloaderMiddleware):
    """DOMAIN_RATE_LIMIT: an attempt starts when the host's next slot, booked for it in the HostRates port
    (shared by every worker of the namespace), comes."""

    def __init__(self, host_rates, per_second: float = 0.0, burst: int = 1, clock: Callable[[], float] = time.monotonic,
                 host_terms: Optional[HostTerms] = None, paces: Optional[HostPaces] = None):
        """`per_second` and `burst` hold at every host, unless `host_terms` (the worker's) are given; `paces`:
        where robots.txt's Crawl-delays are told (None: none is booked)."""
        self.host_rates, self.clock, self.paces = host_rates, clock, paces
        self.host_terms = host_terms or HostTerms(Terms(rate=per_second, burst=burst))

    @classmethod
    def from_context(cls, context: ChainContext) -> Optional["RateLimitMiddleware"]:
        obeys = context.settings.ROBOTSTXT_OBEY
        if context.host_rates is None or not (obeys or any(terms.rate for terms in context.host_terms.every())):
            return None
        if obeys and context.paces is not None:
            context.paces.crawl_delay_booked = True      # (booked here: the politeness link leaves it to us)
        return cls(context.host_rates, host_terms=context.host_terms, paces=context.paces if obeys else None)

    def process_request(self, request: Request) -> None:
        slot = request.meta.pop(BOOKED_SLOT, None)
        if slot is None:
            rate, burst = self._rate_of(request.url)
            if not rate:
                return None
            try:
                wait = self.host_rates.reserve(urlsplit(request.url).netloc.lower(), rate, burst)
            except BackendUnavailable:
                wait = 1.0 / rate     # the shared limit cannot be read: space this worker's requests alone
            slot = self.clock() + wait
        if slot > self.clock():
            request.meta[BOOKED_SLOT] = slot
            not_yet_if(request, slot - self.clock(), "DOMAIN_RATE_LIMIT")

    def _rate_of(self, url: str) -> tuple:
        """(requests a second, burst) at `url`'s host: its terms', or its Crawl-delay's when that is slower."""
        terms = self.host_terms.for_url(url)
        crawl_delay = self.paces.crawl_delay(url) if self.paces is not None else 0.0
        if crawl_delay > 0 and (not terms.rate or 1.0 / crawl_delay < terms.rate):
            return 1.0 / crawl_delay, 1
        return terms.rate, terms.burst
