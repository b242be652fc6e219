"""HostBreakerMiddleware: a dead host is found and spared (HOST_BREAKER_FAILURES, HOST_BREAKER_PROBE,
HOST_BREAKER_PROBE_MAX, HOST_DOWN_GIVE_UP).

A worker counts each host's failures in a row itself (a connect error, a timeout, a 5xx, a 429); at
HOST_BREAKER_FAILURES it opens the host's breaker in the HostBreakers port (hosts/breakers.py:
shared by every worker of the namespace with Redis). While it is open the host's requests are not sent:
the link raises NotYet until the next probe, and their tasks are set aside, neither failed nor charged a
retry. When the probe's time comes, one request claims it (one at a time across the namespace) and is
sent: an answer closes the breaker, a failure doubles the wait, up to HOST_BREAKER_PROBE_MAX. A 429 or
503 with Retry-After holds the whole host off that long (at most HOST_BREAKER_PROBE_MAX).

A host found serving a block page (QUALITY_BLOCK_HOLD: the worker's task run judges each page after its
callback, quality/tally.py) is held the same way: `page_judged` opens its breaker as HOST_BREAKER_FAILURES
failures would. Its probe's page answered 2xx leaves the breaker probing until that page too is judged: no
block page closes it, a block page again counts as a failed probe (the wait doubles, HOST_DOWN_GIVE_UP counts
on). A probe's page that is never judged (its worker died) is claimed again once its claim lapses.

A host whose breaker has been open HOST_DOWN_GIVE_UP seconds is down: its requests fail at once, all
with one reason, `host X down since <time> (HOST_DOWN_GIVE_UP=1800 s)`, so that `batchd failed` shows
them as one group; the first worker to say so for a batch logs one WARNING line and raises one alert
(`host_down`). Probes go on at the cap: an answer closes the breaker again.

The link sits right inside RetryMiddleware: it sees an attempt's outcome first, and answers a failure
that opens the breaker, or meets it open, with the request itself (a new attempt from the top, which
then waits here), so the retry link never counts it. What it costs in round trips: none for a host
that has not failed in this worker; one read of the port at most every LOOK_EVERY s per host that
failed here; one step per state change (open, a probe claimed, a probe's end, down said).
"""
import logging
import time
from datetime import datetime, timezone
from typing import Callable, Optional, Union
from urllib.parse import urlsplit

from ...hosts.breakers import LOOK_EVERY, BreakerPhase, BreakerState, BreakerView
from ...http import Request, RequestFailed, Response
from ..chain import TRANSIENT_ERRORS, ChainContext, DownloaderMiddleware, NotYet, not_yet_if
from .retry import RETRY_AFTER_STATUSES, retry_after_seconds

log = logging.getLogger("batchd")

PROBE = "_batchd_breaker_probe"    # the meta key of the request that is its host's probe
PROBE_PAGE = "_batchd_breaker_probe_page"    # the meta key of a probe's 2xx page, until page_judged
PROBE_SLACK = 5.0                  # s beyond DOWNLOAD_TIMEOUT that a probe's claim lasts (its worker may die)


class HostDown(Exception):
    """A host down past HOST_DOWN_GIVE_UP: its request fails at once."""


def host_of(request: Request) -> str:
    return urlsplit(request.url).netloc.lower()


