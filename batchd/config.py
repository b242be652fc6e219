"""Settings: one typed, frozen object built once and passed in at construction.

Precedence (docs/architecture.md, Names): defaults < the spider's `__custom_setting__` < the TOML file
< `BATCHD_<NAME>` in the environment < the command line (or `settings=` in code).
Every name below is the name an operator writes in any of those places.

Each setting is declared once, in `Settings`: its type (the annotation), its default, its
one-line meaning and what values it takes. `validate()` checks values from the declarations
alone, docs/settings.md's table is `settings_table()` verbatim, and
etc/batchd/batchd.toml is checked against them (tests/test_config.py, tests/systemd/test_units.py).
"""
import dataclasses
import json
import math
import os
import re
import tomllib
import typing
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional
from urllib.parse import urlsplit, urlunsplit

from .errors import ConfigError
from .schedule import EXPRESSION_WORDS, HOURS_WORDS, check_schedule, check_timezone, parse_crawl_hours


DEFAULT_CONFIG_FILE = "/etc/batchd/batchd.toml"
# A project's own config, in the folder batchd runs in (what `batchd init` writes): read before the system's.
LOCAL_CONFIG_FILE = "batchd.toml"
ENV_PREFIX = "BATCHD_"
ENV_CONFIG = "BATCHD_CONFIG"
# The roles whose named instances also read ROLE-NAME.toml beside the config file (the systemd
# templates batchd-master@NAME and batchd-worker@NAME: several spiders on one host).
INSTANCE_ROLES = ("master", "worker")
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
NAMESPACE_PATTERN = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
WEBHOOK_PATTERN = re.compile(r"^https?://[^\s/]+(/\S*)?$", re.IGNORECASE)
LISTEN_PATTERN = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^\s:\[\]]+):\d{1,5}$")      # ADDRESS:PORT, [IPv6]:PORT
INTERVAL_UNITS = ("day", "hour")
SIGNATURES = ("items", "body")    # what tells a changed page from an unchanged one (batchd/recrawl/)
BATCH_MODES = ("full", "incremental", "due")     # what a new batch crawls (docs/architecture.md, A batch's life)
ARCHIVE_FORMATS = ("off", "warc")    # what ARCHIVE keeps of each response (batchd/archive/)
REQUEST_FILTERS = ("exact", "bloom")     # how a batch remembers its requests (backends/mysql_redis/redis_bloom.py)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
WEBHOOK_FORMATS = ("json", "dingtalk", "feishu", "wecom", "slack")   # what ALERT_WEBHOOK is sent (alerts/webhooks.py)
# The rules that flag a batch's data (batchd/quality/rules.py, docs/quality.md), as QUALITY_RULES_OFF names them.
RESOURCE_TYPES = ("image", "font", "media", "stylesheet")     # what RENDER_BLOCK may name (render/chromium.py blocks them)
QUALITY_RULES = ("coverage_drop", "items_drop", "no_items", "soft_block", "block_marker", "coverage_floor")


KB, MB, GB = 1024, 1024 ** 2, 1024 ** 3
DAY = 86400.0


def setting(default, meaning: str, low=None, high=None, *, choices: tuple = (), ignore_case: bool = False,
            identifier: bool = False, pattern: Optional[re.Pattern] = None, may_hold: str = "",
            default_text: str = "", parse: Optional[Callable[[Any, str], Any]] = None, secret: bool = False):
    """One setting's whole declaration; `validate()` and `settings_table()` read nothing else.

    meaning       one line for an operator, shown as written in docs/settings.md's table
    low, high     for a number: the inclusive bounds (None: no bound on that side)
    choices       for a text: the values it may take (ignore_case: compared in upper case)
    identifier    for a text: an SQL table or column name, checked like every identifier
    pattern       for a text: a regular expression it must match, with `may_hold` saying in
                  words what it allows (the error and docs/settings.md show those words)
    default_text  for a default of None: what an unset value means, in words
    parse         for a value of its own shape: parse(raw, source) -> the value, or a ConfigError naming
                  `source` and the culprit; it takes its own output back unchanged (`may_hold`: its words)
    secret        a password or a key: its value is in no error message and no repr (shown as ***)
    """
    if (pattern is not None or parse is not None) and not may_hold:
        raise TypeError("a pattern or a parse needs may_hold=, the words its error message says")
    # A table's default is copied for each Settings (a dataclass takes no mutable default).
    value = {"default_factory": lambda: dict(default)} if isinstance(default, dict) else {"default": default}
    return dataclasses.field(**value, repr=not secret, metadata={
        "meaning": meaning, "low": low, "high": high, "choices": tuple(choices), "ignore_case": ignore_case,
        "identifier": identifier, "pattern": pattern, "may_hold": may_hold, "default_text": default_text,
        "parse": parse, "secret": secret})


