"""RetryMiddleware: another attempt at what may heal, after a wait, up to SPIDER_MAX_RETRY_TIMES.

What may heal: a network error or a timeout (the chain's TRANSIENT_ERRORS), a 5xx, 408 or 429, and a
2xx page the spider's validate() rejected (PageRejected). Anything else (a 404, a malformed URL) would
fail the same way again and is left to the downloader to fail at once.

The wait is the server's Retry-After on a 429 or 503 (capped at backoff_max), else a fully jittered
exponential backoff, so that workers that failed together do not come back together. The link returns
the request it was given, replaced and not to go before the wait is over: at the top of the chain its
next attempt raises NotYet until then, so no thread waits it out in a worker (the task is set aside).
Each retry is a new attempt from the top of the chain: the proxy, the rate limit and the host's turn
are taken again and download_midware runs afresh. Retries are counted by reason
(retry/reason_count/HTTP 503), and a request that spends them all under retry/max_reached.
"""
import random
import re
import time
from datetime import timezone
from email.utils import parsedate_to_datetime
from typing import Callable, Optional, Union

from ...http import Request, Response
from ..chain import TRANSIENT_ERRORS, ChainContext, Counts, DownloaderMiddleware, NoCounts, PageRejected, not_yet_if

RETRY_AFTER_STATUSES = frozenset({429, 503})
RETRY_TIMES = "retry_times"     # the meta key that counts a request's retries (Scrapy's name for it)
RETRY_AT = "_batchd_retry_at"   # the meta key of the time.monotonic() before which a retry does not go


class RetryMiddleware(DownloaderMiddleware):
    """Retries what may heal (network errors, timeouts, 5xx, 408, 429, a page validate() rejected) up to
    SPIDER_MAX_RETRY_TIMES (or the request's max_retry_times), after a jittered exponential backoff or
    the server's Retry-After, and counts the retries by reason."""

    def __init__(self, max_retry_times: int = 3, backoff_base: float = 0.5, backoff_max: float = 30.0,
                 stats: Counts = NoCounts(), clock: Callable[[], float] = time.monotonic):
        self.max_retry_times, self.backoff_base, self.backoff_max = max_retry_times, backoff_base, backoff_max
        self.stats, self.clock = stats, clock

    @classmethod
    def from_context(cls, context: ChainContext) -> "RetryMiddleware":
        return cls(context.settings.SPIDER_MAX_RETRY_TIMES, stats=context.stats)

    def process_request(self, request: Request) -> None:
        at = request.meta.get(RETRY_AT)
        if at is not None:
            not_yet_if(request, at - self.clock(), "retry backoff")

    def process_response(self, request: Request, response: Response) -> Union[Response, Request]:
        if 500 <= response.status_code < 600 or response.status_code in (408, 429):
            return self._retry(request, response) or response
        return response

    def process_exception(self, request: Request, exception: Exception) -> Optional[Request]:
        if isinstance(exception, TRANSIENT_ERRORS + (PageRejected,)):
            return self._retry(request, exception)
        return None

    def _retry(self, request: Request, outcome) -> Optional[Request]:
        """The request to try again, after the wait; None once its retries are spent."""
        retries = request.meta.get(RETRY_TIMES, 0)
        own = request.retry.max_retry_times
        limit = self.max_retry_times if own is None else own
        if retries >= limit:
            if limit:
                self.stats.inc("retry/max_reached")
            return None
        self.stats.inc("retry/count")
        self.stats.inc(f"retry/reason_count/{retry_reason(outcome)}")
        again = request.replace()
        again.meta[RETRY_TIMES] = retries + 1
        again.meta[RETRY_AT] = self.clock() + self._wait_before_retry(outcome, retries + 1)
        return again

    def _wait_before_retry(self, outcome, attempts: int) -> float:
        if isinstance(outcome, Response) and outcome.status_code in RETRY_AFTER_STATUSES:
            asked = retry_after_seconds(outcome.headers.get("Retry-After"))
            if asked is not None:
                return min(asked, self.backoff_max)
        # Full jitter spreads out workers that failed together. The exponent is capped only so that a
        # huge retry count cannot overflow the float.
        ceiling = min(self.backoff_max, self.backoff_base * 2 ** min(attempts - 1, 64))
        return random.uniform(0, ceiling)


def retry_reason(outcome) -> str:
    """What a retry is counted under: 'HTTP 503', 'ReadTimeout', 'rejected by validate()'."""
    if isinstance(outcome, Response):
        return f"HTTP {outcome.status_code}"
    if isinstance(outcome, PageRejected):
        return "rejected by validate()"
    return type(outcome).__name__


def retry_after_seconds(value: Optional[str]) -> Optional[float]:
    """Seconds asked for by a Retry-After header (delay or HTTP-date), or None if unreadable."""
    if not value:
        return None
    value = value.strip()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)  # HTTP-dates are always GMT
    return max(0.0, when.timestamp() - time.time())
