"""The downloader: one Request in, a 2xx Response (or a conditional request's 304) or RequestFailed out.

`Downloader.fetch` runs each attempt through the middleware chain (download/chain.py): retries,
proxies, rate limits and politeness are links of it. Innermost, the spider's download_midware changes
the request, one attempt sends it, and the spider's validate judges a 2xx page. What the chain ends
with is judged here: a 2xx Response is returned, anything else fails with `RequestFailed`.

Two limits hold every attempt, redirects included. DOWNLOAD_TIMEOUT bounds the whole
response, where requests' timeout only bounds the wait for each read: one thread per
Downloader (`_DeadlineWatch`) shuts down the socket of a download past its deadline, and
the attempt fails with `DownloadTimeout`, retried like any timeout. DOWNLOAD_MAXSIZE bounds
the decoded body: a larger Content-Length fails before the body is read, and the body is
read and decompressed in pieces (bodies.py), so that a compression bomb fails with
`ResponseTooLarge` (not retried) once it has produced DOWNLOAD_MAXSIZE bytes.

Cookies live as long as a task: each task has its own jar, which `use_cookies(jar)` hands to the
calling thread's session before the task's requests (a task may go on in another thread once it was
set aside, and a thread takes turns at several tasks).
"""
import logging
import os
import random
import socket
import threading
import time
from functools import cache, partial
from typing import TYPE_CHECKING, Any, Callable, Optional
from urllib.parse import urlsplit

import requests
import urllib3.exceptions
from requests.adapters import HTTPAdapter
from requests.exceptions import InvalidSchema, InvalidURL, MissingSchema, SSLError

from .bodies import ACCEPT_ENCODING, BodyReader, hooks_with
from ..release import VERSION
from ..http import Request, RequestFailed, Response
from ..render.renderer import RenderUnavailable
from .chain import CHECK_IN_SLACK, TRANSIENT_ERRORS, MiddlewareChain, NotYet, PageRejected, sleep_without_stop
from ..hosts.terms import HostTerms, Terms
from .middlewares.retry import RetryMiddleware
from ..service.threads import check_in, guard, start_thread
from ..recrawl.pages import CONDITIONAL_META, was_conditional

log = logging.getLogger("batchd")

MALFORMED_URL_ERRORS = (MissingSchema, InvalidSchema, InvalidURL)

WATCH_IDLE_TICK = 5.0          # the deadline thread looks at least this often, so it can check in
WATCH_RECUT = 0.2              # a download cut while it had no socket (still connecting) is cut again this often
ORIGINS_REMEMBERED = 10000     # origins whose proxies from the environment are kept


class DownloadTimeout(requests.Timeout):
    """The whole response did not arrive within DOWNLOAD_TIMEOUT: retried like any timeout."""


def _judged(accept, request, response):
    """The response, or PageRejected if `accept` returns False or raises."""
    try:
        verdict = accept(request, response)
    except Exception as exc:    # raising is one of the two ways validate() rejects a page
        return PageRejected(response, f"{type(exc).__name__}: {_one_line(exc)}")
    return PageRejected(response, "") if verdict is False else response


def _nothing_to_tell(host: str) -> None:
    """The default `on_attempt_ended` of a Downloader: no task is set aside outside a worker."""


