"""Proxies for a worker's downloads: one for every request (PROXY), or a pool rotated request by
request (PROXY_POOL).

A pool's entries are proxies (scheme://[user:password@]host:port, http, https or socks5 as requests
supports them; a bare host:port is http) or lists of them: a file (an absolute path) or a URL with a
path (a provider's API), read one proxy per line, again every PROXY_POOL_REFRESH seconds. A proxy
that fails PROXY_MAX_FAILURES attempts in a row (a connection error or a timeout through it) is
retired for PROXY_RETIRE_SECONDS; an answer, whatever its status, resets its count. A retry is
never sent through the proxy its last attempt failed on, while the pool has another. Passwords
never reach a log line (config.redact_url). A host whose [hosts] table names a proxy goes through
that one (hosts/terms.py), the pool aside; a request's own proxy wins over both.
"""
import logging
import threading
import time
from typing import Callable, Optional
from urllib.parse import urlsplit

from ...config import redact_url
from ...errors import ConfigError
from ...http import Request, Response
from ..chain import TRANSIENT_ERRORS, ChainContext, Counts, DownloaderMiddleware, NoCounts
from ...hosts.terms import HostTerms
from ...service.threads import guard

log = logging.getLogger("batchd")

SOURCE_TIMEOUT = 10.0       # seconds to read a list of proxies from a URL


def proxy_pool(settings) -> Optional["ProxyPool"]:
    """The pool the settings describe (PROXY is a pool of one), or None without proxies."""
    if settings.PROXY and settings.PROXY_POOL:
        raise ConfigError("set PROXY (one proxy) or PROXY_POOL (several), not both")
    entries = (settings.PROXY,) if settings.PROXY else settings.PROXY_POOL
    if not entries:
        return None
    return ProxyPool(entries, settings.PROXY_POOL_REFRESH, settings.PROXY_MAX_FAILURES,
                     settings.PROXY_RETIRE_SECONDS)


class ProxyMiddleware(DownloaderMiddleware):
    """Each attempt of a request without a proxy of its own goes through its host's proxy, else the pool's
    next proxy: never the one this thread's last attempt failed through, while the pool has another."""

    def __init__(self, pool: Optional["ProxyPool"], stats: Counts = NoCounts(), host_terms: HostTerms = HostTerms()):
        self.pool, self.stats, self.host_terms = pool, stats, host_terms
        self._local = threading.local()     # .proxy: the current attempt's; .failed: the last that failed

    @classmethod
    def from_context(cls, context: ChainContext) -> Optional["ProxyMiddleware"]:
        pool, terms = proxy_pool(context.settings), context.host_terms
        assert terms is not None      # (ChainContext makes them)
        if pool is None and not any(host.proxy for host in terms.every()):
            return None
        return cls(pool, context.stats, terms)

    def process_request(self, request: Request) -> Optional[Request]:
        self._local.proxy = None
        if request.fetch.proxy or request.fetch.proxies is not None:
            return None
        hosts_own = self.host_terms.for_url(request.url).proxy
        if hosts_own or self.pool is None:
            return request.replace(proxy=hosts_own) if hosts_own else None
        proxy = self._local.proxy = self.pool.pick(avoid=getattr(self._local, "failed", None))
        return request.replace(proxy=proxy)

    def process_response(self, request: Request, response: Response) -> Response:
        self._settle(failed=False)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        self._settle(failed=isinstance(exception, TRANSIENT_ERRORS))
        return None

    def _settle(self, failed: bool) -> None:
        proxy = getattr(self._local, "proxy", None)
        if proxy is None or self.pool is None:      # (a proxy of the request's, or of its host's: not the pool's)
            return
        if failed:
            self.stats.inc("proxy/failures")
            self.pool.failed(proxy)
        else:
            self.pool.worked(proxy)
        self._local.failed = proxy if failed else None


