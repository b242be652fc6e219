"""The downloader: one Request in, a 2xx Response or RequestFailed out.

`Downloader.fetch` owns the retry loop: network errors, timeouts, 5xx, 408 and
429 are retried with jittered exponential backoff (or the server's Retry-After);
anything else that is not a 2xx fails at once with `RequestFailed`.

Two limits hold every attempt, redirects included. DOWNLOAD_TIMEOUT bounds the whole
response, where requests' timeout only bounds the wait for each read: one thread per
Downloader (`_DeadlineWatch`) shuts down the socket of a download past its deadline, and
the attempt fails with `DownloadTimeout`, retried like any timeout. DOWNLOAD_MAXSIZE bounds
the decoded body: a larger Content-Length fails before the body is read, and the body is
read and decompressed in pieces (batchd/bodies.py), so that a compression bomb fails with
`ResponseTooLarge` (not retried) once it has produced DOWNLOAD_MAXSIZE bytes.
"""
import logging
import os
import random
import re
import socket
import threading
import time
from contextlib import nullcontext
from datetime import timezone
from email.utils import parsedate_to_datetime
from functools import cache
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import requests
import urllib3.exceptions
from requests.adapters import HTTPAdapter
from requests.exceptions import (ChunkedEncodingError, InvalidSchema, InvalidURL,
                                 MissingSchema, SSLError)

from .bodies import ACCEPT_ENCODING, BodyReader, hooks_with
from .errors import BackendUnavailable
from .http import RequestFailed, Response
from .threads import check_in, guard, start_thread

log = logging.getLogger("batchd")

MALFORMED_URL_ERRORS = (MissingSchema, InvalidSchema, InvalidURL)
TRANSIENT_ERRORS = (requests.ConnectionError, requests.Timeout, ChunkedEncodingError)
RETRY_AFTER_STATUSES = frozenset({429, 503})

WATCH_IDLE_TICK = 5.0          # the deadline thread looks at least this often, so it can check in
WATCH_RECUT = 0.2              # a download cut while it had no socket (still connecting) is cut again this often
CHECK_IN_SLACK = 5.0           # beyond a promised wait: scheduling delays on a loaded machine
ORIGINS_REMEMBERED = 10000     # origins whose proxies from the environment are kept


class DownloadTimeout(requests.Timeout):
    """The whole response did not arrive within DOWNLOAD_TIMEOUT: retried like any timeout."""


class PageRejected(Exception):
    """A 2xx page the spider's validate() rejected: retried like a 503."""

    def __init__(self, response, why):
        super().__init__(f"rejected by validate(){': ' + why if why else ''}")
        self.response = response


def _judged(accept, request, response):
    """The response, or PageRejected if `accept` returns False or raises."""
    try:
        verdict = accept(request, response)
    except Exception as exc:    # raising is one of the two ways validate() rejects a page
        return PageRejected(response, f"{type(exc).__name__}: {_one_line(exc)}")
    return PageRejected(response, "") if verdict is False else response


def _sleep_without_stop(seconds):
    time.sleep(seconds)
    return False


