"""Reading one sitemap file, or one robots.txt, as a stream: what the sitemaps protocol (sitemaps.org) says a file
holds, never the whole file at once.

- A download goes through requests (stream=True) with REQUEST_TIMEOUT between reads, DOWNLOAD_TIMEOUT for the
  whole file, the USER_AGENT setting and TLS_VERIFY; an answer other than 200 is a SitemapError.
- A body that is gzip (by its magic bytes, whatever its name or type says) is inflated piece by piece, each
  piece at most PIECE bytes, so a gzip bomb never lands in memory whole; a file past MOST_BYTES (the protocol's
  50 MB) uncompressed is cut there (SitemapError, after what was read before).
- The XML is parsed as it comes (ElementTree's pull parser: expat, which fetches no external entity and refuses
  entity expansion attacks), each <url> or <sitemap> cleared from the tree once read.
- A file holds entries of one kind: <urlset> pages, or a <sitemapindex> of further sitemaps. Each Entry has
  its <loc> and its <lastmod> (W3C datetime, as Unix time; None when absent or unreadable).

Scope: the protocol lets a sitemap list only URLs under its own folder (http://h/a/sitemap.xml: http://h/a/...),
unless robots.txt named it: then any URL of the robots.txt's origin, and so for the sitemaps its index lists.
"""
import time
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Iterator, Optional, cast
from urllib.parse import urljoin, urlsplit
from xml.etree.ElementTree import Element, ParseError, XMLPullParser

import requests
from protego import Protego

from ..config import Settings
from ..release import VERSION

MOST_ENTRIES = 50_000            # URLs of a sitemap, or sitemaps of an index (the protocol's limit)
MOST_BYTES = 50 * 1024 * 1024    # bytes of one file, uncompressed (the protocol's 50 MB)
ROBOTS_MOST_BYTES = 512 * 1024   # a robots.txt larger than this is cut (Google reads 500 KiB of one)
READ_SIZE = 16 * 1024            # bytes read from the socket at a time
PIECE = 256 * 1024               # bytes of inflated gzip handed on at a time
GZIP_MAGIC = b"\x1f\x8b"
KINDS = {"urlset": "url", "sitemapindex": "sitemap"}     # the root element -> the element of its entries


class SitemapError(Exception):
    """Why a sitemap (or a robots.txt) could not be read, in words for one line naming it."""


@dataclass(frozen=True)
class Entry:
    """One <url> of a sitemap (kind "url") or one <sitemap> of an index (kind "sitemap")."""

    kind: str
    loc: str
    lastmod: Optional[float] = None


@dataclass(frozen=True)
class Scope:
    """The URLs a sitemap may list: those starting with `prefix` (scheme and host compared in lower case)."""

    prefix: str
    named_by_robots: bool = False

    @classmethod
    def of_sitemap(cls, url: str) -> "Scope":
        """The sitemap's own folder."""
        parts = urlsplit(url)
        return cls(f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path[:parts.path.rfind('/') + 1] or '/'}")

    @classmethod
    def of_robots(cls, robots_url: str) -> "Scope":
        """Every URL of the robots.txt's origin."""
        parts = urlsplit(robots_url)
        return cls(f"{parts.scheme.lower()}://{parts.netloc.lower()}/", named_by_robots=True)

    def holds(self, url: str) -> bool:
        if url.startswith(self.prefix):     # the common case, without urlsplit's 20 us
            return True
        try:
            parts = urlsplit(url)
        except ValueError:
            return False
        return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path or '/'}".startswith(self.prefix)

    def for_child(self, sitemap_url: str) -> "Scope":
        """What a sitemap an index lists may hold: the index's scope when robots.txt named the index, else
        its own folder."""
        return self if self.named_by_robots else Scope.of_sitemap(sitemap_url)


def is_robots_txt(url: str) -> bool:
    return urlsplit(url).path == "/robots.txt"