class ProxyPool:
    def __init__(self, entries, refresh: float, max_failures: int, retire_seconds: float,
                 clock: Callable[[], float] = time.monotonic):
        self.sources = [entry for entry in entries if _is_source(entry)]
        self.fixed = [_proxy_url(entry) for entry in entries if not _is_source(entry)]
        self.refresh, self.max_failures, self.retire_seconds, self.clock = refresh, max_failures, retire_seconds, clock
        self._lock = threading.Lock()
        self._failures: dict = {}          # proxy -> failed attempts in a row
        self._retired_until: dict = {}     # proxy -> when it may serve again
        self._turn = 0
        self._refreshing = False
        self._source_failing = False
        self.proxies = self._read_all(first=True)
        self._next_refresh = clock() + refresh

    # -- what the downloader asks
    def pick(self, avoid: Optional[str] = None) -> str:
        """The next proxy in turn that is not retired (nor `avoid`, while another is left)."""
        self._refresh_if_due()
        with self._lock:
            now = self.clock()
            serving = [p for p in self.proxies if self._retired_until.get(p, 0.0) <= now]
            choices = [p for p in serving if p != avoid] or serving
            if not choices:        # every proxy retired: the one back soonest rather than none
                return min(self.proxies, key=lambda p: self._retired_until.get(p, 0.0))
            self._turn = (self._turn + 1) % len(choices)
            return choices[self._turn]

    def worked(self, proxy: str) -> None:
        with self._lock:
            self._failures.pop(proxy, None)

    def failed(self, proxy: str) -> None:
        with self._lock:
            count = self._failures[proxy] = self._failures.get(proxy, 0) + 1
            if count < self.max_failures or len(self.proxies) < 2:
                return
            self._failures.pop(proxy)
            self._retired_until[proxy] = self.clock() + self.retire_seconds
        log.warning("proxy %s retired for %g s: %d failures in a row", redact_url(proxy), self.retire_seconds, count)

    # -- the lists
    def _refresh_if_due(self) -> None:
        if not self.sources or self.clock() < self._next_refresh:
            return
        with self._lock:
            if self._refreshing:
                return              # another thread reads the lists; this one keeps the current
            self._refreshing = True
        try:
            proxies = self._read_all(first=False)
        finally:
            with self._lock:
                self._refreshing = False
                self._next_refresh = self.clock() + self.refresh
        with self._lock:
            self.proxies = proxies

    def _read_all(self, first: bool) -> list:
        proxies = list(self.fixed)
        for source in self.sources:
            try:
                proxies.extend(_read_source(source))
            except Exception as e:    # an unreadable list: the others (and, later, the last read) serve
                if first:
                    raise ConfigError(f"PROXY_POOL: could not read {redact_url(source)}: {e}") from None
                self._warn_source(source, e)
                return self.proxies
        if not proxies:
            raise ConfigError("PROXY_POOL: no proxy in " + ", ".join(map(redact_url, self.sources))) if first \
                else ConfigError("PROXY_POOL: the lists are empty")
        if self._source_failing:
            log.info("PROXY_POOL: the lists of proxies are read again (%d proxies)", len(proxies))
            self._source_failing = False
        return list(dict.fromkeys(proxies))

    def _warn_source(self, source: str, error: Exception) -> None:
        if not self._source_failing:
            log.warning("PROXY_POOL: could not read %s again (%s); the proxies read before serve meanwhile",
                        redact_url(source), error)
        self._source_failing = True


def _is_source(entry: str) -> bool:
    """A list of proxies rather than a proxy: a file's absolute path, or a URL with a path or a query."""
    if entry.startswith("/"):
        return True
    parts = urlsplit(entry if "://" in entry else "http://" + entry)
    return parts.path not in ("", "/") or bool(parts.query)


def _proxy_url(line: str) -> str:
    return line if "://" in line else "http://" + line


def _read_source(source: str) -> list:
    if source.startswith("/"):
        with open(source, encoding="utf-8") as f:
            text = f.read()
    else:
        import requests
        with guard.waiting(SOURCE_TIMEOUT * 2):
            answer = requests.get(source, timeout=SOURCE_TIMEOUT)
        answer.raise_for_status()
        text = answer.text
    lines = (line.strip() for line in text.splitlines())
    return [_proxy_url(line) for line in lines if line and not line.startswith("#")]