class Downloader:
    """Fetches requests over one pooled requests.Session per thread, retrying what may heal,
    each attempt within `download_timeout` seconds and `maxsize` decoded bytes."""

    def __init__(self, max_retry_times=3, timeout=30.0, pool_size=10, backoff_base=0.5,
                 backoff_max=30.0, headers=None, sleep=None, download_timeout=180.0,
                 maxsize=64 * 1024 * 1024, user_agents=None, max_redirects=20, warnsize=0, verify=True,
                 proxy_pool=None, politeness=None, host_rates=None, rate_limit=0.0, rate_burst=1):
        """`headers` go with every request; `user_agents`: the User-Agent (several: one at random per
        request; none: batchd's own); `warnsize`: bytes of a body past which a warning names it (0:
        never); `verify`: check certificates (False, or a CA bundle's path); `proxy_pool`: the
        ProxyPool (batchd/proxies.py) every request without a proxy of its own goes through;
        `politeness`: the Politeness (batchd/politeness.py) each attempt takes its turn from;
        `host_rates` (the HostRates port), `rate_limit` and `rate_burst`: DOMAIN_RATE_LIMIT."""
        self.max_retry_times = max_retry_times
        self.timeout = timeout
        self.pool_size = pool_size
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.headers = dict(headers or {})
        self.sleep = sleep or _sleep_without_stop
        self.download_timeout = download_timeout
        self.maxsize = maxsize
        self.user_agents = tuple(user_agents or (_user_agent(),))
        self.max_redirects = max_redirects
        self.warnsize = warnsize
        self.verify = verify
        self.proxy_pool = proxy_pool
        self.politeness = politeness
        self.host_rates, self.rate_limit, self.rate_burst = host_rates, rate_limit, rate_burst
        if verify is False:
            # The worker said it once at its start; urllib3 would say it again for every request.
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        self._deadlines = _DeadlineWatch()
        self._local = threading.local()
        self._sessions = []
        self._sessions_lock = threading.Lock()
        self._proxies_by_origin: dict = {}     # what the environment says for each origin, read once

    def fetch(self, request, prepare=None, accept=None):
        """The 2xx Response for `request`, or RequestFailed. `prepare(request)`, before each attempt,
        returns the Request to send (None: the same); `accept(request, response)` returning False or
        raising rejects a 2xx page, which is then retried like a 503."""
        retries = self.max_retry_times if request.max_retry_times is None else request.max_retry_times
        attempts, failed_proxy = 0, None
        while True:
            attempts += 1
            sent = (prepare(request) or request) if prepare else request
            proxy = self._pooled_proxy(sent, avoid=failed_proxy)
            self._wait_for_rate(sent, attempts)
            with self._turn(sent.url), guard.waiting(self._attempt_bound(sent)):
                outcome = self._attempt(sent, attempts, proxy)
            failed_proxy = self._account(proxy, outcome)
            if _succeeded(outcome) and accept is not None:
                outcome = _judged(accept, sent, outcome)
            if _succeeded(outcome):
                return outcome
            if isinstance(outcome, PageRejected) and attempts > retries:
                raise RequestFailed(request, outcome.response, _failure_reason(outcome, attempts), attempts)
            if attempts > retries:
                raise RequestFailed(request, outcome, _failure_reason(outcome, attempts), attempts)
            wait = self._wait_before_retry(outcome, attempts)
            with guard.waiting(wait + CHECK_IN_SLACK):
                if self.sleep(wait):
                    raise RequestFailed(request, outcome, "stopped", attempts)

    def _attempt_bound(self, request):
        """Seconds one attempt may block a (guarded) thread: its deadline, or a connect that
        outlasts it (a socket still connecting cannot be cut), and some slack."""
        timeout = self.timeout if request.timeout is None else request.timeout
        connect = timeout[0] if isinstance(timeout, tuple) else timeout
        return max(self.download_timeout, connect or 0.0) + WATCH_RECUT + CHECK_IN_SLACK

    def _wait_for_rate(self, request, attempts):
        """DOMAIN_RATE_LIMIT: the attempt starts when the host's next slot, booked for it, comes."""
        if not self.rate_limit or self.host_rates is None:
            return
        try:
            wait = self.host_rates.reserve(urlsplit(request.url).netloc.lower(), self.rate_limit, self.rate_burst)
        except BackendUnavailable:
            wait = 1.0 / self.rate_limit     # the shared limit cannot be read: space this worker's requests alone
        if wait > 0:
            with guard.waiting(wait + CHECK_IN_SLACK):
                if self.sleep(wait):
                    raise RequestFailed(request, InterruptedError("stopped"), "stopped", attempts)

    def _turn(self, url):
        return self.politeness.turn(url) if self.politeness is not None else nullcontext()

    def _pooled_proxy(self, request, avoid):
        """The pool's proxy for this attempt: none for a request with a proxy of its own."""
        if self.proxy_pool is None or request.proxy or request.proxies is not None:
            return None
        return self.proxy_pool.pick(avoid)

    def _account(self, proxy, outcome):
        """Tell the pool how its proxy did; the proxy not to retry through, if it failed."""
        if proxy is None:
            return None
        if isinstance(outcome, TRANSIENT_ERRORS):
            self.proxy_pool.failed(proxy)
            return proxy
        self.proxy_pool.worked(proxy)
        return None

    def _attempt(self, request, attempts, proxy=None):
        """A 2xx or retryable Response, or a transient exception; RequestFailed for the rest."""
        try:
            raw, body = self._send(request, proxy)
            response = Response(raw, request, body)
        except MALFORMED_URL_ERRORS as exc:
            raise RequestFailed(request, exc, f"invalid URL: {request.url!r} ({_one_line(exc)})", attempts) from exc
        except SSLError as exc:
            # A certificate that fails verification will fail the same way in a few seconds.
            raise RequestFailed(request, exc, _failure_reason(exc, attempts), attempts) from exc
        except requests.TooManyRedirects as exc:
            raise RequestFailed(request, exc, f"more than REDIRECT_MAX_TIMES ({self.max_redirects}) redirects",
                                attempts) from exc
        except TRANSIENT_ERRORS as exc:
            return exc
        except requests.RequestException as exc:  # too large, too many redirects, bad header values...
            raise RequestFailed(request, exc, _failure_reason(exc, attempts), attempts) from exc
        if not (_succeeded(response) or _retryable_status(response.status_code)):
            raise RequestFailed(request, response, _failure_reason(response, attempts), attempts)
        return response

    def _send(self, request, proxy=None):
        """(requests' final response, its decoded body), or DownloadTimeout past the deadline."""
        session = self._session()
        # One session serves unrelated tasks in turn: cookies must not travel between them.
        session.cookies.clear()
        download = self._deadlines.begin(self.download_timeout)
        _in_flight.download = download
        reader = BodyReader(download, self.maxsize if request.maxsize is None else request.maxsize)
        try:
            raw = session.request(
                request.method, request.url, params=request.params, data=request.data,
                json=request.json, headers=self._headers_for(request), cookies=request.cookies,
                timeout=self.timeout if request.timeout is None else request.timeout,
                allow_redirects=request.allow_redirects, proxies=self._proxies_for(request, proxy),
                verify=request.verify, auth=request.auth,
                **{**request.kwargs, "stream": True, "hooks": hooks_with(reader, request.kwargs.get("hooks"))})
        except Exception as exc:
            if download.expired and not isinstance(exc, DownloadTimeout):
                raise download.overdue() from exc  # whatever the cut socket made the read raise
            raise
        finally:
            _in_flight.download = None
            self._deadlines.end(download)
        if download.expired:
            raise download.overdue()
        if self.warnsize and len(reader.body) > self.warnsize:
            log.warning("%s: a body of %d bytes, over DOWNLOAD_WARNSIZE (%d)", request.url, len(reader.body),
                        self.warnsize)
        return raw, reader.body

    def _headers_for(self, request):
        """The request's headers, with one of several User-Agents picked for it unless it has its own."""
        if len(self.user_agents) == 1 or any(name.lower() == "user-agent" for name in request.headers or ()):
            return request.headers
        return {"User-Agent": random.choice(self.user_agents), **(request.headers or {})}

    def _wait_before_retry(self, outcome, attempts):
        if isinstance(outcome, Response) and outcome.status_code in RETRY_AFTER_STATUSES:
            asked = _retry_after_seconds(outcome.headers.get("Retry-After"))
            if asked is not None:
                return min(asked, self.backoff_max)
        return self._backoff(attempts)

    def _backoff(self, attempts):
        # Full jitter: spreads out workers that failed together. The exponent is capped
        # only so that a huge retry count cannot overflow the float.
        ceiling = min(self.backoff_max, self.backoff_base * 2 ** min(attempts - 1, 64))
        return random.uniform(0, ceiling)

    def _session(self):
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._new_session()
            self._local.session = session
            with self._sessions_lock:
                self._sessions.append(session)
        return session

    def _proxies_for(self, request, pooled=None):
        """The request's own proxy or proxies, else the pool's, else the environment's for its origin
        (HTTP_PROXY, NO_PROXY...), read once per origin: the sessions do not read the environment on
        every request (trust_env off)."""
        proxy = request.proxy or pooled
        if proxy:
            return {"http": proxy, "https": proxy}
        if request.proxies is not None:
            return request.proxies
        parts = urlsplit(request.url)
        origin = f"{parts.scheme}://{parts.netloc}"
        proxies = self._proxies_by_origin.get(origin)
        if proxies is None:
            if len(self._proxies_by_origin) >= ORIGINS_REMEMBERED:     # a crawl of many hosts: memory stays flat
                self._proxies_by_origin.clear()
            proxies = self._proxies_by_origin[origin] = requests.utils.get_environ_proxies(origin)
        return proxies

    def _new_session(self):
        session = requests.Session()
        # With trust_env, requests reads the environment (proxies, ~/.netrc, CA bundle) again for every
        # request: about 4 % of a worker's CPU. Proxies are read once per origin (_proxies_for), the CA
        # bundle here; ~/.netrc is not read (give a Request its auth).
        session.trust_env = False
        session.verify = self.verify if self.verify is not True else \
            os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
        session.max_redirects = self.max_redirects
        adapter = _TrackingAdapter(pool_connections=self.pool_size, pool_maxsize=self.pool_size)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        session.headers["User-Agent"] = self.user_agents[0]
        session.headers.update(self.headers)
        session.headers["Accept-Encoding"] = ACCEPT_ENCODING    # what bodies.py decodes, whatever the settings say
        return session

    def close(self):
        """Close every session this downloader opened and stop its deadline thread; a later fetch
        opens fresh ones."""
        with self._sessions_lock:
            sessions, self._sessions = self._sessions, []
            self._local = threading.local()
        for session in sessions:
            session.close()
        self._deadlines.stop()


