"""TaskLoad: one run of `batchd tasks add|import` holding the task table (BatchStore.loading_tasks); the SQL
stores' is in backends/sql_task_load.py.

A load asks which of a chunk's URLs the table already holds (or this load added), adds a chunk, and
commits everything at its end or nothing. Python holds one chunk at a time: what the load has added is
remembered by the database, in the one transaction the load runs in:

- when an index of the task table leads with the URL column, each chunk is looked up in the table itself,
  which inside the transaction also holds the rows added by the load's earlier chunks;
- otherwise a lookup would scan the whole table for every chunk, so the load first copies the table's URLs
  (as the dialect's key of each: the text, or its SHA-1) into a temporary table keyed on them, one scan,
  and adds each chunk's keys to it as it adds the chunk. The user's table is never altered.

url_problem() is what every load checks of a URL (`batchd tasks add|import|import-sitemap`, SITEMAPS).
"""
import abc
import re
from dataclasses import dataclass
from typing import Optional, Sequence
from urllib.parse import urlsplit

# A column whose declared type gives no length (SQLite's TEXT, as the seed's table has it on SQLite; MySQL's
# LONGTEXT) still gets a bound: browsers and servers commonly refuse URLs far shorter than this (8 KB is a
# usual request-line limit of web servers), so a longer value in a task table is a mistake, not a page.
UNDECLARED_MOST = 8192
DECLARED_LENGTH = re.compile(r"\(\s*(\d+)\s*\)")
SEEN_TABLE = "batchd_task_load"      # the temporary table of a load whose URL column has no index
SHOWN_URL = 100          # characters of a URL quoted in a line
SCHEMES = ("http", "https")
SPACE_OR_CONTROL = re.compile(r"[\x00-\x20\x7f]")
# The common good URL, told at once (urlsplit costs 25 us a URL, this 1): http(s)://, a host of ASCII name
# characters or an IPv6 literal, a port from 1 to 65535 or none, then a path, a query or a fragment with no space
# or control character. Anything else (user info, a non-ASCII host, a bad URL) goes through urlsplit.
PLAIN_URL = re.compile(r"(?i:https?)://(?:[A-Za-z0-9._~%!$&'()*+,;=-]+|\[[0-9A-Fa-f:.]+\])"
                       r"(?::(?:[1-9]\d{0,3}|[1-5]\d{4}|6[0-4]\d{3}|65[0-4]\d\d|655[0-2]\d|6553[0-5]))?"
                       r"(?:[/?#][^\x00-\x20\x7f]*)?")


@dataclass(frozen=True)
class ColumnLimit:
    """How long a value the task table's URL column takes: `most` characters, or bytes of UTF-8."""

    most: int
    unit: str = "characters"
    declared: bool = True

    def fits(self, value: str) -> bool:
        size = len(value.encode("utf-8")) if self.unit == "bytes" else len(value)
        return size <= self.most

    def size_of(self, value: str) -> int:
        return len(value.encode("utf-8")) if self.unit == "bytes" else len(value)

    def describe(self) -> str:
        origin = "the column's" if self.declared else "batchd's bound for a column of no declared length:"
        return f"{origin} {self.most:,} {self.unit}"


def declared_limit(declared_type: str) -> ColumnLimit:
    """The limit a declared type like VARCHAR(500) gives in characters; UNDECLARED_MOST when it gives none."""
    found = DECLARED_LENGTH.search(declared_type or "")
    return ColumnLimit(int(found.group(1))) if found else ColumnLimit(UNDECLARED_MOST, declared=False)


def shown(url: str) -> str:
    return repr(url if len(url) <= SHOWN_URL else f"{url[:SHOWN_URL]}...")


def url_problem(url: Optional[str], column: str, limit: ColumnLimit) -> Optional[str]:
    """What makes `url` no task URL, or None: an absolute http(s) URL with a host, that fits the column."""
    if not url:
        return f"no URL (column {column} is empty)"
    if not limit.fits(url):
        return (f"the URL is {limit.size_of(url):,} {limit.unit} long, more than column {column} takes "
                f"({limit.describe()}): {shown(url)}")
    if PLAIN_URL.fullmatch(url):
        return None
    odd = SPACE_OR_CONTROL.search(url)
    if odd:
        return f"a space or control character at position {odd.start() + 1} of the URL: {shown(url)}"
    try:
        parts = urlsplit(url)
        parts.port          # a port that is no number raises
    except ValueError as e:
        return f"not a URL ({e}): {shown(url)}"
    if parts.scheme.lower() not in SCHEMES:
        what = f"its scheme is {parts.scheme!r}" if parts.scheme else "it has no scheme"
        return f"not an absolute http or https URL ({what}): {shown(url)}"
    if not parts.hostname:
        return f"no host in the URL: {shown(url)}"
    return None



class TaskLoad(abc.ABC):
    """What `batchd tasks` needs of a store while it loads tasks: the URL column's limit, which URLs are
    already there, and adding a chunk. Inside BatchStore.loading_tasks: committed when it ends, discarded
    when an exception leaves it."""

    limit: ColumnLimit

    @abc.abstractmethod
    def known(self, urls: Sequence[str]) -> set:
        """Those of `urls` the task table holds (compared exactly), the rows this load added included."""

    @abc.abstractmethod
    def add(self, rows: Sequence[dict], urls: Optional[Sequence[str]] = None) -> None:
        """Add task rows (their columns checked by loading_tasks); `urls`, their URLs, are remembered for
        known() (None: the load does not check for duplicates)."""

    @abc.abstractmethod
    def ids_of(self, urls: Sequence[str]) -> dict:
        """The task id of each of `urls` the table held before this load, by URL (a sitemap's newer lastmod
        makes that task due: sitemaps/sitemap_import.py). Through an index leading with the URL column, else
        a scan of the table for each call: the seed's table made by batchd has one."""
