"""The downloader's middleware chain: what happens to a request around each attempt to send it.

DOWNLOADER_MIDDLEWARES names the chain, outermost first, as dotted paths of `DownloaderMiddleware`
classes; batchd's own retries, proxies, robots.txt, rate limit, politeness and counters are links of
it, so a spider can reorder, drop or replace any of them. One attempt runs:

    process_request   outermost to innermost: None goes on; a Request goes on in its place; a
                      Response answers without sending (the middlewares inside are skipped)
    the spider's download_midware, the send, the spider's validate
    process_response  innermost to outermost, or process_exception if the attempt raised: a
                      Response goes on outward; a Request ends the attempt and is the next one
                      (the middlewares outside are not called); process_exception returning None
                      passes the exception on outward

Each middleware is called back (process_response or process_exception) with the request as it
passed it on, so one that takes something for an attempt (a place in a host's queue) gets it back.
A Request returned by process_response or process_exception is a new attempt from the top: the
retry middleware returns the request it was given, so that download_midware changes every attempt
afresh. The attempt's outcome (a 2xx Response, or what failed) is the downloader's to judge.
"""
import importlib
import logging
import random
import re
import time
from dataclasses import dataclass
from datetime import timezone
from email.utils import parsedate_to_datetime
from typing import Any, Callable, Optional, Protocol, Union
from urllib.parse import urlsplit

import requests
from requests.exceptions import ChunkedEncodingError

from ..errors import BackendUnavailable, ConfigError
from ..http import Request, RequestFailed, Response
from ..process.threads import guard

log = logging.getLogger("batchd")

TRANSIENT_ERRORS = (requests.ConnectionError, requests.Timeout, ChunkedEncodingError)
RETRY_AFTER_STATUSES = frozenset({429, 503})
RETRY_TIMES = "retry_times"     # the meta key that counts a request's retries (Scrapy's name for it)
CHECK_IN_SLACK = 5.0            # beyond a promised wait: scheduling delays on a loaded machine

Outcome = Union[Response, Request, Exception]


class PageRejected(Exception):
    """A 2xx page the spider's validate() rejected: retried like a 503."""

    def __init__(self, response, why):
        super().__init__(f"rejected by validate(){': ' + why if why else ''}")
        self.response = response


class Counts(Protocol):
    def inc(self, name: str, count: int = 1) -> None: ...


class NoCounts:
    def inc(self, name: str, count: int = 1) -> None:
        pass


def sleep_without_stop(seconds: float) -> bool:
    time.sleep(seconds)
    return False


@dataclass
class ChainContext:
    """What a middleware may use: the worker's settings and spider, its counters for the batch, a wait
    that ends early (returning True) when the worker stops, the HostRates port, `download`: one
    attempt at a request, outside the chain (robots.txt is fetched with it), and the worker's
    Prometheus counters (batchd.supervisor.metrics.WorkerMetrics; None with METRICS_PORT off)."""
    settings: Any
    spider: Any = None
    stats: Counts = NoCounts()
    sleep: Callable[[float], bool] = sleep_without_stop
    download: Optional[Callable[[Request], Response]] = None
    host_rates: Any = None
    threads: int = 1
    metrics: Any = None


class DownloaderMiddleware:
    """A link of DOWNLOADER_MIDDLEWARES: override what you need (see this module's text). A worker makes
    one per process with `from_context`, which may return None: not needed with these settings."""

    context: Optional[ChainContext] = None

    @classmethod
    def from_context(cls, context: ChainContext) -> Optional["DownloaderMiddleware"]:
        middleware = cls()
        middleware.context = context
        return middleware

    def batch_started(self, batch_id: Any) -> None:
        """The worker starts on the tasks of a new batch (what a middleware keeps per batch starts afresh)."""

    def process_request(self, request: Request) -> Union[None, Request, Response]:
        return None

    def process_response(self, request: Request, response: Response) -> Union[Response, Request]:
        return response

    def process_exception(self, request: Request, exception: Exception) -> Union[None, Response, Request]:
        return None

    def close(self) -> None:
        """The worker stops."""


def _overrides(middleware: DownloaderMiddleware, name: str):
    """The bound method if the middleware's class overrides the base's do-nothing one, else None."""
    method = getattr(type(middleware), name)
    return getattr(middleware, name) if method is not getattr(DownloaderMiddleware, name) else None


class _Link:
    __slots__ = ("middleware", "name", "on_request", "on_response", "on_exception")

    def __init__(self, middleware: DownloaderMiddleware):
        self.middleware, self.name = middleware, type(middleware).__name__
        self.on_request = _overrides(middleware, "process_request")
        self.on_response = _overrides(middleware, "process_response")
        self.on_exception = _overrides(middleware, "process_exception")