@dataclass(frozen=True)
class Settings:
    # -- what to run, and where the data lives
    MYSQL_URL: Optional[str] = setting(None, "the MySQL or MariaDB database of the task table: "
                                             "mysql://user:pass@host:3306/db")
    STORE: Optional[str] = setting(None, "the task store as a URL: mysql://... or sqlite:///PATH",
                                   default_text="MYSQL_URL")
    REDIS_URL: Optional[str] = setting(None, "Redis for the queue, the leases and the master lock: "
                                             "redis://host:6379/0, or under Sentinel the primary of a service: "
                                             "redis+sentinel://host:26379[,host:26379...]/SERVICE[/DB]")
    REDIS_SENTINEL_PASSWORD: Optional[str] = setting(None, "the Sentinels' own password (REDIS_URL's is Redis's: "
                                                           "the primary's and its replicas'; never logged or shown)",
                                                     default_text="none", secret=True)
    SPIDER: Optional[str] = setting(None, "the spider class: path/file.py:Class or module:Class")
    # -- the batch: its calendar, the patrol, leases, the task table's columns (docs/architecture.md)
    BATCH_INTERVAL: int = setting(7, "a new batch opens on the date (or at the hour) this many days (hours) "
                                     "after the last one's", 1, 10000)
    BATCH_INTERVAL_UNIT: str = setting("day", "the unit of BATCH_INTERVAL", choices=INTERVAL_UNITS)
    BATCH_SCHEDULE: str = setting("", "when batches open, as a cron expression read in BATCH_TIMEZONE (`0 3 * * mon`, "
                                      "`@daily`): a batch opens at each time it names, instead of BATCH_INTERVAL "
                                      "(which it overrides); empty: BATCH_INTERVAL",
                                  parse=lambda raw, source: check_schedule(raw, source), may_hold=EXPRESSION_WORDS)
    BATCH_TIMEZONE: str = setting("", "the time zone BATCH_SCHEDULE and CRAWL_HOURS are read in (an IANA name such as "
                                      "Europe/Paris or UTC); empty: the machine's",
                                  parse=lambda raw, source: check_timezone(raw, source),
                                  may_hold="an IANA time zone name, or empty")
    BATCH_MODE: str = setting("full", "what a new batch crawls: full resets every task to pending; incremental "
                                      "resets nothing and crawls the pending rows (new ones, requeued ones); due "
                                      "resets the tasks whose revisit is due (REVISIT_INTERVAL_MIN/MAX)",
                              choices=BATCH_MODES)
    SITEMAPS: Optional[tuple] = setting(None, "sitemaps, sitemap indexes or robots.txt files naming them: as each "
                                              "batch opens, the master adds a task (its url column) for each new "
                                              "URL, as `batchd tasks import-sitemap` does", default_text="none")
    BATCH_RESET_FAILED: bool = setting(True, "a full (or due) batch resets the failed tasks too (off: they stay "
                                             "failed, outside the batch)")
    # -- re-crawls: conditional requests, change detection, revisit schedules (batchd/recrawl/)
    REVALIDATE: bool = setting(False, "send If-None-Match / If-Modified-Since from the validators the last "
                                      "crawl of a URL kept; a 304 settles its request as unchanged")
    CHANGE_SIGNATURE: str = setting("items", "what tells a changed page from an unchanged one: items (what its "
                                             "callback yielded) or body (the page's bytes: an unchanged body is "
                                             "not parsed again)", choices=SIGNATURES)
    REVISIT_INTERVAL_MIN: float = setting(3600.0, "seconds: a task that keeps changing is revisited no more often "
                                                  "(BATCH_MODE = \"due\")", 1, 3650 * DAY)
    REVISIT_INTERVAL_MAX: float = setting(30 * DAY, "seconds: a task that never changes is revisited at least this "
                                                    "often, and every URL is fetched whole at least this often",
                                          1, 3650 * DAY)
    BATCH_MONITOR_INTERVAL: float = setting(10.0, "seconds between two patrols of the master", 0.05, 3600)
    BATCH_LOST_TASK_STALE: float = setting(600.0, "the lease: seconds a task's holder may go without renewing it "
                                                  "before the task goes back to pending", 0.1, 7 * DAY)
    BATCH_PUSH_LIMIT: int = setting(5000, "most tasks waiting in the queue", 1, 1_000_000)
    BATCH_TASK_ID_FIELD: str = setting("id", "the task table's primary key column", identifier=True)
    BATCH_TASK_STATE_FIELD: str = setting("batch_status", "the task table's state column", identifier=True)
    BATCH_TASK_TIME_FIELD: str = setting("update_time", "the task table's update-time column", identifier=True)
    BATCH_TASK_HOST_FIELD: Optional[str] = setting(None, "the task table's column holding each task's URL or host: "
                                                         "a claim then takes tasks round robin across hosts (read "
                                                         "with the rows the state index finds; it needs no index "
                                                         "of its own)", identifier=True, default_text="off")
    BATCH_TASK_MAX_ATTEMPTS: int = setting(10, "leases of one task in one batch before it is marked failed",
                                           1, 1000)
    BATCH_RESET_CHUNK: int = setting(5000, "rows in the first chunk of a walk of the task table (the reset "
                                           "opening a batch); later chunks are sized to take about 50 ms",
                                     1, 1_000_000)
    NAMESPACE: Optional[str] = setting(None, "prefix of every queue key", default_text="the task table",
                                       pattern=NAMESPACE_PATTERN, may_hold="letters, digits and _ . : -")
    # -- crawling
    SPIDER_THREAD_COUNT: int = setting(4, "download threads per worker process", 1, 256)
    SPIDER_MAX_RETRY_TIMES: int = setting(3, "retries of a failing request", 0, 100)
    REQUEST_TIMEOUT: float = setting(30.0, "seconds to connect, and between two reads of an answer", 0.1, 3600)
    DOWNLOAD_TIMEOUT: float = setting(180.0, "seconds a whole download (headers and body) may take", 0.1, DAY)
    DOWNLOAD_MAXSIZE: int = setting(64 * MB, "bytes of a response body, counted after decompression, at most",
                                    1 * KB, 16 * GB)
    TASK_TIMEOUT: float = setting(300.0, "seconds a task may be processed before it is failed (0: no limit)",
                                  0, 7 * DAY)
    REQUEST_FILTER_ENABLE: bool = setting(False, "drop a request already made in this batch")
    REQUEST_FILTER: str = setting("exact", "how REQUEST_FILTER_ENABLE remembers a batch's requests (Redis): exact "
                                           "keeps each fingerprint (about 80 bytes); bloom a Bloom filter (about 2 "
                                           "bytes), which takes a few new requests for ones already made and drops "
                                           "them: a request not made (REQUEST_FILTER_ERROR_RATE of the new ones at "
                                           "most); SQLite and memory stay exact", choices=REQUEST_FILTERS)
    REQUEST_FILTER_ACROSS_BATCHES: bool = setting(False, "with REQUEST_FILTER_ENABLE, a follow-up request made in an "
                                                         "earlier batch is dropped too (the filter is kept from "
                                                         "batch to batch, 40 days past its last add): for "
                                                         "BATCH_MODE = incremental crawls that should fetch only "
                                                         "what is new; a task's own requests always go")
    REQUEST_FILTER_CAPACITY: int = setting(1_000_000, "requests a batch's bloom filter is sized for; past it a new "
                                                      "layer twice as large, with a tighter error, is added",
                                           1000, 1_000_000_000)
    REQUEST_FILTER_ERROR_RATE: float = setting(0.001, "the share of new requests a bloom filter may take for ones "
                                                      "already made (dropped: not made), every layer counted",
                                               1e-7, 0.1)
    USER_AGENT: Optional[tuple] = setting(None, "the User-Agent header; with several, one picked at random for "
                                                "each request", default_text="batchd/VERSION")
    DEFAULT_REQUEST_HEADERS: dict = setting({"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,"
                                                       "*/*;q=0.8", "Accept-Language": "en"},
                                            "headers sent with every request (a request's own win)")
    REDIRECT_MAX_TIMES: int = setting(20, "redirects one request follows, at most (0: none)", 0, 100)
    DOWNLOAD_WARNSIZE: int = setting(32 * MB, "bytes of a response body past which a warning names the URL "
                                              "(0: never)", 0, 16 * GB)
    TLS_VERIFY: bool = setting(True, "check https sites' certificates (off: one warning when a worker starts)")
    CONCURRENT_REQUESTS_PER_DOMAIN: int = setting(8, "requests in flight to one host at once, across a worker's "
                                                     "threads", 1, 1000)
    DOWNLOAD_DELAY: float = setting(0.0, "seconds between two requests to one host from a worker", 0, 3600)
    RANDOMIZE_DOWNLOAD_DELAY: bool = setting(True, "wait 0.5x to 1.5x DOWNLOAD_DELAY, at random, rather than "
                                                   "exactly")
    DOMAIN_RATE_LIMIT: float = setting(0.0, "requests a second to one host from every worker of the namespace on "
                                            "every machine (Redis; SQLite: this host's); 0: no limit", 0, 100_000)
    DOMAIN_RATE_BURST: int = setting(1, "requests to one host that may start together under DOMAIN_RATE_LIMIT "
                                        "after a lull", 1, 10_000)
    HOST_SET_ASIDE_MAX: int = setting(256, "tasks a worker holds set aside (leased, renewed) while their hosts' "
                                           "turns come; at this many it hands a busy host's surplus back to the queue, and leases "
                                           "no more until some go on", 1, 100_000)
    HOST_BREAKER_FAILURES: int = setting(5, "failures in a row of one host (connect errors, timeouts, 5xx, 429) that "
                                            "open its breaker: its requests wait for a probe (0: no breakers)",
                                         0, 10_000)
    HOST_BREAKER_PROBE: float = setting(5.0, "seconds from a host's breaker opening to its first probe (each failed "
                                             "probe doubles the wait)", 0.05, DAY)
    HOST_BREAKER_PROBE_MAX: float = setting(300.0, "seconds between two probes of a host whose breaker is open, at "
                                                   "most", 0.05, DAY)
    HOST_DOWN_GIVE_UP: float = setting(1800.0, "seconds a host's breaker may stay open before its requests fail at "
                                               "once, with one reason and one alert per batch", 0, 30 * DAY)

    HOSTS: dict = setting({}, "terms of their own for some hosts: [hosts.\"example.com\"] tables of rate, burst, "
                              "concurrency, delay, timeout, download_timeout, proxy, headers, crawl_hours (see below)",
                          parse=lambda raw, source: parse_hosts(raw, source),
                          may_hold="tables by host (`*.example.com`: its subdomains)")

    CRAWL_HOURS: tuple = setting((), "the hours tasks are leased, as windows in BATCH_TIMEZONE "
                                     "(`[\"01:00-06:00\"]`; `22:00-04:00` crosses midnight); outside them a host's "
                                     "tasks wait (those in flight finish) and other hosts go on; a [hosts] table's "
                                     "crawl_hours overrides it for its hosts; []: every hour",
                                 parse=lambda raw, source: parse_crawl_hours(raw, f"setting CRAWL_HOURS in {source}"),
                                 may_hold=HOURS_WORDS)
    HOST_STATS_TOP: int = setting(50, "hosts a batch's counters per host keep (`batchd status --hosts`); the "
                                      "others are summed as (other)", 1, 10_000)
    PROXY: Optional[str] = setting(None, "one proxy for every request: http://user:pass@host:port (or https, "
                                         "socks5)")
    PROXY_POOL: Optional[tuple] = setting(None, "proxies rotated request by request; an entry may also be a "
                                                "file (/path) or a URL with a path, read one proxy per line")
    PROXY_POOL_REFRESH: float = setting(300.0, "seconds between two readings of PROXY_POOL's files and URLs",
                                        1, DAY)
    PROXY_MAX_FAILURES: int = setting(3, "failed attempts in a row through a proxy before it is retired", 1, 1000)
    PROXY_RETIRE_SECONDS: float = setting(300.0, "seconds a retired proxy rests", 0, DAY)
    AUTOTHROTTLE_ENABLED: bool = setting(False, "space each host's requests by a delay learnt from its latency and "
                                                "its 429, 503 and timeouts, per worker")
    AUTOTHROTTLE_START_DELAY: float = setting(1.0, "AUTOTHROTTLE: seconds between two requests to a host not yet "
                                                   "heard from", 0, 3600)
    AUTOTHROTTLE_MAX_DELAY: float = setting(60.0, "AUTOTHROTTLE: seconds between two requests to one host, at most",
                                            0, 3600)
    AUTOTHROTTLE_TARGET_CONCURRENCY: float = setting(1.0, "AUTOTHROTTLE: requests in flight to one host aimed at, "
                                                          "on average (the delay aims at latency / this)", 0.01, 1000)
    ROBOTSTXT_OBEY: bool = setting(False, "check each request against its site's robots.txt (read once per batch); "
                                          "a disallowed one fails at once")
    DOWNLOADER_MIDDLEWARES: tuple = setting(
        ("batchd.download.middlewares.retry.RetryMiddleware",
         "batchd.download.middlewares.breaker.HostBreakerMiddleware",
         "batchd.download.middlewares.robots.RobotsTxtMiddleware",
         "batchd.download.middlewares.throttle.AutoThrottleMiddleware",
         "batchd.download.middlewares.proxies.ProxyMiddleware",
         "batchd.download.middlewares.rate_limit.RateLimitMiddleware",
         "batchd.download.middlewares.politeness.PolitenessMiddleware",
         "batchd.download.middlewares.stats.StatsMiddleware",
         "batchd.download.middlewares.latency.FetchLatencyMiddleware"),
        "the downloader middleware chain, outermost first: dotted paths of batchd.DownloaderMiddleware classes")
    # -- pages that need a browser: Request(render=True) (batchd/render/, README "Pages that need a browser")
    RENDER_BROWSER: str = setting("chromium", "the Chromium a rendered page is loaded in: a path, or a command on "
                                              "PATH (no browser is ever downloaded)")
    RENDER_DRIVER: str = setting("chromedriver", "the chromedriver that drives RENDER_BROWSER: a path, or a command "
                                                 "on PATH (its major version is the browser's)")
    RENDER_CONCURRENCY: int = setting(2, "pages a worker process renders at once, at most (in one browser, a tab each)",
                                      1, 64)
    RENDER_TIMEOUT: float = setting(30.0, "seconds a page may take to load and settle (render_wait included); "
                                          "past it the page is closed and retried like a timeout", 1, 3600)
    RENDER_PAGES_PER_BROWSER: int = setting(200, "pages a browser renders before it is replaced by a fresh one",
                                            1, 1_000_000)
    RENDER_MAX_MEMORY: int = setting(1024, "MB (PSS of its processes) past which a browser is replaced once its "
                                           "pages are done", 64, 64 * 1024)
    RENDER_BLOCK: tuple = setting(("image", "font", "media"), "resource types a rendered page does not load",
                                  parse=lambda raw, source: parse_render_block(raw, source),
                                  may_hold="a list of " + ", ".join(RESOURCE_TYPES))
    RENDER_AUTO_SAMPLE: int = setting(3, "pages of a host a render=\"auto\" request is both rendered and fetched "
                                         "plain for, before the host is crawled plain (when plain gave the same "
                                         "items) or rendered", 1, 1000)
    # -- items
    ITEM_FLUSH_SIZE: int = setting(500, "items per flush, at most", 1, 100_000)
    ITEM_FLUSH_INTERVAL: float = setting(1.0, "seconds between two flushes, at most", 0.01, 3600)
    FAILED_ITEMS_PATH: Optional[str] = setting(None, "where items the database will not take are kept",
                                               default_text="failed_items.jsonl in $STATE_DIRECTORY, "
                                                            "else in the working directory")
    ITEM_BATCH_COLUMN: Optional[str] = setting(None, "a column of the column item tables (__item_table__, an Item's "
                                                     "__table__) that the worker fills with the batch id of each "
                                                     "row it writes, so `batchd export --batch N` can pick a batch's "
                                                     "rows (docs/export.md); the tables must have it",
                                               identifier=True, default_text="off")
    ITEM_FLUSH_GIVE_UP: float = setting(120.0, "seconds a flush waits out an outage before its items go to "
                                               "FAILED_ITEMS_PATH", 0, DAY)
    STATS_FLUSH_INTERVAL: float = setting(5.0, "seconds between two flushes of a worker's batch counters to the "
                                               "backend, at most (and before every write-back)", 0.05, 3600)
    # -- the archive: every response a batch fetches, as WARC records (batchd/archive/, docs/recrawl.md)
    ARCHIVE: str = setting("off", "keep what a batch fetches: warc writes every response as WARC/1.1 records "
                                  "(needs warcio: pip install 'batchd[archive]'); off keeps nothing",
                           choices=ARCHIVE_FORMATS)
    ARCHIVE_PATH: Optional[str] = setting(None, "the folder of the archive: one folder per task table and batch",
                                          default_text="archive in $STATE_DIRECTORY, else in the working directory")
    ARCHIVE_MAX_SIZE: int = setting(1024 ** 3, "bytes of a WARC file past which a worker starts the next one",
                                    1024 * 1024, 1024 ** 4)
    ARCHIVE_GZIP_LEVEL: int = setting(1, "zlib's level for a record whose body came uncompressed (1: quick; 6: "
                                         "about a fifth smaller at five times the CPU); a body that came "
                                         "compressed is kept as it is", 1, 9)
    ARCHIVE_KEEP: int = setting(4, "batches whose archive folders are kept besides the running one; the master "
                                   "removes older ones as a batch opens (but those a kept batch's revisit records "
                                   "still refer to)", 1, 100_000)
    # -- data quality: measured per batch and host, compared with the batches before (batchd/quality/, docs/quality.md)
    QUALITY_CHECKS: bool = setting(True, "measure each batch's data per host (items, field coverage, bodies, block "
                                         "markers, tasks with no item) and flag it against the batches before (off: "
                                         "nothing is counted or judged)")
    QUALITY_DROP: float = setting(0.2, "the fall that flags a field's coverage, a host's item count (as a share of "
                                       "its baseline) and the share of its tasks done with no item", 0.01, 1)
    QUALITY_BASELINE: int = setting(3, "the closed batches of the same BATCH_MODE whose median is the baseline",
                                    1, 20)
    QUALITY_MIN_COVERAGE: dict = setting({}, "floors of coverage no batch may fall under, first batch included: "
                                             "{title = 0.9} for a field of every item table, {\"products.title\" = "
                                             "0.9} for one table's", parse=lambda raw, source: parse_floors(raw, source),
                                         may_hold="a table of field (or table.field) = a share from 0 to 1")
    QUALITY_RULES_OFF: Optional[tuple] = setting(None, "the rules that flag nothing (docs/quality.md says what each catches)",
                                                 default_text="none: every rule flags",
                                                 parse=lambda raw, source: parse_rules_off(raw, source),
                                                 may_hold="a list of " + ", ".join(QUALITY_RULES))
    QUALITY_SOFT_BLOCK_PAGES: int = setting(10, "pages with a body a host needs before the soft-block rule judges "
                                                "it", 2, 10 ** 9)
    QUALITY_SOFT_BLOCK_SHARE: float = setting(0.5, "the share of a host's pages serving one body that flags it as "
                                                   "soft-blocked", 0.05, 1)
    QUALITY_BLOCK_HOLD: bool = setting(True, "a host found serving a block page mid-batch (a block marker, or "
                                             "QUALITY_SOFT_BLOCK_SHARE of its last QUALITY_SOFT_BLOCK_PAGES pages one "
                                             "body) is held behind its breaker: that page's task goes back to pending, "
                                             "its items unstored (needs HOST_BREAKER_FAILURES; off: only flagged at the "
                                             "close)")
    BLOCK_MARKERS: Optional[tuple] = setting(None, "texts that mark a block page (case ignored), beside the built-in "
                                                   "challenge and captcha markers", default_text="the built-in ones")
    # -- alerts (batchd/alerts.py)
    STALL_ALERT_SECONDS: float = setting(900.0, "seconds an open batch with work left may go without a task settled "
                                                "(not paused) before a stall alert (0: never)", 0, 7 * DAY)
    FAILURE_ALERT_RATIO: float = setting(0.2, "failed / settled tasks of a batch above which a failure alert is "
                                              "raised, once 100 settled and at its close (1: never)", 0, 1)
    ALERT_WEBHOOK: Optional[str] = setting(None, "a URL each alert is POSTed to, as ALERT_WEBHOOK_FORMAT says (alerts "
                                                 "are WARNING lines in the log either way)",
                                           default_text="none: the log only",
                                           pattern=WEBHOOK_PATTERN, may_hold="an http:// or https:// URL")
    ALERT_WEBHOOK_FORMAT: Optional[str] = setting(None, "what is POSTed to ALERT_WEBHOOK: batchd's JSON, or a text "
                                                        "message as that chat's robot takes it",
                                                  choices=WEBHOOK_FORMATS, default_text="chosen by the webhook's host")
    ALERT_WEBHOOK_SECRET: Optional[str] = setting(None, "the signing secret of a DingTalk or Feishu robot (never "
                                                        "logged or shown)", default_text="none: unsigned", secret=True)
    ALERT_REPEAT_SECONDS: float = setting(3600.0, "seconds before an alert of one kind for one batch is raised "
                                                  "again", 0, 7 * DAY)
    # -- processes
    WORKERS: Optional[int] = setting(None, "worker processes per supervisor", 0, 1024, default_text="the CPU count")
    OUTAGE_TIMEOUT: float = setting(600.0, "--once: seconds an outage after the start is waited out before exit 69",
                                    1, 7 * DAY)
    MASTER_LOCK_TIMEOUT: float = setting(30.0, "seconds the master's lock outlives a master that stopped "
                                               "renewing it", 1, 3600)
    CHILD_TIMEOUT: float = setting(60.0, "seconds a child may go without progress before it is replaced", 1, 3600)
    STOP_TIMEOUT: float = setting(90.0, "seconds a warm stop may take", 0.1, DAY)
    STATUS_INTERVAL: float = setting(5.0, "seconds between a supervisor's STATUS= lines and snapshots", 0.1, 3600)
    LOG_LEVEL: str = setting("INFO", "the least severe messages logged", choices=LOG_LEVELS, ignore_case=True)
    METRICS_PORT: int = setting(0, "the TCP port a supervisor serves Prometheus metrics on at /metrics (0: off; "
                                   "needs prometheus-client)", 0, 65535)
    METRICS_ADDRESS: str = setting("127.0.0.1", "the address METRICS_PORT listens on (0.0.0.0: every IPv4 "
                                                "address)")
    # -- the dashboard: batchd web (batchd/web/, docs/web.md)
    WEB_LISTEN: str = setting("127.0.0.1:9380", "the ADDRESS:PORT `batchd web` serves the dashboard on ([::1]:PORT "
                                                "for IPv6; another address than loopback shows it to the network)",
                              pattern=LISTEN_PATTERN, may_hold="ADDRESS:PORT")
    WEB_TOKEN: Optional[str] = setting(None, "the bearer token the dashboard's actions (pause, resume, open-batch, "
                                             "requeue) take; without it or WEB_TOKEN_FILE they do not exist (never "
                                             "logged or shown)", default_text="none: read-only", secret=True)
    WEB_TOKEN_FILE: Optional[str] = setting(None, "a file holding WEB_TOKEN (its first line), readable by the "
                                                  "batchd user only", default_text="none")

    @property
    def refill_mark(self) -> int:
        """Tasks left in the queue when the worker that leases down to it wakes the master to refill: half
        of BATCH_PUSH_LIMIT. The master's refill of that half (about 10 us a task) is done before workers
        lease the other half unless they outrun the master itself; at a quarter, the refill of three
        quarters had to beat the last quarter, and workers waited past about a third of the master's rate."""
        return max(1, self.BATCH_PUSH_LIMIT // 2)

    def namespace_for(self, task_table: str) -> str:
        return self.NAMESPACE or task_table

    def failed_items_path(self) -> str:
        return self.FAILED_ITEMS_PATH or default_failed_items_path()

    def archive_path(self) -> str:
        return self.ARCHIVE_PATH or state_path("archive")

    def replace(self, **changes) -> "Settings":
        return dataclasses.replace(self, **changes)


def _base_type(annotation) -> tuple:
    """(int, False) for `int`, (int, True) for `Optional[int]`."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return (args[0], True) if args else (annotation, False)


SETTING_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}
SETTING_TYPES = {name: _base_type(f.type) for name, f in SETTING_FIELDS.items()}
TYPE_WORDS = {tuple: "a text or a non-empty list of texts (JSON in the environment)",
              dict: "a table of texts (JSON in the environment)"}


def default_failed_items_path(environ: Mapping[str, str] = os.environ) -> str:
    return state_path("failed_items.jsonl", environ)


def state_path(name: str, environ: Mapping[str, str] = os.environ) -> str:
    """`name` in systemd's StateDirectory (the first of $STATE_DIRECTORY), else in the working directory."""
    state_dirs = environ.get("STATE_DIRECTORY")
    base = state_dirs.split(":")[0] if state_dirs else "."
    return os.path.join(base, name)


def load_settings(custom: Optional[Mapping[str, Any]] = None, *, config_files=None,
                  environ: Mapping[str, str] = os.environ,
                  overrides: Optional[Mapping[str, Any]] = None) -> Settings:
    """Merge the layers in precedence order; each bad name or value is a ConfigError naming it."""
    values: dict = {}
    values.update(_checked_layer(custom or {}, "__custom_setting__"))
    for path in config_paths(config_files, environ):
        values.update(_checked_layer(read_config_file(path), path))
    values.update(_checked_layer(settings_from_environ(environ), "the environment"))
    values.update(_checked_layer({k: v for k, v in (overrides or {}).items() if v is not None},
                                 "the command line"))
    settings = Settings(**values)
    validate(settings)
    return settings


def settings_from_plain(values: Mapping[str, Any], source: str) -> Settings:
    """Settings again from their plain values (JSON has no tuple: a list of texts comes back a list)."""
    return Settings(**_checked_layer(values, source))


def config_paths(config_files, environ: Mapping[str, str]) -> list:
    """The files to read: the ones asked for, else the one found_config_file finds."""
    if config_files:
        paths = [config_files] if isinstance(config_files, (str, os.PathLike)) else list(config_files)
    else:
        found = found_config_file(environ)[0]
        paths = [found] if found else []
    return [os.fspath(p) for p in paths]


def found_config_file(environ: Mapping[str, str] = os.environ) -> tuple:
    """(the config file read when the command line names none, how it was found): BATCHD_CONFIG, else
    ./batchd.toml in the working directory (a project's), else /etc/batchd/batchd.toml; (None, why) when
    none is there. One file only: the first found, never a layer of both."""
    if environ.get(ENV_CONFIG):
        return environ[ENV_CONFIG], ENV_CONFIG
    if os.path.isfile(LOCAL_CONFIG_FILE):
        return os.path.abspath(LOCAL_CONFIG_FILE), f"./{LOCAL_CONFIG_FILE}"
    if os.path.exists(DEFAULT_CONFIG_FILE):
        return DEFAULT_CONFIG_FILE, "the system's"
    return None, f"none: no {ENV_CONFIG}, no ./{LOCAL_CONFIG_FILE}, no {DEFAULT_CONFIG_FILE}"


def read_config_file(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {path}: not found") from None
    except PermissionError:
        raise ConfigError(f"config file {path}: permission denied") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {path}: invalid TOML: {e}") from None
    for key, value in data.items():
        if isinstance(value, dict) and SETTING_TYPES.get(key.upper(), (None,))[0] is not dict:
            raise ConfigError(f"config file {path}: unexpected table [{key}]; settings are top-level keys "
                              "(only a table setting such as DEFAULT_REQUEST_HEADERS is a table)")
    return {key.upper(): value for key, value in data.items()}


def settings_from_environ(environ: Mapping[str, str]) -> dict:
    return {name[len(ENV_PREFIX):]: value for name, value in environ.items()
            if name.startswith(ENV_PREFIX) and name != ENV_CONFIG}


def _checked_layer(layer: Mapping[str, Any], source: str) -> dict:
    checked = {}
    for name, raw in layer.items():
        if name not in SETTING_TYPES:
            where = f"BATCHD_{name}" if source == "the environment" else name
            raise ConfigError(f"unknown setting {where!r} in {source}")
        checked[name] = coerce(name, raw, source)
    return checked


def coerce(name: str, raw: Any, source: str) -> Any:
    """Turn a raw value (a string from the environment, a TOML or Python value) into the setting's type."""
    base, optional = SETTING_TYPES[name]
    parse = SETTING_FIELDS[name].metadata["parse"]
    if parse is not None:
        return parse(raw, source)
    if raw is None:
        if optional:
            return None
        raise ConfigError(f"setting {name} in {source}: a value is required")
    try:
        return _convert(base, raw)
    except (TypeError, ValueError):
        raise ConfigError(f"setting {name} in {source}: {shown_value(name, raw)} is not "
                          f"{TYPE_WORDS.get(base, 'a valid ' + base.__name__)}") from None


def _convert(base, raw):
    if base is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ValueError(raw)
    if base in (int, float):
        if isinstance(raw, bool) or (base is int and isinstance(raw, float) and not raw.is_integer()):
            raise TypeError(raw)
        return base(str(raw).strip()) if isinstance(raw, str) else base(raw)
    if base is tuple:
        return _texts(raw)
    if base is dict:
        return _table_of_texts(raw)
    if not isinstance(raw, str):
        raise TypeError(raw)
    return raw


def _texts(raw) -> tuple:
    """A list of texts: a list (from TOML or code), a JSON array (from the environment), or one text."""
    if isinstance(raw, str):
        raw = json.loads(raw) if raw.lstrip().startswith("[") else [raw]
    if not isinstance(raw, (list, tuple)) or not raw or not all(isinstance(item, str) and item for item in raw):
        raise TypeError(raw)
    return tuple(raw)


def _table_of_texts(raw) -> dict:
    """A table of texts: a table (from TOML or code) or a JSON object (from the environment)."""
    if isinstance(raw, str):
        raw = json.loads(raw)
    if not isinstance(raw, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise TypeError(raw)
    return dict(raw)


def validate(s: Settings) -> None:
    """Hold every value to its declaration; the first that fails (in declaration order) is a ConfigError."""
    for f in dataclasses.fields(Settings):
        check_setting(f.name, getattr(s, f.name), f.metadata)


def check_setting(name: str, value, declaration: Mapping) -> None:
    """One value against its setting's declaration (see `setting()`); an unset optional passes."""
    if value is None and SETTING_TYPES[name][1]:
        return
    if declaration.get("parse") is not None:
        declaration["parse"](value, "settings")
        return
    if declaration.get("identifier"):
        check_identifier(value, name)
    choices = declaration.get("choices")
    if choices:
        folded = value.upper() if declaration.get("ignore_case") and isinstance(value, str) else value
        if folded not in choices:
            raise ConfigError(f"setting {name}: {shown_value(name, value)} is not one of " + ", ".join(choices))
    pattern = declaration.get("pattern")
    if pattern is not None and not (isinstance(value, str) and pattern.match(value)):
        raise ConfigError(f"setting {name}: {shown_value(name, value)} may hold only {declaration['may_hold']}")
    check_bounds(name, value, declaration)


def shown_value(name: str, value) -> str:
    """A value as an error message shows it: a secret setting's as ***."""
    return "***" if SETTING_FIELDS[name].metadata["secret"] else repr(value)


def check_bounds(name: str, value, declaration: Mapping) -> None:
    """A number must be finite and within its declared bounds; the error names the setting and the value."""
    if value is None or isinstance(value, (bool, str, tuple, dict)):
        return
    if not math.isfinite(value):
        raise ConfigError(f"setting {name}: {value!r} is not a finite number")
    low, high = declaration.get("low"), declaration.get("high")
    if low is not None and value < low:
        raise ConfigError(f"setting {name}: must be at least {low!r}, got {value!r}")
    if high is not None and value > high:
        raise ConfigError(f"setting {name}: must be at most {high!r}, got {value!r}")


def check_identifier(value: str, what: str) -> str:
    """An SQL identifier from settings or the spider: validated before it is ever quoted into SQL."""
    if not isinstance(value, str) or not IDENTIFIER.match(value):
        raise ConfigError(f"{what}: {value!r} is not a valid table or column name "
                          "(letters, digits and _, at most 64, not starting with a digit)")
    return value


def _table_from(raw: Any, where: str, json_words: str, table_words: str) -> Mapping:
    """A table setting's raw value: a table (TOML, code) or a JSON object (the environment); else a ConfigError
    saying what it must be."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise ConfigError(f"{where}: not a JSON object of {json_words}") from None
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: must be {table_words}")
    return raw


# -- the quality settings of their own shape (batchd/quality/, docs/quality.md)
def parse_floors(raw: Any, source: str) -> dict:
    """QUALITY_MIN_COVERAGE: {field or table.field: a share from 0 to 1}."""
    raw = _table_from(raw, f"{source}: QUALITY_MIN_COVERAGE", "field = share", "a table of field = share")
    floors = {}
    for key, share in raw.items():
        if not isinstance(key, str) or not key or isinstance(share, bool) or not isinstance(share, (int, float)) \
                or not 0 <= share <= 1:
            raise ConfigError(f"{source}: QUALITY_MIN_COVERAGE: {key!r} = {share!r}: a field (or table.field) and a "
                              "share from 0 to 1 are needed")
        floors[key] = float(share)
    return floors


def parse_rules_off(raw: Any, source: str) -> Optional[tuple]:
    """QUALITY_RULES_OFF: None, or rules of QUALITY_RULES."""
    return None if raw is None else _choices_of(raw, source, "QUALITY_RULES_OFF", "rule", QUALITY_RULES)


def parse_render_block(raw: Any, source: str) -> tuple:
    """RENDER_BLOCK: resource types of RESOURCE_TYPES (none, or an empty list: a page loads everything)."""
    if raw is None or (isinstance(raw, (list, tuple)) and not raw) or raw == "[]":
        return ()
    return _choices_of(raw, source, "RENDER_BLOCK", "resource type", RESOURCE_TYPES)


def _choices_of(raw: Any, source: str, name: str, what: str, choices: tuple) -> tuple:
    """A list setting whose every entry is one of `choices` (a ConfigError naming the first that is not)."""
    try:
        chosen = _texts(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{source}: {name}: a list of {what}s is needed ({', '.join(choices)})") from None
    unknown = [one for one in chosen if one not in choices]
    if unknown:
        raise ConfigError(f"{source}: {name}: {unknown[0]!r} is no {what}; the {what}s are " + ", ".join(choices))
    return chosen


# -- HOSTS: per-host terms (docs/settings.md, Per-host terms; hosts/terms.py applies them)
# Each key of a host's table, and the setting it stands in for at that host (its type and bounds hold it).
HOST_TERMS = {"rate": "DOMAIN_RATE_LIMIT", "burst": "DOMAIN_RATE_BURST", "concurrency": "CONCURRENT_REQUESTS_PER_DOMAIN",
              "delay": "DOWNLOAD_DELAY", "timeout": "REQUEST_TIMEOUT", "download_timeout": "DOWNLOAD_TIMEOUT",
              "proxy": "PROXY", "headers": "DEFAULT_REQUEST_HEADERS", "crawl_hours": "CRAWL_HOURS"}
HOST_PATTERN = re.compile(r"^(\*\.)?[a-z0-9_]([a-z0-9_-]{0,62})(\.[a-z0-9_]([a-z0-9_-]{0,62}))*$")
PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")


def parse_hosts(raw: Any, source: str) -> dict:
    """HOSTS from a layer: {pattern: {term: value}} with the patterns in lower case and each term held to the
    setting it stands in for; the first culprit is a ConfigError naming `source`, the host table and the key."""
    raw = _table_from(raw, f"{source}: HOSTS", "tables by host", "tables by host, as [hosts.\"example.com\"]")
    hosts = {}
    for pattern, table in raw.items():
        where = f"{source}: [hosts.{json.dumps(pattern)}]"
        folded = pattern.lower() if isinstance(pattern, str) else ""
        if not HOST_PATTERN.match(folded) or len(folded) > 255:
            raise ConfigError(f"{where}: not a host name, or *. and a domain for its subdomains")
        if not isinstance(table, Mapping):
            raise ConfigError(f"{where}: must be a table of terms ({', '.join(HOST_TERMS)})")
        hosts[folded] = {key: _host_term(where, key, value) for key, value in table.items()}
    return hosts


def _host_term(where: str, key: Any, value: Any) -> Any:
    name = HOST_TERMS.get(key)
    if name is None:
        raise ConfigError(f"{where} {key}: unknown; a host's terms are {', '.join(HOST_TERMS)}")
    f = SETTING_FIELDS[name]
    if key == "crawl_hours":        # (a list of its own shape, not one of _convert's)
        return parse_crawl_hours(value, f"{where} crawl_hours")
    base, low, high = SETTING_TYPES[name][0], f.metadata["low"], f.metadata["high"]
    try:
        converted = _convert(base, value)
        valid = base not in (int, float) or (math.isfinite(converted) and low <= converted <= high)
    except (TypeError, ValueError):
        valid = False
    if not valid:
        if base in (int, float):
            kind = "an integer" if base is int else "a number"
            raise ConfigError(f"{where} {key}: must be {kind} from {low!r} to {high!r}, got {value!r}")
        raise ConfigError(f"{where} {key}: must be {TYPE_WORDS.get(base, 'a text')}")
    if key == "proxy" and (urlsplit(converted).scheme not in PROXY_SCHEMES or not urlsplit(converted).hostname):
        raise ConfigError(f"{where} proxy: must be a proxy URL: http://[user:pass@]host:port (or https, socks5)")
    return converted


def redact_url(url: Optional[str]) -> str:
    """A connection URL fit for a log line: the password replaced by ***."""
    if not url:
        return "(not set)"
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def settings_table() -> str:
    """docs/settings.md's table, one row per setting in declaration order. That page holds this text
    verbatim (tests/test_config.py fails when they differ); after changing a declaration, paste in the
    output of `python -c 'from batchd.config import settings_table; print(settings_table(), end="")'`."""
    rows = ["| setting | default | values | meaning |", "| --- | --- | --- | --- |"]
    for f in dataclasses.fields(Settings):
        rows.append(f"| `{f.name}` | {shown_default(f)} | {shown_values(f)} | {f.metadata['meaning']} |")
    return "\n".join(rows) + "\n"


def declared_default(f: dataclasses.Field) -> Any:
    """A setting's default (a table's comes from its factory)."""
    factory = f.default_factory
    return factory() if callable(factory) else f.default


def shown_default(f: dataclasses.Field) -> str:
    """The default as it is written in a TOML file, or the declaration's words for an unset one."""
    default = declared_default(f)
    if default is None:
        return f.metadata["default_text"] or "—"
    return f"`{toml_value(default)}`"


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)   # a TOML basic string, for the plain texts of defaults
    if isinstance(value, tuple):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict) and not value:
        return "{}"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    return repr(value)


def shown_values(f: dataclasses.Field) -> str:
    """What `check_setting()` lets through, in words."""
    declaration, base = f.metadata, SETTING_TYPES[f.name][0]
    if declaration["identifier"]:
        return "a column name"
    if declaration["choices"]:
        *rest, last = [f"`{choice}`" for choice in declaration["choices"]]
        words = f"{', '.join(rest)} or {last}" if rest else last
        return words + " (any case)" if declaration["ignore_case"] else words
    if declaration["pattern"] is not None or declaration["parse"] is not None:
        return declaration["may_hold"]
    if base is bool:
        return "`true` or `false`"
    if base is tuple:
        return "a text, or a list of texts"
    if base is dict:
        return "a table of texts"
    if base in (int, float):
        integer = "integer " if base is int else ""
        return f"{integer}{declaration['low']!r} to {declaration['high']!r}"
    return "text"