# --- the deadline ----------------------------------------------------------------------

_in_flight = threading.local()  # .download: the attempt this thread is making, for _TrackedPool


class _Download:
    """One attempt in flight, as the deadline thread sees it."""

    __slots__ = ("seconds", "deadline", "connection", "expired")

    def __init__(self, seconds):
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.connection = None  # the urllib3 connection it is on, set by _TrackedPool
        self.expired = False

    def cut(self):
        """Past the deadline: make the read the attempt is blocked in, if any, return at once."""
        self.expired = True
        sock = getattr(self.connection, "sock", None)
        if isinstance(sock, socket.socket):
            try:
                # socket.socket's own shutdown, not SSLSocket's: that one also drops the TLS
                # object the reading thread is using.
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass  # closed meanwhile: the attempt has failed already

    def overdue(self):
        return DownloadTimeout(f"download took longer than DOWNLOAD_TIMEOUT ({self.seconds:g} s)")


class _DeadlineWatch:
    """The one thread of a Downloader that cuts off the downloads past their deadline.

    A thread blocked in a socket read cannot be interrupted from inside, and requests' timeout
    starts again with every byte received: this thread shuts down the socket of a download past
    its deadline, so that its read returns at once. A download only adds itself to a set and
    removes itself, under a lock; the thread wakes early only for a deadline nearer than its plan."""

    def __init__(self):
        self._changed = threading.Condition()
        self._downloads = set()
        self._thread = None
        self._stop = threading.Event()     # the running thread's own stop flag (a new one per thread)
        self._next_look = 0.0    # when the thread will look next

    def begin(self, seconds):
        download = _Download(seconds)
        with self._changed:
            if self._thread is None or not self._thread.is_alive():  # first use, closed, or forked
                self._start()
            self._downloads.add(download)
            if download.deadline < self._next_look:
                self._changed.notify_all()
        return download

    def end(self, download):
        """From now on the download's connections are never cut: they may serve the next request."""
        with self._changed:
            self._downloads.discard(download)

    def stop(self):
        with self._changed:
            thread, self._thread = self._thread, None
            if thread is None:
                return
            self._stop.set()
            self._changed.notify_all()
        thread.join(CHECK_IN_SLACK)

    def _start(self):
        self._stop = threading.Event()
        self._next_look = 0.0  # the new thread looks at once
        self._thread = start_thread(self._watch, "batchd-deadlines", self._stop)

    def _watch(self, stop):
        with self._changed:
            while not stop.is_set():
                now = time.monotonic()
                for download in self._downloads:
                    if download.deadline <= now:
                        download.cut()
                self._next_look = self._plan_next_look(now)
                check_in(within=self._next_look - now + CHECK_IN_SLACK)
                self._changed.wait(self._next_look - now)

    def _plan_next_look(self, now):
        soonest = now + WATCH_IDLE_TICK
        for download in self._downloads:
            # A download cut while still connecting had no socket to shut: cut it again soon.
            soonest = min(soonest, now + WATCH_RECUT if download.expired else download.deadline)
        return soonest