class MiddlewareChain:
    def __init__(self, middlewares: list):
        self.middlewares = list(middlewares)
        self._links = [_Link(m) for m in self.middlewares]

    def attempt(self, request: Request, send: Callable[[Request], Response]) -> Outcome:
        """One attempt through the chain: a Response, a Request to send as the next attempt, or the
        exception it failed with (returned). A BaseException (the task's timeout) passes through, after
        every middleware that took the request has been told."""
        passed: list = []       # (link, the request as it went in)
        outcome: Outcome
        try:
            outcome = self._inward(request, passed, send)
        except Exception as exc:
            outcome = exc
        except BaseException as exc:
            self._tell_all(passed, exc)
            raise
        return self._outward(passed, outcome)

    def _inward(self, request: Request, passed: list, send) -> Outcome:
        for link in self._links:
            result = link.on_request(request) if link.on_request is not None else None
            passed.append((link, request))     # (only once it took the request: one that raised has nothing to undo)
            if result is None:
                continue
            if isinstance(result, Response):
                return result
            if isinstance(result, Request):
                request = result
            elif result is not None:
                raise TypeError(f"{link.name}.process_request returned a {type(result).__name__}: "
                                "return None, a Request or a Response")
        return send(request)

    def _outward(self, passed: list, outcome: Outcome) -> Outcome:
        for link, request in reversed(passed):
            try:
                if isinstance(outcome, Exception):
                    if link.on_exception is not None:
                        outcome = _checked(link, "process_exception", link.on_exception(request, outcome)) or outcome
                elif link.on_response is not None:
                    outcome = _checked(link, "process_response", link.on_response(request, outcome))
            except Exception as exc:
                outcome = exc
            except BaseException as exc:
                self._tell_all(passed[:passed.index((link, request))], exc)
                raise
            if isinstance(outcome, Request):
                return outcome
        return outcome

    @staticmethod
    def _tell_all(passed: list, exc: BaseException) -> None:
        """A BaseException: every middleware that took the request is told, whatever it answers."""
        for link, request in reversed(passed):
            if link.on_exception is not None:
                try:
                    link.on_exception(request, exc)
                except Exception:
                    log.exception("%s.process_exception failed", link.name)

    def batch_started(self, batch_id: Any) -> None:
        for middleware in self.middlewares:
            middleware.batch_started(batch_id)

    def close(self) -> None:
        for middleware in self.middlewares:
            middleware.close()


def _checked(link: _Link, method: str, result):
    if result is None and method == "process_exception":
        return None
    if not isinstance(result, (Response, Request)):
        raise TypeError(f"{link.name}.{method} returned a {type(result).__name__}: return a Response or a Request"
                        + (" (or None)" if method == "process_exception" else ""))
    return result


def chain_from_settings(context: ChainContext) -> MiddlewareChain:
    """DOWNLOADER_MIDDLEWARES made into the chain (ConfigError naming a path that does not load)."""
    made = (_middleware_class(path).from_context(context) for path in context.settings.DOWNLOADER_MIDDLEWARES)
    return MiddlewareChain([m for m in made if m is not None])


# batchd's own links by the paths they had before the package was laid out by role: users' config files
# name them, and keep working.
MOVED_MODULES = {"batchd.middleware": "batchd.download.chain", "batchd.robots": "batchd.download.middlewares.robots",
                 "batchd.throttle": "batchd.download.middlewares.throttle",
                 "batchd.proxies": "batchd.download.middlewares.proxies",
                 "batchd.politeness": "batchd.download.middlewares.politeness",
                 "batchd.metrics": "batchd.supervisor.metrics"}
_told_moved: set = set()


def _middleware_class(path: str) -> type[DownloaderMiddleware]:
    module_name, _, name = path.rpartition(".")
    if module_name in MOVED_MODULES:
        module_name = MOVED_MODULES[module_name]
        if path not in _told_moved:
            _told_moved.add(path)
            log.warning("DOWNLOADER_MIDDLEWARES: %s has moved; write %s.%s", path, module_name, name)
    try:
        found = getattr(importlib.import_module(module_name), name) if module_name else None
    except ImportError as e:
        raise ConfigError(f"DOWNLOADER_MIDDLEWARES: cannot import {path!r}: {e}") from None
    except AttributeError:
        found = None
    if not (isinstance(found, type) and issubclass(found, DownloaderMiddleware)):
        raise ConfigError(f"DOWNLOADER_MIDDLEWARES: {path!r} is not a DownloaderMiddleware class "
                          "(a dotted path: package.module.Class)")
    return found


