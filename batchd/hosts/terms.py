"""Per-host terms (HOSTS: `[hosts."example.com"]` tables): what holds at each host.

`HostTerms.for_url(url)` is the one place a request's host is resolved to its terms: the rate, burst,
concurrency, delay, timeouts, proxy and headers that hold at that host. A host listed as itself wins;
else the longest `*.domain` it is a subdomain of (`*.example.com` matches a.example.com and
a.b.example.com, never example.com itself); else the global settings. A pattern's table sets only what it
names: the rest is the global settings'. Hosts are matched by name (the port aside). Without HOSTS, the
answer is the global terms at once, without parsing the URL: a single-site crawl pays one test.

A process builds its HostTerms once (batchd/assembly.py) and hands it to every part that asks.
"""
from dataclasses import dataclass, field, replace
from typing import Optional
from urllib.parse import urlsplit

from .rates import KEPT_HOSTS
from ..config import Settings, redact_url


@dataclass(frozen=True)
class Terms:
    """What holds at one host; `pattern` is the [hosts] table it came from ("" for the global settings)."""
    rate: float = 0.0
    burst: int = 1
    concurrency: int = 8
    delay: float = 0.0
    timeout: float = 30.0
    download_timeout: float = 180.0
    proxy: Optional[str] = None
    headers: dict = field(default_factory=dict)
    crawl_hours: tuple = ()       # windows "HH:MM-HH:MM" in BATCH_TIMEZONE (hosts/crawl_hours.py); (): every hour
    pattern: str = ""

    def describe(self) -> str:
        """One line of the terms, the proxy's password redacted: for `batchd check`."""
        shown = [f"rate {self.rate:g}/s" if self.rate else "no rate limit", f"burst {self.burst}",
                 f"concurrency {self.concurrency}", f"delay {self.delay:g} s", f"timeout {self.timeout:g} s",
                 f"download_timeout {self.download_timeout:g} s"]
        if self.proxy:
            shown.append(f"proxy {redact_url(self.proxy)}")
        if self.headers:
            shown.append("headers " + ", ".join(sorted(self.headers)))
        if self.crawl_hours:
            shown.append("crawl hours " + ", ".join(self.crawl_hours))
        return ", ".join(shown)


def global_terms(settings: Settings) -> Terms:
    """The terms of every host no [hosts] table names."""
    return Terms(rate=settings.DOMAIN_RATE_LIMIT, burst=settings.DOMAIN_RATE_BURST,
                 concurrency=settings.CONCURRENT_REQUESTS_PER_DOMAIN, delay=settings.DOWNLOAD_DELAY,
                 timeout=settings.REQUEST_TIMEOUT, download_timeout=settings.DOWNLOAD_TIMEOUT,
                 crawl_hours=settings.CRAWL_HOURS)


class HostTerms:
    """The terms of each host: the global ones, and those of the HOSTS patterns over them."""

    def __init__(self, defaults: Terms = Terms(), hosts: Optional[dict] = None, kept: int = KEPT_HOSTS):
        """`hosts`: HOSTS as parsed (config.parse_hosts): {pattern: {term: value}}."""
        self.defaults, self.kept = defaults, kept
        self.patterns = {pattern: replace(defaults, pattern=pattern, **table)
                         for pattern, table in (hosts or {}).items()}
        self._resolved: dict = {}       # host -> Terms, at most `kept` (then started afresh)

    @classmethod
    def from_settings(cls, settings: Settings) -> "HostTerms":
        return cls(global_terms(settings), settings.HOSTS)

    def every(self) -> list:
        """The global terms, then each pattern's."""
        return [self.defaults, *self.patterns.values()]

    def for_url(self, url: str) -> Terms:
        if not self.patterns:
            return self.defaults
        return self.for_host(urlsplit(url).hostname or "")

    def for_host(self, host: str) -> Terms:
        """`host` (a name, in lower case) resolved: itself, else its longest `*.` suffix, else the globals."""
        if not self.patterns:
            return self.defaults
        terms = self._resolved.get(host)
        if terms is None:
            if len(self._resolved) >= self.kept:
                self._resolved = {}       # a crawl of many hosts: resolving again is cheap, memory stays flat
            terms = self._resolved[host] = self._match(host)
        return terms

    def _match(self, host: str) -> Terms:
        exact = self.patterns.get(host)
        if exact is not None:
            return exact
        labels = host.split(".")
        for start in range(1, len(labels)):       # a.b.example.com: *.b.example.com, then *.example.com, *.com
            wildcard = self.patterns.get("*." + ".".join(labels[start:]))
            if wildcard is not None:
                return wildcard
        return self.defaults