# What _TrackedPool is mixed into, for the type checker; a plain mixin at run time.
if TYPE_CHECKING:
    from urllib3.connectionpool import HTTPConnectionPool as _PoolBase
else:
    _PoolBase = object


class _TrackedPool(_PoolBase):
    """Mixed into urllib3's pool classes: tells the attempt in flight on this thread which
    connection it was handed, so that the deadline thread can cut that connection's socket."""

    def _get_conn(self, timeout=None):
        connection = super()._get_conn(timeout=timeout)
        download = getattr(_in_flight, "download", None)
        if download is not None:
            download.connection = connection
        return connection


@cache
def _tracked(pool_class):
    if issubclass(pool_class, _TrackedPool):
        return pool_class
    return type(f"Tracked{pool_class.__name__}", (_TrackedPool, pool_class), {})


def _track_connections(manager):
    """`manager` (urllib3's PoolManager, ProxyManager or SOCKSProxyManager), its new pools tracked."""
    manager.pool_classes_by_scheme = {scheme: _tracked(pool_class)
                                      for scheme, pool_class in manager.pool_classes_by_scheme.items()}
    return manager


class _TrackingAdapter(HTTPAdapter):
    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        _track_connections(self.poolmanager)

    def proxy_manager_for(self, proxy, **proxy_kwargs):
        return _track_connections(super().proxy_manager_for(proxy, **proxy_kwargs))


def _succeeded(outcome):
    return isinstance(outcome, Response) and 200 <= outcome.status_code < 300


def _retryable_status(status):
    return 500 <= status < 600 or status in (408, 429)


def _retry_after_seconds(value):
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


def _failure_reason(outcome, attempts):
    after = f" after {attempts} attempts" if attempts > 1 else ""
    if isinstance(outcome, PageRejected):
        return f"{outcome}{after}"
    if isinstance(outcome, Response):
        return f"HTTP {outcome.status_code}{after}"
    return f"{type(outcome).__name__}{after}: {_one_line(outcome)}"


def _one_line(exc):
    return " ".join(str(exc).split())


def _user_agent():
    try:
        from batchd import __version__
    except ImportError:
        return "batchd"
    return f"batchd/{__version__}"