class Downloader:
    """Fetches requests over one pooled requests.Session per thread, each attempt through the middleware
    chain, within `download_timeout` seconds and `maxsize` decoded bytes."""

    def __init__(self, timeout=30.0, pool_size=10, headers=None, download_timeout=180.0,
                 maxsize=64 * 1024 * 1024, user_agents=None, max_redirects=20, warnsize=0, verify=True,
                 middlewares: Optional[list] = None, sleep=sleep_without_stop, host_terms: Optional[HostTerms] = None):
        """`headers` go with every request; `user_agents`: the User-Agent (several: one at random per
        request; none: batchd's own); `warnsize`: bytes of a body past which a warning names it (0:
        never); `verify`: check certificates (False, or a CA bundle's path); `middlewares`: the chain,
        outermost first (None: retries as SPIDER_MAX_RETRY_TIMES's default; `use()` sets it later);
        `sleep(seconds)`: how a fetch that may not park waits for a link's NotYet (True: the worker stops);
        `host_terms`: the timeouts and extra headers of each host (None: `timeout` and `download_timeout`
        at every host)."""
        self.host_terms = host_terms or HostTerms(Terms(timeout=timeout, download_timeout=download_timeout))
        self.pool_size = pool_size
        self.headers = dict(headers or {})
        self.maxsize = maxsize
        self.user_agents = tuple(user_agents or (_user_agent(),))
        self.max_redirects = max_redirects
        self.warnsize = warnsize
        self.verify = verify
        self.chain = MiddlewareChain([RetryMiddleware()] if middlewares is None else middlewares)
        if verify is False:
            # The worker said it once at its start; urllib3 would say it again for every request.
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        self._deadlines = _DeadlineWatch()
        self._local = threading.local()
        self._sessions: list = []
        self._sessions_lock = threading.Lock()
        self._proxies_by_origin: dict = {}     # what the environment says for each origin, read once
        self.sleep = sleep
        self._attempt_ended = threading.Condition()    # a host's place may be free again
        self.on_attempt_ended = _nothing_to_tell
        # Rendered pages (render=True): the pool's maker, the spider whose methods a render_hook may name, and
        # whether a render="auto" request is rendered (worker/render_auto.py answers from each host's choice; with
        # none, it is).
        self.make_render_pool: Optional[Callable[[], Any]] = None
        self._render_pool: Any = None
        self.spider: Any = None
        self.renders_auto: Callable[[Request], bool] = _always
        self.keep_received = False      # each hop's body kept as it came too (ARCHIVE: batchd/archive/)

    def use(self, chain: MiddlewareChain) -> None:
        self.chain = chain

    def fetch(self, request, prepare=None, accept=None, park=False, attempts=0):
        """The 2xx Response for `request`, or RequestFailed. `prepare(request)`, before each attempt,
        returns the Request to send (None: the same); `accept(request, response)` returning False or
        raising rejects a 2xx page, which the retry middleware then retries like a 503. A link's NotYet
        is waited out here, or with `park` raised to the caller with the attempts made so far in
        `attempts` (the caller's next fetch of its request passes them back)."""
        send = partial(self._send_judged, prepare=prepare, accept=accept)
        current = request
        while True:
            try:
                outcome = self.chain.attempt(current, send)
            except NotYet as wait:
                if park:
                    wait.attempts = attempts
                    raise
                self._wait_out(wait, attempts)
                current = wait.request
                continue
            attempts += 1
            self._tell_attempt_ended(current)
            if isinstance(outcome, Request):
                current = outcome           # a Request: the chain's next attempt
                continue
            if _succeeded(outcome):
                return outcome
            raise _failed(request, outcome, attempts)

    def _tell_attempt_ended(self, request) -> None:
        """A place at the request's host may be free: for the fetches waiting here, and for the worker's
        tasks set aside for one (`on_attempt_ended(host)`)."""
        with self._attempt_ended:
            self._attempt_ended.notify_all()
        self.on_attempt_ended(urlsplit(request.url).netloc.lower())

    def _wait_out(self, wait: NotYet, attempts: int) -> None:
        """A fetch that may not park waits in its thread: for the time said, or until an attempt ends
        (a place at the host may be free)."""
        bound = self._attempt_bound(wait.request) if wait.after == float("inf") else wait.after
        with guard.waiting(bound + CHECK_IN_SLACK):
            if wait.after == float("inf"):
                with self._attempt_ended:
                    self._attempt_ended.wait(bound)
            elif self.sleep(wait.after):
                raise RequestFailed(wait.request, InterruptedError("stopped"), "stopped", attempts)

    def fetch_plain(self, request, prepare=None, accept=None) -> Response:
        """`request` fetched without a browser, whatever its render option, and not retried: the plain half of a
        render="auto" sample (worker/render_auto.py). It goes through the chain as any request does (robots.txt,
        the host's pace, its breaker, the proxy: a sample is a request to the host like any other), waiting out
        a pace in this thread; the spider's download_midware (`prepare`) and validate (`accept`) judge it as they
        would any attempt. A 2xx Response, or RequestFailed (its response, if one came back; a NotYet when the
        chain would have it wait for another request to end: the task's own may be that one, a breaker's probe
        judged once its callback is done, and a sample is not worth a deadlock)."""
        plain = request.replace(render=False, max_retry_times=0)
        while True:
            try:
                return self.fetch(plain, prepare, accept, park=True)
            except NotYet as wait:
                if wait.after == float("inf"):
                    raise RequestFailed(request, Exception(str(wait)), f"no plain sample now: {wait}", 0) from None
                self._wait_out(wait, 0)
                plain = wait.request

    def download_once(self, request) -> Response:
        """One attempt at `request`, outside the chain: a Response whatever its status, or the error."""
        with guard.waiting(self._attempt_bound(request)):
            return self._attempt(request)

    def use_cookies(self, jar) -> None:
        """The calling thread's requests from now on keep their cookies in `jar` (their task's)."""
        self._session().cookies = jar

    def batch_started(self, batch_id) -> None:
        self.chain.batch_started(batch_id)

    def _send_judged(self, request, prepare, accept):
        """The innermost step of an attempt: the spider's download_midware, the send, its validate."""
        sent = (prepare(request) or request) if prepare else request
        response = self.download_once(sent)
        if accept is not None and _is_2xx(response):
            verdict = _judged(accept, sent, response)
            if isinstance(verdict, PageRejected):
                raise verdict
        return response

    def _attempt_bound(self, request):
        """Seconds one attempt may block a (guarded) thread: its deadline, or a connect that
        outlasts it (a socket still connecting cannot be cut), and some slack."""
        terms = self.host_terms.for_url(request.url)
        timeout = terms.timeout if request.fetch.timeout is None else request.fetch.timeout
        connect = timeout[0] if isinstance(timeout, tuple) else timeout
        return max(terms.download_timeout, connect or 0.0) + WATCH_RECUT + CHECK_IN_SLACK

    def _attempt(self, request):
        """A Response, whatever its status; a transient exception raised as it is (the retry middleware
        judges it); RequestFailed for an error no retry heals."""
        if request.rendering.render and (request.rendering.render is True or self.renders_auto(request)):
            return self._rendered(request)
        started = time.monotonic()
        try:
            raw, reader = self._send(request)
        except MALFORMED_URL_ERRORS as exc:
            raise RequestFailed(request, exc, f"invalid URL: {request.url!r} ({_one_line(exc)})", 1) from exc
        except SSLError as exc:
            # A certificate that fails verification will fail the same way in a few seconds.
            raise RequestFailed(request, exc, _failure_reason(exc, 1), 1) from exc
        except requests.TooManyRedirects as exc:
            raise RequestFailed(request, exc, f"more than REDIRECT_MAX_TIMES ({self.max_redirects}) redirects",
                                1) from exc
        except TRANSIENT_ERRORS:
            raise
        except requests.RequestException as exc:  # too large, bad header values...
            raise RequestFailed(request, exc, _failure_reason(exc, 1), 1) from exc
        response = Response(raw, request, reader.body)
        response.elapsed = time.monotonic() - started
        if self.keep_received:
            response.as_received = reader.received
        return response

    def _rendered(self, request):
        """The page loaded in a browser of the render pool (batchd/render/): the same headers, cookies and proxy
        as a plain attempt would have."""
        refused = _unrenderable(request)
        if refused:
            raise RequestFailed(request, ValueError(refused), refused, 1)
        proxy = self._proxies_for(request).get(urlsplit(request.url).scheme)
        if proxy and urlsplit(proxy).password is not None:
            reason = (f"render: Chromium takes no proxy with a password ({_without_password(proxy)}): give "
                      "rendered requests a proxy that needs none")
            raise RequestFailed(request, ValueError(reason), reason, 1)
        headers = {"User-Agent": self.user_agents[0], **self.headers,
                   **(self._headers_for(request, self.host_terms.for_url(request.url)) or {})}
        try:
            pool = self.render_pool()
        except RenderUnavailable as missing:
            raise RequestFailed(request, missing, str(missing), 1) from None
        hook = request.rendering.render_hook
        page = pool.render(request, self._session().cookies, headers, proxy, request.rendering.render_timeout,
                           getattr(self.spider, hook) if isinstance(hook, str) else hook)
        return page.response(request)

    def render_pool(self):
        """The worker's browsers (batchd/render/pool.py), made on the first rendered request: a spider that
        never renders imports nothing of it and starts no browser."""
        with self._sessions_lock:
            if self._render_pool is None:
                if self.make_render_pool is None:
                    raise RenderUnavailable("render: this downloader renders no page (no render pool)")
                self._render_pool = self.make_render_pool()
            return self._render_pool

    def _send(self, request):
        """(requests' final response, the BodyReader that read its bodies), or DownloadTimeout past the deadline."""
        session, terms = self._session(), self.host_terms.for_url(request.url)
        download = self._deadlines.begin(terms.download_timeout)
        _in_flight.download = download
        options = request.fetch
        reader = BodyReader(download, self.maxsize if options.maxsize is None else options.maxsize,
                            self.keep_received)
        try:
            raw = session.request(
                request.method, request.url, params=options.params, data=options.data,
                json=options.json, headers=self._headers_with_validators(request, terms), cookies=options.cookies,
                timeout=terms.timeout if options.timeout is None else options.timeout,
                allow_redirects=options.allow_redirects, proxies=self._proxies_for(request),
                verify=options.verify, auth=options.auth,
                **{**options.extra, "stream": True, "hooks": hooks_with(reader, options.extra.get("hooks"))})
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
        return raw, reader

    def _headers_for(self, request, terms: Terms):
        """The request's headers over its host's, with one of several User-Agents picked for it unless
        either names one."""
        own = request.fetch.headers
        headers = {**terms.headers, **(own or {})} if terms.headers else own
        if len(self.user_agents) == 1 or any(name.lower() == "user-agent" for name in headers or ()):
            return headers
        return {"User-Agent": random.choice(self.user_agents), **(headers or {})}

    def _headers_with_validators(self, request, terms: Terms):
        """The request's headers, with its page's validators when it revalidates (recrawl/pages.py): added
        last, so that Vary is judged on the headers that go."""
        headers = self._headers_for(request, terms)
        conditional = request.meta.get(CONDITIONAL_META)
        return headers if conditional is None else conditional.headers_over(headers or {})

    def _session(self):
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._new_session()
            self._local.session = session
            with self._sessions_lock:
                self._sessions.append(session)
        return session

    def _proxies_for(self, request):
        """The request's own proxy (its own, or the proxy middleware's) or proxies, else the environment's
        for its origin (HTTP_PROXY, NO_PROXY...), read once per origin: the sessions do not read the
        environment on every request (trust_env off)."""
        options = request.fetch
        if options.proxy:
            return {"http": options.proxy, "https": options.proxy}
        if options.proxies is not None:
            return options.proxies
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
        # Merging a request's params or proxies with the session's empty ones costs requests 2.32+ two isinstance
        # checks against a typing Protocol, a few us each on Python 3.11; with None there is nothing to merge
        # (requests' merge_setting takes None for "the session has none"; its annotations say a mapping).
        session.params = session.proxies = None  # type: ignore[assignment]
        adapter = _TrackingAdapter(pool_connections=self.pool_size, pool_maxsize=self.pool_size)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        session.headers["User-Agent"] = self.user_agents[0]
        session.headers.update(self.headers)
        session.headers["Accept-Encoding"] = ACCEPT_ENCODING    # what bodies.py decodes, whatever the settings say
        return session

    def close(self):
        """Close every session this downloader opened, its middlewares, and stop its deadline thread; a
        later fetch opens fresh sessions."""
        with self._sessions_lock:
            sessions, self._sessions = self._sessions, []
            self._local = threading.local()
        for session in sessions:
            session.close()
        self.chain.close()
        self._deadlines.stop()
        with self._sessions_lock:
            pool, self._render_pool = self._render_pool, None
        if pool is not None:
            pool.close()


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


