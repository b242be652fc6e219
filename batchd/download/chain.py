"""The downloader's middleware chain: what happens to a request around each attempt to send it.

DOWNLOADER_MIDDLEWARES names the chain, outermost first, as dotted paths of `DownloaderMiddleware`
classes; batchd's own retries, proxies, robots.txt, rate limit, politeness and counters are links of
it (download/middlewares/, one file each), so a spider can reorder, drop or replace any of them. One attempt runs:

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
import time
from urllib.parse import urlsplit
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Union

import requests
from requests.exceptions import ChunkedEncodingError

from ..errors import ConfigError
from ..http import Request, Response
from ..hosts.terms import HostTerms
from ..hosts.paces import HostPaces

log = logging.getLogger("batchd")

TRANSIENT_ERRORS = (requests.ConnectionError, requests.Timeout, ChunkedEncodingError)   # failures that may heal
CHECK_IN_SLACK = 5.0            # beyond a promised wait: scheduling delays on a loaded machine

Outcome = Union[Response, Request, Exception]


class PageRejected(Exception):
    """A 2xx page the spider's validate() rejected: retried like a 503."""

    def __init__(self, response, why):
        super().__init__(f"rejected by validate(){': ' + why if why else ''}")
        self.response = response


class NotYet(BaseException):
    """Raised by a link's process_request when `request` may not be sent now (its host's turn, a breaker
    open, its own retry backoff): the worker sets the request's task aside for `after` seconds
    (math.inf: until a request to `host` ends in this worker) and its thread takes other work; the
    request, as raised, is the one sent when the task comes back. A BaseException: no link's
    process_exception can turn it into an outcome, every link that took the request is told (and gives
    back what it took), and nothing is charged to the request (no retry, no failure)."""

    def __init__(self, request: Request, after: float, why: str):
        super().__init__(f"{request.url}: not before {after:.3g} s ({why})")
        self.request, self.after, self.why = request, after, why
        self.host = urlsplit(request.url).netloc.lower()
        self.attempts = 0             # the request's attempts before this one (the downloader's count)


def not_yet_if(request: Request, seconds: float, why: str) -> None:
    """A link's word that `request` waits `seconds` (none if <= 0) before it goes."""
    if seconds > 0:
        raise NotYet(request, seconds, why)


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
    """What a middleware may use, handed to it by the one place that builds a worker's parts
    (batchd/assembly.py): the worker's settings, the terms of each host (HOSTS over the global settings,
    built once per process), the worker's per-host pace (hosts/paces.py), its spider, its counters for the
    batch (a link never waits: it raises NotYet), `download`: one attempt at a request, outside the chain
    (robots.txt is fetched with it), the HostRates and HostBreakers ports, its threads, its Prometheus
    counters (batchd.worker.worker_metrics.WorkerMetrics; None with METRICS_PORT off), its Alerts, and its
    attempts in flight per host (middlewares/stats.py's HostsInFlight; None: the link keeps its own)."""
    settings: Any
    host_terms: HostTerms
    paces: HostPaces
    spider: Any = None
    stats: Counts = NoCounts()
    download: Optional[Callable[[Request], Response]] = None
    host_rates: Any = None
    threads: int = 1
    metrics: Any = None
    host_breakers: Any = None
    alerts: Any = None
    in_flight: Any = None


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


# batchd's own links by the paths they had before (users' config files name them, and keep working): a module
# whose links all went to one new module, and class by class those of the modules that were split up.
MOVED_MODULES = {"batchd.robots": "batchd.download.middlewares.robots",
                 "batchd.throttle": "batchd.download.middlewares.throttle",
                 "batchd.proxies": "batchd.download.middlewares.proxies",
                 "batchd.politeness": "batchd.download.middlewares.politeness"}
MOVED_LINKS = {
    # batchd/middleware.py, then this module, held the chain with the retry, rate-limit and counting links.
    "batchd.middleware.RetryMiddleware": "batchd.download.middlewares.retry",
    "batchd.download.chain.RetryMiddleware": "batchd.download.middlewares.retry",
    "batchd.middleware.RateLimitMiddleware": "batchd.download.middlewares.rate_limit",
    "batchd.download.chain.RateLimitMiddleware": "batchd.download.middlewares.rate_limit",
    "batchd.middleware.StatsMiddleware": "batchd.download.middlewares.stats",
    "batchd.download.chain.StatsMiddleware": "batchd.download.middlewares.stats",
    # batchd/metrics.py, then reporting/metrics.py, held the fetch latency link with the Prometheus server.
    "batchd.metrics.FetchLatencyMiddleware": "batchd.download.middlewares.latency",
    "batchd.reporting.metrics.FetchLatencyMiddleware": "batchd.download.middlewares.latency",
}
_told_moved: set = set()


def _middleware_class(path: str) -> type[DownloaderMiddleware]:
    module_name, _, name = path.rpartition(".")
    moved_to = MOVED_LINKS.get(path) or MOVED_MODULES.get(module_name)
    if moved_to is not None:
        module_name = moved_to
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