# --- batchd's own links ------------------------------------------------------------------

class RetryMiddleware(DownloaderMiddleware):
    """Retries what may heal (network errors, timeouts, 5xx, 408, 429, a page validate() rejected) up to
    SPIDER_MAX_RETRY_TIMES (or the request's max_retry_times), after a jittered exponential backoff or
    the server's Retry-After, and counts the retries by reason."""

    def __init__(self, max_retry_times: int = 3, backoff_base: float = 0.5, backoff_max: float = 30.0,
                 sleep: Callable[[float], bool] = sleep_without_stop, stats: Counts = NoCounts()):
        self.max_retry_times, self.backoff_base, self.backoff_max = max_retry_times, backoff_base, backoff_max
        self.sleep, self.stats = sleep, stats

    @classmethod
    def from_context(cls, context: ChainContext) -> "RetryMiddleware":
        return cls(context.settings.SPIDER_MAX_RETRY_TIMES, sleep=context.sleep, stats=context.stats)

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
        limit = self.max_retry_times if request.max_retry_times is None else request.max_retry_times
        if retries >= limit:
            if limit:
                self.stats.inc("retry/max_reached")
            return None
        self.stats.inc("retry/count")
        self.stats.inc(f"retry/reason_count/{retry_reason(outcome)}")
        wait = self._wait_before_retry(outcome, retries + 1)
        with guard.waiting(wait + CHECK_IN_SLACK):
            if self.sleep(wait):
                raise RequestFailed(request, outcome, "stopped", retries + 1)
        again = request.replace()
        again.meta[RETRY_TIMES] = retries + 1
        return again

    def _wait_before_retry(self, outcome, attempts: int) -> float:
        if isinstance(outcome, Response) and outcome.status_code in RETRY_AFTER_STATUSES:
            asked = _retry_after_seconds(outcome.headers.get("Retry-After"))
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


def _retry_after_seconds(value: Optional[str]) -> Optional[float]:
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


class RateLimitMiddleware(DownloaderMiddleware):
    """DOMAIN_RATE_LIMIT: an attempt starts when the host's next slot, booked for it in the HostRates port
    (shared by every worker of the namespace), comes."""

    def __init__(self, host_rates, per_second: float, burst: int = 1,
                 sleep: Callable[[float], bool] = sleep_without_stop):
        self.host_rates, self.per_second, self.burst, self.sleep = host_rates, per_second, burst, sleep

    @classmethod
    def from_context(cls, context: ChainContext) -> Optional["RateLimitMiddleware"]:
        settings = context.settings
        if not settings.DOMAIN_RATE_LIMIT or context.host_rates is None:
            return None
        return cls(context.host_rates, settings.DOMAIN_RATE_LIMIT, settings.DOMAIN_RATE_BURST, context.sleep)

    def process_request(self, request: Request) -> None:
        try:
            wait = self.host_rates.reserve(urlsplit(request.url).netloc.lower(), self.per_second, self.burst)
        except BackendUnavailable:
            wait = 1.0 / self.per_second     # the shared limit cannot be read: space this worker's requests alone
        wait_or_stop(self.sleep, wait, request)


def wait_or_stop(sleep: Callable[[float], bool], seconds: float, request: Request) -> None:
    """A link's wait before `request` goes on (a wait by design, promised to the guard); RequestFailed
    ("stopped") if the worker stops meanwhile."""
    if seconds <= 0:
        return
    with guard.waiting(seconds + CHECK_IN_SLACK):
        if sleep(seconds):
            raise RequestFailed(request, InterruptedError("stopped"), "stopped", 1)


class StatsMiddleware(DownloaderMiddleware):
    """The batch's counters of what was sent and what came back (innermost: every attempt counts)."""

    def __init__(self, stats: Counts):
        self.stats = stats

    @classmethod
    def from_context(cls, context: ChainContext) -> "StatsMiddleware":
        return cls(context.stats)

    def process_request(self, request: Request) -> None:
        self.stats.inc("downloader/request_count")

    def process_response(self, request: Request, response: Response) -> Response:
        self.stats.inc("downloader/response_count")
        self.stats.inc(f"downloader/response_status_count/{response.status_code}")
        self.stats.inc("downloader/response_bytes", len(response.content))
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        if isinstance(exception, PageRejected):     # a page came back; validate() turned it down
            self.process_response(request, exception.response)
            return None
        self.stats.inc("downloader/exception_count")
        self.stats.inc(f"downloader/exception_type_count/{type(exception).__name__}")
        return None
