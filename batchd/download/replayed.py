"""A request answered from an archive instead of the network: what a reparse batch's tasks fetch (`batchd reparse`,
docs/recrawl.md "Reparse").

The request goes as the crawl sent it: the spider's download_midware (`prepare`) makes the request to look up, and
the archive is asked for the newest record of its method and URL (a revisit followed to the body it refers to, a
rendered page's DOM: batchd/archive/replay.py). What comes back is judged as the downloader judges what its chain
ends with: a 2xx page the spider's validate (`accept`) takes is the Response, anything else RequestFailed (the
errback runs on a 404 the crawl met, as it did then). No link of the chain runs: nothing is sent, so there is no
host's turn to wait for, no proxy, no retry.

A request the archive lacks is `NotArchived`: the task's run skips it (no callback, no errback) and counts it, or,
with `--fetch-missing`, the caller fetches it through the chain as a crawl would.
"""
import logging
from typing import Optional, Protocol, Sequence

import requests
from requests.structures import CaseInsensitiveDict

from ..http import Request, Response
from .chain import PageRejected
from .downloader import _failed, _is_2xx, _judged

log = logging.getLogger("batchd")


class ReplayedPage(Protocol):
    """What an archive gives back for a request (batchd/archive/replay.py)."""

    status: int
    headers: Sequence[tuple]     # (name, value) pairs, as received
    body: bytes
    url: str                     # where the request landed, after its redirects
    rendered: bool               # the body is a browser's DOM


class ReplaySource(Protocol):
    def find(self, method: str, url: str) -> Optional[ReplayedPage]: ...

    def close(self) -> None: ...


class NotArchived(Exception):
    """The archive holds no response to this request."""

    def __init__(self, request: Request):
        super().__init__(f"{request.method} {request.url}: not in the archive")
        self.request = request


def fetch_replayed(source: ReplaySource, request: Request, prepare=None, accept=None) -> Response:
    """The 2xx Response the archive holds for `request` (after `prepare`, the spider's download_midware), judged by
    `accept` (its validate) as a download would be; RequestFailed for any other status or a page validate refuses;
    NotArchived when the archive has none."""
    sent = (prepare(request) or request) if prepare else request
    page = source.find(sent.method, sent.url)
    if page is None:
        raise NotArchived(sent)
    response = replayed_response(sent, page)
    if not _is_2xx(response):
        raise _failed(request, response, 1)
    if accept is not None:
        verdict = _judged(accept, sent, response)
        if isinstance(verdict, PageRejected):
            raise _failed(request, verdict, 1)
    return response


def replayed_response(request: Request, page: ReplayedPage) -> Response:
    """A Response like a download's from an archived page: its status, headers (as received) and final URL, its
    body as the callback read it then (decoded; a rendered page's DOM)."""
    raw = requests.Response()
    raw.status_code, raw.url = page.status, page.url
    raw.headers = CaseInsensitiveDict(list(page.headers))
    response = Response(raw, request, page.body)
    response.rendered, response.replayed = page.rendered, True
    return response
