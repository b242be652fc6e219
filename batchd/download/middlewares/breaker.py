"""HostBreakerMiddleware: a dead host is found and spared (HOST_BREAKER_FAILURES, HOST_BREAKER_PROBE,
HOST_BREAKER_PROBE_MAX, HOST_DOWN_GIVE_UP).

A worker counts each host's failures in a row itself (a connect error, a timeout, a 5xx, a 429); at
HOST_BREAKER_FAILURES it opens the host's breaker in the HostBreakers port (hosts/breakers.py:
shared by every worker of the namespace with Redis). While it is open the host's requests are not sent:
the link raises NotYet until the next probe, and their tasks are set aside, neither failed nor charged a
retry. When the probe's time comes, one request claims it (one at a time across the namespace) and is
sent: an answer closes the breaker, a failure doubles the wait, up to HOST_BREAKER_PROBE_MAX. A 429 or
503 with Retry-After holds the whole host off that long (at most HOST_BREAKER_PROBE_MAX).

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
import threading
import time
from datetime import datetime, timezone
from typing import Callable, Optional, Union
from urllib.parse import urlsplit

from ...hosts.breakers import KEPT_HOSTS, BreakerPhase, BreakerState
from ...errors import BackendUnavailable
from ...http import Request, RequestFailed, Response
from ..chain import TRANSIENT_ERRORS, ChainContext, DownloaderMiddleware, NotYet, not_yet_if
from .retry import RETRY_AFTER_STATUSES, retry_after_seconds

log = logging.getLogger("batchd")

PROBE = "_batchd_breaker_probe"    # the meta key of the request that is its host's probe
LOOK_EVERY = 1.0                   # s: a worker reads the breaker of a host that failed here at most this often
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
        self.breakers, self.failures, self.give_up, self.alerts, self.clock = breakers, failures, give_up, alerts, clock
        self.probe_max = max(probe, probe_max)
        self.probe, self.probe_seconds = min(probe, self.probe_max), probe_seconds
        self.batch_id = None
        self._lock = threading.Lock()
        self._streaks: dict = {}       # host -> its failures in a row seen by this worker
        self._views: dict = {}         # host -> (its BreakerState or None, when read) for hosts that failed here
        self._said: set = set()        # (host, batch) this worker has said down (to the port)

    @classmethod
    def from_context(cls, context: ChainContext) -> Optional["HostBreakerMiddleware"]:
        s = context.settings
        if not s.HOST_BREAKER_FAILURES or context.host_breakers is None:
            return None
        return cls(context.host_breakers, s.HOST_BREAKER_FAILURES, s.HOST_BREAKER_PROBE, s.HOST_BREAKER_PROBE_MAX,
                   s.HOST_DOWN_GIVE_UP, s.DOWNLOAD_TIMEOUT + PROBE_SLACK, context.alerts)

    def batch_started(self, batch_id) -> None:
        self.batch_id = batch_id

    def process_request(self, request: Request) -> None:
        host = host_of(request)
        request.meta.pop(PROBE, None)      # (a probe that did not go is no probe in a new attempt)
        if host not in self._views:
            return None                    # a host that has not failed here: no round trip
        now = self.clock()
        state = self._view(host, now)
        if state is None:
            return None
        not_yet_if(request, state.not_before - now, f"Retry-After of {host}")
        if state.phase is BreakerPhase.CLOSED:
            return None
        if state.phase is not BreakerPhase.PROBING and state.next_probe <= now:
            state, won = self._step(host, "claim", now, self.probe_seconds)
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
        self._answered(request)
        return response

    def process_exception(self, request: Request, exception) -> Optional[Request]:
        if isinstance(exception, TRANSIENT_ERRORS):
            return self._failed(request)
        if isinstance(exception, Exception):
            self._answered(request)        # wrongly (a bad certificate, a page validate() rejected), but it answered
        elif request.meta.pop(PROBE, None):
            self._step(host_of(request), "release", self.clock())   # a NotYet inside, a timeout: the probe did not go
        return None

    def _failed(self, request: Request) -> Optional[Request]:
        """The request again when its host's breaker is open (by this failure or another worker's): no retry
        counted; None for a failure the retry link judges."""
        host, now = host_of(request), self.clock()
        if request.meta.get(PROBE):
            state, _ = self._step(host, "probe_failed", now, self.probe_max)
            return _again(request) if state is not None else None
        with self._lock:
            if len(self._streaks) >= KEPT_HOSTS:
                self._streaks.clear()
            streak = self._streaks[host] = self._streaks.get(host, 0) + 1
        if streak >= self.failures:
            self._streaks.pop(host, None)
            state, opened = self._step(host, "trip", now, (streak, self.probe))
            if opened:
                log.info("host %s: %d failures in a row: its breaker opens, first probe in %g s", host, streak,
                         self.probe)
        else:
            state = self._view(host, now)
        if state is not None and state.phase is not BreakerPhase.CLOSED:
            return _again(request)
        return None

    def _answered(self, request: Request) -> None:
        """The host answered: its count starts again, and a probe's answer closes its breaker."""
        host = host_of(request)
        if host not in self._views:
            return
        self._streaks.pop(host, None)
        if request.meta.pop(PROBE, None):
            try:
                self.breakers.close(host)
            except BackendUnavailable:
                return
            log.info("host %s answered its probe: its breaker closes", host)
            self._views.pop(host, None)
            return
        kept = self._views.get(host)
        if kept is not None and (kept[0] is None or kept[0].phase is BreakerPhase.CLOSED
                                 and kept[0].not_before <= self.clock()):     # (a Retry-After still holds)
            self._views.pop(host, None)

    def _hold_off(self, request: Request, response: Response) -> None:
        """A Retry-After on a 429 or 503 holds the whole host off, for every worker."""
        seconds = retry_after_seconds(response.headers.get("Retry-After"))
        if seconds:
            now = self.clock()
            self._step(host_of(request), "hold_off", now, now + min(seconds, self.probe_max))

    def _given_up(self, request: Request, host: str, state: BreakerState, now: float) -> RequestFailed:
        reason = down_reason(host, state.since, self.give_up)
        said = (host, self.batch_id)
        if said not in self._said:
            self._said.add(said)
            _, first = self._step(host, "say_down", now, str(self.batch_id))
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

    def _view(self, host: str, now: float) -> Optional[BreakerState]:
        """The host's breaker as this worker last read it, read again once LOOK_EVERY old."""
        kept = self._views.get(host)
        if kept is not None and now - kept[1] < LOOK_EVERY:
            return kept[0]
        try:
            state = self.breakers.look(host)
        except BackendUnavailable:      # the shared state cannot be read: the breaker stays out of the way
            state = None
        self._remember(host, state, now)
        return state

    def _step(self, host: str, step: str, now: float, arg=None) -> tuple:
        try:
            state, answer = self.breakers.step(host, step, now, arg)
        except BackendUnavailable:
            return None, 0
        self._remember(host, state, now)
        return state, answer

    def _remember(self, host: str, state: Optional[BreakerState], now: float) -> None:
        with self._lock:
            if len(self._views) >= KEPT_HOSTS and host not in self._views:
                self._views = {h: kept for h, kept in self._views.items() if kept[0] is not None}
            self._views[host] = (state, now)


def _again(request: Request) -> Request:
    again = request.replace()
    again.meta.pop(PROBE, None)
    return again