def down_reason(host: str, since: float, give_up: float) -> str:
    """The one reason of every request failed for a host down (`batchd failed` groups by it)."""
    when = datetime.fromtimestamp(since, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"host {host} down since {when} (HOST_DOWN_GIVE_UP={give_up:g} s)"


class HostBreakerMiddleware(DownloaderMiddleware):
    """A host that keeps failing is not sent requests until a probe answers; down for HOST_DOWN_GIVE_UP, its
    requests fail at once."""

    def __init__(self, breakers, failures: int = 5, probe: float = 5.0, probe_max: float = 300.0,
                 give_up: float = 1800.0, probe_seconds: float = 185.0, alerts=None,
                 clock: Callable[[], float] = time.time):
        self.failures, self.give_up, self.alerts, self.clock = failures, give_up, alerts, clock
        self.view = BreakerView(breakers, clock)
        self.probe_max = max(probe, probe_max)
        self.probe, self.probe_seconds = min(probe, self.probe_max), probe_seconds
        self.batch_id = None
        self.pages_judged = False      # block pages hold hosts: a probe's 2xx page waits for its judgement

    @classmethod
    def from_context(cls, context: ChainContext) -> Optional["HostBreakerMiddleware"]:
        s = context.settings
        if not s.HOST_BREAKER_FAILURES or context.host_breakers is None:
            return None
        return cls(context.host_breakers, s.HOST_BREAKER_FAILURES, s.HOST_BREAKER_PROBE, s.HOST_BREAKER_PROBE_MAX,
                   s.HOST_DOWN_GIVE_UP, s.DOWNLOAD_TIMEOUT + PROBE_SLACK, context.alerts)

    def batch_started(self, batch_id) -> None:
        self.batch_id = batch_id

    def judge_pages(self) -> "HostBreakerMiddleware":
        """From now on the task run judges every page it gets (page_judged): block pages hold their hosts."""
        self.pages_judged = True
        return self

    def page_judged(self, response: Response, block: Optional[str]) -> None:
        """The task run judged a page: a block page (`block`: what gave it away) opens its host's breaker for
        every worker; a probe's page closes it, or, a block page again, fails the probe."""
        probe = response.meta.pop(PROBE_PAGE, None)
        if block is None and not probe:
            return
        host, now = host_of(response.request), self.clock()
        if block is None:
            self._close(host)
        elif probe:
            self.view.step(host, "probe_failed", now, self.probe_max)
        else:
            self.view.start_over(host)
            _, opened = self.view.step(host, "trip", now, (1, self.probe))     # (one failure: the block page)
            if opened:
                log.info("host %s served a block page (%s): its breaker opens, first probe in %g s", host, block,
                         self.probe)

    def process_request(self, request: Request) -> None:
        host = host_of(request)
        request.meta.pop(PROBE, None)      # (a probe that did not go is no probe in a new attempt)
        if not self.view.watches(host):
            return None                    # a host that has not failed here: no round trip
        now = self.clock()
        state = self.view.look(host, now)
        if state is None:
            return None
        not_yet_if(request, state.not_before - now, f"Retry-After of {host}")
        if state.phase is BreakerPhase.CLOSED:
            return None
        if state.phase is not BreakerPhase.PROBING and state.next_probe <= now:
            state, won = self.view.step(host, "claim", now, self.probe_seconds)
            if won:
                request.meta[PROBE] = True
                return None
            if state is None or state.phase is BreakerPhase.CLOSED:
                return None
        if state.phase is BreakerPhase.DOWN or now - state.since >= self.give_up:
            raise self._given_up(request, host, state, now)
        wait = state.next_probe - now
        raise NotYet(request, wait if wait > 0 else LOOK_EVERY, f"{host}'s breaker is open")

    def process_response(self, request: Request, response: Response) -> Union[Response, Request]:
        status = response.status_code
        if status in RETRY_AFTER_STATUSES:
            self._hold_off(request, response)
        if status >= 500 or status == 429:
            return self._failed(request) or response
        self._answered(request, response)
        return response

    def process_exception(self, request: Request, exception) -> Optional[Request]:
        if isinstance(exception, TRANSIENT_ERRORS):
            return self._failed(request)
        if isinstance(exception, Exception):
            self._answered(request)        # wrongly (a bad certificate, a page validate() rejected), but it answered
        elif request.meta.pop(PROBE, None):
            self.view.step(host_of(request), "release", self.clock())   # a NotYet inside, a timeout: the probe did not go
        return None

    def _failed(self, request: Request) -> Optional[Request]:
        """The request again when its host's breaker is open (by this failure or another worker's): no retry
        counted; None for a failure the retry link judges."""
        host, now = host_of(request), self.clock()
        if request.meta.get(PROBE):
            state, _ = self.view.step(host, "probe_failed", now, self.probe_max)
            return _again(request) if state is not None else None
        streak = self.view.failed_in_a_row(host)
        if streak >= self.failures:
            self.view.start_over(host)
            state, opened = self.view.step(host, "trip", now, (streak, self.probe))
            if opened:
                log.info("host %s: %d failures in a row: its breaker opens, first probe in %g s", host, streak,
                         self.probe)
        else:
            state = self.view.look(host, now)
        if state is not None and state.phase is not BreakerPhase.CLOSED:
            return _again(request)
        return None

    def _answered(self, request: Request, response: Optional[Response] = None) -> None:
        """The host answered: its count starts again, and a probe's answer closes its breaker (a 2xx page,
        with pages judged: once the task run found it no block page)."""
        host = host_of(request)
        if not self.view.watches(host):
            return
        self.view.start_over(host)
        if request.meta.pop(PROBE, None):
            if self.pages_judged and response is not None and 200 <= response.status_code < 300:
                response.meta[PROBE_PAGE] = True
            else:
                self._close(host)
            return
        self.view.forget_if_closed(host)

    def _close(self, host: str) -> None:
        if self.view.close(host):
            log.info("host %s answered its probe: its breaker closes", host)

    def _hold_off(self, request: Request, response: Response) -> None:
        """A Retry-After on a 429 or 503 holds the whole host off, for every worker."""
        seconds = retry_after_seconds(response.headers.get("Retry-After"))
        if seconds:
            now = self.clock()
            self.view.step(host_of(request), "hold_off", now, now + min(seconds, self.probe_max))

    def _given_up(self, request: Request, host: str, state: BreakerState, now: float) -> RequestFailed:
        reason = down_reason(host, state.since, self.give_up)
        if self.view.first_to_say(host, self.batch_id):
            _, first = self.view.step(host, "say_down", now, str(self.batch_id))
            if first:
                self._say_down(host, reason, state)
        return RequestFailed(request, HostDown(reason), reason, 0)

    def _say_down(self, host: str, reason: str, state: BreakerState) -> None:
        """Once per host and batch in the namespace: one WARNING line, one alert."""
        message = f"batch {self.batch_id}: {reason}: its tasks fail at once until a probe answers"
        if self.alerts is not None and self.batch_id is not None:
            self.alerts.raise_alert("host_down", self.batch_id, message, about=host, site=host, failures=state.failures)
        else:
            log.warning("%s", message)


def _again(request: Request) -> Request:
    again = request.replace()
    again.meta.pop(PROBE, None)
    return again