def _always(request) -> bool:
    return True


def _unrenderable(request) -> str:
    """Why a browser cannot load this request as asked, or ''."""
    options = request.fetch
    if request.method != "GET" or options.data is not None or options.json is not None:
        return f"render: {request.url}: a browser loads a page with GET only (no method {request.method}, data or json)"
    return ""


def _without_password(proxy: str) -> str:
    parts = urlsplit(proxy)
    return f"{parts.scheme}://{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")


def _succeeded(outcome):
    """A 2xx, or the 304 of a conditional request (the page did not change: recrawl/pages.py)."""
    return _is_2xx(outcome) or (isinstance(outcome, Response) and outcome.status_code == 304
                                and was_conditional(outcome.sent_headers))


def _is_2xx(outcome):
    return isinstance(outcome, Response) and 200 <= outcome.status_code < 300


def _failed(request, outcome, attempts):
    """RequestFailed for `request` from what its last attempt ended with."""
    if isinstance(outcome, RequestFailed):
        return RequestFailed(request, outcome.response_or_exception, outcome.reason, attempts)
    if isinstance(outcome, PageRejected):
        return RequestFailed(request, outcome.response, _failure_reason(outcome, attempts), attempts)
    return RequestFailed(request, outcome, _failure_reason(outcome, attempts), attempts)


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
    return f"batchd/{VERSION}"
