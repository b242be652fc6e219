"""What the downloader asks of a browser engine, and what it gets back: batchd's own small interface, so that
an engine (Selenium today; Playwright could be a second) changes nothing in spiders or in the chain.

A renderer loads one request's page in a browser and hands back a `RenderedPage`. Its failures are those of a
plain download, so the retry middleware and the host breakers judge them alike: a page that does not settle
in its time is a `RenderTimeout` (a requests.Timeout), a browser that crashed or a page that could not be
reached is a `BrowserError` (a requests.ConnectionError); what no retry heals (no browser on the machine) is a
`RenderUnavailable`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from http.cookiejar import CookieJar
from typing import Mapping, Optional, Protocol

import requests
from requests.structures import CaseInsensitiveDict

from ..http import Request, Response

DOM_TYPE = "text/html; charset=utf-8"   # the DOM is serialised as text, and sent on as UTF-8
# A batch's counters of rendering (the pool adds to them; the batch's done line says them in words).
RENDERED, RENDER_MS = "render/pages", "render/ms"
BROWSER_STARTS, BROWSER_RESTARTS = "render/browser_starts", "render/browser_restarts"


class RenderTimeout(requests.Timeout):
    """The page did not settle within its render_timeout: it was closed, and is retried like a timeout."""


class BrowserError(requests.ConnectionError):
    """The browser crashed under the page, or the page could not be reached: retried like a connection error."""


class RenderUnavailable(Exception):
    """Rendering cannot work here (no browser, no driver, no Selenium): one line saying what to install."""


@dataclass
class Hop:
    """One answer on the way to the page: its status, URL and headers."""
    status: int
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class RenderedPage:
    """What a browser made of a request: the main document's answer (`final`), the redirects before it, and
    the DOM once the page's scripts ran."""
    final: Hop
    dom: str
    redirects: list = field(default_factory=list)
    seconds: float = 0.0

    def response(self, request: Request) -> Response:
        """A Response like a plain download's: status and headers of the main document, the URL after its
        redirects, and the DOM as its UTF-8 body."""
        raw = _raw(self.final, dom_headers(self.final.headers))
        raw.history = [_raw(hop, CaseInsensitiveDict(hop.headers)) for hop in self.redirects]
        response = Response(raw, request, self.dom.encode("utf-8"))
        response.elapsed = self.seconds
        response.rendered = True
        return response


def dom_headers(headers: Mapping[str, str]) -> CaseInsensitiveDict:
    """The document's headers, saying what the body now is: the DOM as UTF-8 text, neither compressed nor of
    the length the server sent."""
    kept = CaseInsensitiveDict({name: value for name, value in headers.items()
                                if name.lower() not in ("content-encoding", "content-length", "transfer-encoding")})
    kept["Content-Type"] = DOM_TYPE
    return kept


def _raw(hop: Hop, headers: CaseInsensitiveDict) -> requests.Response:
    raw = requests.Response()
    raw.status_code, raw.url, raw.headers = hop.status, hop.url, headers
    return raw


class Renderer(Protocol):
    """A browser engine: `render` loads `request` and returns its page, in at most `timeout` seconds, with
    `headers` (User-Agent among them) on its requests, the cookies of `jar` in the page and the page's cookies
    back in `jar` afterwards, through `proxy` (a URL, or None); `close` ends every browser it started."""

    def render(self, request: Request, jar: CookieJar, headers: Mapping[str, str], proxy: Optional[str],
               timeout: float) -> RenderedPage: ...

    def close(self) -> None: ...
