"""What a re-crawl knows of one page: the validators a conditional request sends, and what the request
found (a PageVisit).

A conditional request is a browser cache's: If-None-Match with the ETag and If-Modified-Since with the
Last-Modified of the URL's last 2xx, sent only when
- the request may revalidate: a GET, REVALIDATE on, `Request(revalidate=True)` (the default);
- that 2xx did not come through a redirect (its validators belong to where it landed, and the redirect
  may lead elsewhere now): such a page is fetched whole, and its signature still tells whether it changed;
- it was fetched whole less than REVISIT_INTERVAL_MAX ago (a forced whole fetch at least that often);
- its Vary allows it: `Vary: *` never, and a Vary naming request headers only when the request about to
  go carries them with the values sent then (the downloader checks, with the headers it sends).
A 304 is trusted only for the URL asked: one reached through a redirect sends the request again whole.

A request's signature is of what its callback yielded (CHANGE_SIGNATURE = "items": sha1 of the items as
canonical JSON, in order), or of the page's bytes ("body": an unchanged body is not parsed again).
"""
import hashlib
import json
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from ..model import PageRecord

NEW, CHANGED, UNCHANGED, GONE = "new", "changed", "unchanged", "gone"
VERDICTS = (NEW, CHANGED, UNCHANGED, GONE)
GONE_STATUSES = (404, 410)
CONDITIONAL_META = "batchd.conditional"     # Request.meta key: the Conditional the downloader may send
CONDITIONAL_HEADERS = ("If-None-Match", "If-Modified-Since")
VARY_ANY = "*"
FOUND = "recrawl/"                   # a batch's counters of tasks: recrawl/new, recrawl/changed, ...
ITEMS_UNCHANGED = "item/unchanged"   # a batch's counter of items not written again: equal to those stored


@dataclass(frozen=True)
class Conditional:
    """The validators of a URL's last 2xx, and the request headers its Vary named as they were sent then
    (None: no Vary)."""

    etag: Optional[str]
    last_modified: Optional[str]
    vary: Optional[dict]

    def headers_over(self, headers: Mapping) -> Mapping:
        """`headers` (those about to be sent) with the conditional ones added, or as they are when Vary
        says this request is not the one the validators came with."""
        if self.vary is not None and any(_header(headers, name) != value for name, value in self.vary.items()):
            return headers
        added = {}
        if self.etag:
            added["If-None-Match"] = self.etag
        if self.last_modified:
            added["If-Modified-Since"] = self.last_modified
        return {**headers, **added}


def conditional_of(page: Optional[PageRecord], now: float, max_interval: float) -> Optional[Conditional]:
    """What a request to the page may send to revalidate it, or None: fetch it whole."""
    if page is None or page.redirected or not (page.etag or page.last_modified) or page.vary == VARY_ANY:
        return None
    if now - page.whole_at >= max_interval:
        return None
    return Conditional(page.etag, page.last_modified, json.loads(page.vary) if page.vary else None)


def was_conditional(sent_headers: Mapping) -> bool:
    return any(_header(sent_headers, name) is not None for name in CONDITIONAL_HEADERS)


def vary_of(response_headers: Mapping, sent_headers: Mapping) -> Optional[str]:
    """The page record's vary: "*", or JSON of the request headers the response's Vary names, as sent."""
    named = [name.strip().lower() for name in (response_headers.get("Vary") or "").split(",") if name.strip()]
    if not named:
        return None
    if VARY_ANY in named:
        return VARY_ANY
    return json.dumps({name: _header(sent_headers, name) for name in sorted(set(named))}, sort_keys=True)


def items_signature(items: Sequence[Mapping]) -> str:
    digest = hashlib.sha1()
    for item in items:
        # Keys sorted: an item is the same whatever order its fields were filled in.
        digest.update(json.dumps(dict(item), sort_keys=True, default=str, ensure_ascii=False).encode())
        digest.update(b"\0")
    return digest.hexdigest()


def body_signature(body: bytes) -> str:
    return hashlib.sha1(body).hexdigest()


@dataclass(frozen=True)
class PageVisit:
    """What one request of a task found. `page`: the record to keep at the task's write-back (None: keep
    nothing new, as for a gone page, which is forgotten, or a request fetched whole with no record).
    `settled`: found unchanged before its callback ran (a 304, the same body), so the callback that would
    have called update_task() was not called: the request settles its task as done by itself."""

    url: str
    verdict: str
    page: Optional[PageRecord] = None
    settled: bool = False


def settled_unchanged(visits: Sequence[PageVisit]) -> bool:
    """Whether a request of the task was found unchanged without its callback: with no update_task(),
    the task is done once its requests are over (its earlier items stand)."""
    return any(visit.settled for visit in visits)


def task_verdict(visits: Sequence[PageVisit]) -> Optional[str]:
    """What a task found, from its requests': gone if one page is gone, changed if one changed, new if
    one is new, else unchanged; None when no request was remembered."""
    found = {visit.verdict for visit in visits}
    return next((verdict for verdict in (GONE, CHANGED, NEW, UNCHANGED) if verdict in found), None)


def _header(headers: Mapping, name: str) -> Optional[str]:
    """A header's value, whatever the case of its name (a requests CaseInsensitiveDict, or a plain dict)."""
    lowered = name.lower()
    for key, value in headers.items():
        if key.lower() == lowered:
            return value.decode("latin-1") if isinstance(value, bytes) else str(value)
    return None