class SitemapReader:
    """Downloads and parses sitemaps and robots.txt files with one requests session."""

    def __init__(self, settings: Settings, beat: Callable[[], None] = lambda: None):
        """`beat` is called at each piece read (a master's heartbeat: a slow site is progress, not a hang)."""
        self.beat = beat
        self.session = requests.Session()
        self.session.headers["User-Agent"] = settings.USER_AGENT[0] if settings.USER_AGENT else f"batchd/{VERSION}"
        self.session.verify = settings.TLS_VERIFY
        self.timeout, self.whole_timeout = settings.REQUEST_TIMEOUT, settings.DOWNLOAD_TIMEOUT

    def close(self) -> None:
        self.session.close()

    def robots_sitemaps(self, robots_url: str) -> list:
        """The Sitemap: lines of a robots.txt, as absolute URLs, in its order (repeats once)."""
        body = b"".join(self._body(robots_url, ROBOTS_MOST_BYTES, cut_quietly=True))
        rules = Protego.parse(body.decode("utf-8", errors="replace"))
        return list(dict.fromkeys(urljoin(robots_url, url.strip()) for url in rules.sitemaps))

    def entries(self, url: str) -> Iterator[Entry]:
        """The entries of one sitemap file, as it downloads. SitemapError when it cannot be read, is no sitemap
        or is cut (past MOST_BYTES): the entries read before it stay read."""
        parser: XMLPullParser[Element] = XMLPullParser(events=("start", "end"))
        root: Optional[Element] = None
        kind = ""
        try:
            for piece in self._body(url, MOST_BYTES):
                parser.feed(piece)
                for event, element in cast("Iterator[tuple[str, Element]]", parser.read_events()):
                    if root is None:
                        root, kind = element, KINDS.get(local_name(element.tag), "")
                        if not kind:
                            raise SitemapError(f"not a sitemap: its root element is <{local_name(root.tag)[:40]}>, "
                                               "not <urlset> or <sitemapindex>")
                    elif event == "end" and local_name(element.tag) == kind:
                        entry = _entry(kind, element)
                        root.clear()        # what was read is let go: the tree stays one entry deep
                        if entry is not None:
                            yield entry
            parser.close()
        except ParseError as e:
            raise SitemapError(f"not well-formed XML ({e})") from None
        if root is None:
            raise SitemapError("empty: no XML in it")

    def _body(self, url: str, most: int, cut_quietly: bool = False) -> Iterator[bytes]:
        """The body of a 200 answer, inflated if gzip, in pieces; past `most` bytes a SitemapError (or, with
        `cut_quietly`, the end)."""
        deadline = time.monotonic() + self.whole_timeout
        try:
            with self.session.get(url, stream=True, timeout=self.timeout) as response:
                if response.status_code != 200:
                    raise SitemapError(f"HTTP {response.status_code}")
                size = 0
                for piece in _inflated(response.iter_content(READ_SIZE)):
                    size += len(piece)
                    if size > most:
                        if cut_quietly:
                            return
                        raise SitemapError(f"over {most // (1024 * 1024)} MB uncompressed, the protocol's limit: "
                                           "read no further")
                    if time.monotonic() > deadline:
                        raise SitemapError(f"not downloaded within DOWNLOAD_TIMEOUT ({self.whole_timeout:g} s)")
                    self.beat()
                    yield piece
        except requests.RequestException as e:
            raise SitemapError(f"{type(e).__name__}: {' '.join(str(e).split())}") from None
        except zlib.error as e:
            raise SitemapError(f"bad gzip data ({e})") from None


def _inflated(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The chunks as they are, or inflated when the first bytes are gzip's magic (a .xml.gz served without
    Content-Encoding: requests has already undone a Content-Encoding), at most PIECE bytes at a time."""
    head = b""
    gunzip = None
    for chunk in chunks:
        if gunzip is None:
            head += chunk
            if len(head) < len(GZIP_MAGIC):
                continue
            if not head.startswith(GZIP_MAGIC):
                yield head
                yield from chunks
                return
            gunzip, chunk = zlib.decompressobj(16 + zlib.MAX_WBITS), head
        while chunk:
            yield gunzip.decompress(chunk, PIECE)
            chunk = gunzip.unconsumed_tail
    if gunzip is None and head:
        yield head


def local_name(tag: str) -> str:
    """A tag without its namespace: {http://www.sitemaps.org/schemas/sitemap/0.9}url -> url."""
    return tag.rpartition("}")[2]


def _entry(kind: str, element: Element) -> Optional[Entry]:
    loc = lastmod = None
    for child in element:
        name = local_name(child.tag)
        if name == "loc":
            loc = (child.text or "").strip()
        elif name == "lastmod":
            lastmod = parse_lastmod(child.text or "")
    return Entry(kind, loc, lastmod) if loc else None


def parse_lastmod(text: str) -> Optional[float]:
    """A W3C datetime (YYYY, YYYY-MM, YYYY-MM-DD, or with a time and a zone) as Unix time; a time without a
    zone is read as UTC; None when it is none of these."""
    text = text.strip()
    if len(text) in (4, 7):           # YYYY or YYYY-MM: the first day
        text += "-01" * (3 - text.count("-") - 1)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()
