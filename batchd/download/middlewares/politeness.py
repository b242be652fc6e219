"""Politeness toward each site, across the threads of a worker: at most CONCURRENT_REQUESTS_PER_DOMAIN
requests in flight to one host, and DOWNLOAD_DELAY seconds between two requests to it (randomised
0.5x to 1.5x unless RANDOMIZE_DOWNLOAD_DELAY is off, so that a site sees no fixed rhythm), or what the
host's [hosts] table says (hosts/terms.py). DOMAIN_RATE_LIMIT is a backend's HostRates port
(hosts/rates.py in one process, Redis for every worker).

This link is the one gate of a host's pace: robots.txt's Crawl-delay and the throttle tell the shared
HostPaces their delays, and the gap after a start is the largest of them and the host's own delay.
Each attempt (retries too) takes its turn and gives it back when the attempt ends. An attempt whose
turn has not come takes nothing and raises NotYet: after the delay, or (math.inf) once a request to
the host ends; in a worker its task is set aside and the thread takes other work.
"""
from typing import Optional

from ...http import Request, Response
from ..chain import ChainContext, DownloaderMiddleware, NotYet
from ...hosts.paces import HostPaces, needs_pacing


class PolitenessMiddleware(DownloaderMiddleware):
    """Each attempt takes its turn at its host (in the chain only when its paces could hold one back)."""

    def __init__(self, paces: HostPaces):
        self.paces = paces

    @classmethod
    def from_context(cls, context: ChainContext) -> Optional["PolitenessMiddleware"]:
        return cls(context.paces) if needs_pacing(context.paces, context.settings, context.threads) else None

    def process_request(self, request: Request) -> None:
        wait = self.paces.take(request.url)
        if wait > 0:
            raise NotYet(request, wait, "the host's turn")

    def process_response(self, request: Request, response: Response) -> Response:
        self.paces.give_back(request.url)
        return response

    def process_exception(self, request: Request, exception: BaseException) -> None:
        self.paces.give_back(request.url)
        return None
