"""Requests and responses: what a spider builds and what its callbacks receive.

`Response.text` never trusts requests' ISO-8859-1 default for undeclared text:
w3lib's html_to_unicode looks, as browsers do, at a byte-order mark, the
Content-Type charset, then a <meta> charset or <?xml encoding> in the first
4 KB, and reads labels as their supersets (gbk as gb18030, latin-1 as cp1252,
shift_jis as cp932...); an undeclared body is UTF-8 if it strictly is, else
what statistical detection makes of its first 64 KB.
The downloader that turns one into the other is batchd/download/downloader.py.
"""
# Annotations stay unevaluated: requests 2.28 (Debian 12) has no subscriptable CaseInsensitiveDict.
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json as jsonlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from http.cookiejar import CookieJar
from typing import IO, TYPE_CHECKING, Any, Optional, Union, overload
from urllib.parse import SplitResult, parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

import parsel
from w3lib.encoding import html_to_unicode, resolve_encoding, to_unicode
from w3lib.html import get_base_url
from w3lib.url import canonicalize_url
from requests.compat import chardet  # whichever detector requests uses; may be None

if TYPE_CHECKING:
    import requests
    from requests.auth import AuthBase
    from requests.structures import CaseInsensitiveDict

# What a callback produces: nothing, or (yields) items (mappings) and further Requests; None is skipped.
Produced = Optional[Iterable[Union["Request", Mapping[str, Any], None]]]
# A callback: a callable taking (request, response, task, **cb_kwargs), or the name of a method of the spider.
Callback = Callable[..., Produced]
# An errback: a callable taking (request, response_or_exception, task), or the name of a method of the spider.
Errback = Callable[["Request", Union["Response", Exception], dict[str, Any]], Produced]
# Query parameters or form fields, as requests takes them.
Fields = Union[Mapping[str, Any], Sequence[tuple[str, Any]], str, bytes]
Auth = Union[tuple[str, str], "AuthBase", Callable[[Any], Any]]
Timeout = Union[float, tuple[Optional[float], Optional[float]]]
Regex = Union[str, re.Pattern[str]]     # (Response.re shadows the module `re` inside the class)

DETECT_BYTES = 64 * 1024  # detectors are slow on big pages and gain nothing past this
# w3lib 2.1 (Debian 12) reads only a bare `charset=label`; quoted labels and spaces around "=" are common too.
HEADER_CHARSET = re.compile(r"(?:^|;)\s*charset\s*=\s*[\"']?([^\"';,\s]+)", re.IGNORECASE)
DEFAULT_PORTS = {"http": ":80", "https": ":443"}


@dataclass
class FetchOptions:
    """How a request is sent: requests' own arguments, and batchd's per-request limits. `timeout` overrides
    REQUEST_TIMEOUT; `verify` (a CA bundle's path, or False) TLS_VERIFY; `maxsize` (bytes) DOWNLOAD_MAXSIZE;
    `proxy` (a URL) is the proxy of this request alone, instead of PROXY or PROXY_POOL; `extra`: any other
    argument of requests.Session.request (files, cert...)."""
    headers: Optional[Mapping[str, Union[str, bytes]]] = None
    params: Optional[Fields] = None
    data: Union[Fields, IO[bytes], Iterable[bytes], None] = None
    json: Any = None
    cookies: Union[Mapping[str, str], CookieJar, None] = None
    timeout: Optional[Timeout] = None
    allow_redirects: bool = True
    proxies: Optional[Mapping[str, str]] = None
    proxy: Optional[str] = None
    verify: Union[bool, str, None] = None
    auth: Optional[Auth] = None
    maxsize: Optional[int] = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RetryOptions:
    """How a failed attempt is tried again: `max_retry_times` overrides SPIDER_MAX_RETRY_TIMES."""
    max_retry_times: Optional[int] = None


@dataclass
class RevalidateOptions:
    """What a re-crawl does with this request (REVALIDATE, docs/recrawl.md): a GET goes conditional when its
    URL's last crawl kept validators, unless `revalidate` is False (always fetched whole); when the page did
    not change, `on_unchanged`, if given, is called instead of the callback (the response of a 304 has no
    body)."""
    revalidate: bool = True
    on_unchanged: Union[Callback, str, None] = None


RENDER_CHOICES = (False, True, "auto")


@dataclass
class RenderOptions:
    """Whether the page is loaded in a browser (batchd/render/, README "Pages that need a browser"). `render`:
    True loads it in Chromium and the response's body is the DOM once its scripts ran; "auto" lets batchd learn
    per host whether a plain fetch gives the same items (render/auto.py). `render_wait`: a CSS selector that
    must be on the page, or seconds to wait after it loaded; `render_timeout` overrides RENDER_TIMEOUT;
    `render_hook(page)` (a callable, or the name of a spider method) acts on the page (render/page.py: click,
    fill, scroll...) before its DOM is read."""
    render: Union[bool, str] = False
    render_wait: Union[str, float, None] = None
    render_timeout: Optional[float] = None
    render_hook: Union[Callable[..., Any], str, None] = None

    def __post_init__(self) -> None:
        if self.render not in RENDER_CHOICES or self.render == 1 and self.render is not True:
            raise ValueError(f"Request: render={self.render!r}: write True, False or \"auto\"")
        wait = self.render_wait
        if wait is not None and (isinstance(wait, bool) or not isinstance(wait, (str, int, float)) or
                                 (not isinstance(wait, str) and wait < 0)):
            raise ValueError(f"Request: render_wait={wait!r}: a CSS selector, or seconds (>= 0)")


# Each keyword of Request's option groups, and the group that keeps it.
GROUP_OF_KEYWORD = {**{name: "fetch" for name in FetchOptions.__dataclass_fields__ if name != "extra"},
                    "max_retry_times": "retry", "revalidate": "revalidation", "on_unchanged": "revalidation",
                    **{name: "rendering" for name in RenderOptions.__dataclass_fields__}}
GROUPS = {"fetch": FetchOptions, "retry": RetryOptions, "revalidation": RevalidateOptions,
          "rendering": RenderOptions}
# The arguments of requests.Session.request that batchd has no keyword of its own for: they go on to requests.
# Any other keyword is a mistake (a misspelt option would otherwise be dropped without a word).
REQUESTS_ONLY_KEYWORDS = ("files", "cert", "hooks")


class _Grouped:
    """An option read and written through its group: `request.timeout` is `request.fetch.timeout`, as spiders
    and middlewares written before the groups read it."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.group, self.name = GROUP_OF_KEYWORD[name], name

    def __get__(self, request: Any, owner: Any = None) -> Any:
        return getattr(getattr(request, self.group), self.name)

    def __set__(self, request: Any, value: Any) -> None:
        setattr(getattr(request, self.group), self.name, value)


class Request:
    """One HTTP request and what the spider wants done with its response.

    Its options are kept in four groups: how it is sent (`fetch`, FetchOptions), how it is retried
    (`retry`, RetryOptions), what a re-crawl does with it (`revalidation`, RevalidateOptions), whether a
    browser loads it (`rendering`, RenderOptions). Each option
    may be given by its own keyword as well (`Request(url, timeout=5, revalidate=False)`), and read or
    set as an attribute of the request (`request.timeout`)."""

    headers = _Grouped()
    params = _Grouped()
    data = _Grouped()
    json = _Grouped()
    cookies = _Grouped()
    timeout = _Grouped()
    allow_redirects = _Grouped()
    proxies = _Grouped()
    proxy = _Grouped()
    verify = _Grouped()
    auth = _Grouped()
    maxsize = _Grouped()
    max_retry_times = _Grouped()
    revalidate = _Grouped()
    on_unchanged = _Grouped()
    render = _Grouped()
    render_wait = _Grouped()
    render_timeout = _Grouped()
    render_hook = _Grouped()

    def __init__(self, url: str, callback: Union[Callback, str, None] = None, method: str = "GET", *,
                 errback: Union[Errback, str, None] = None, cb_kwargs: Optional[dict[str, Any]] = None,
                 meta: Optional[dict[str, Any]] = None, dont_filter: bool = False,
                 fetch: Optional[FetchOptions] = None, retry: Optional[RetryOptions] = None,
                 revalidation: Optional[RevalidateOptions] = None, rendering: Optional[RenderOptions] = None,
                 **options: Any) -> None:
        """`errback` is called instead of the spider's failed_request when this request fails for good
        (retries spent, or not retryable); `cb_kwargs` are passed to the callback as keyword arguments;
        `dont_filter` lets it through REQUEST_FILTER_ENABLE's filter. `options`: any option of the groups by
        its own keyword (over the group's value), and requests.Session.request's files, cert and hooks;
        any other keyword is a TypeError naming it."""
        self.url = url
        self.callback = callback
        self.errback = errback
        self.cb_kwargs = {} if cb_kwargs is None else cb_kwargs
        self.method = method.upper()
        self.meta = {} if meta is None else meta
        self.dont_filter = dont_filter
        self.fetch = FetchOptions() if fetch is None else fetch
        self.retry = RetryOptions() if retry is None else retry
        self.revalidation = RevalidateOptions() if revalidation is None else revalidation
        rendered = {name: options.pop(name) for name in list(options) if GROUP_OF_KEYWORD.get(name) == "rendering"}
        self.rendering = (dataclasses.replace(rendering or RenderOptions(), **rendered) if rendered
                          else rendering or RenderOptions())     # (replace: the options are checked together)
        for name, value in options.items():
            if name in GROUP_OF_KEYWORD:
                setattr(getattr(self, GROUP_OF_KEYWORD[name]), name, value)
            elif name in REQUESTS_ONLY_KEYWORDS:
                self.fetch.extra[name] = value
            else:
                raise TypeError(_unknown_keyword(name))

    @property
    def kwargs(self) -> dict[str, Any]:
        """What goes on to requests.Session.request besides batchd's own options (files, cert...)."""
        return self.fetch.extra

    def replace(self, **changes: Any) -> Request:
        """A copy of this request with `changes` (any argument of Request, or any option by its keyword).
        Its meta, cb_kwargs and option groups are copies too: changing them leaves this request's alone."""
        groups = {name: dataclasses.replace(getattr(self, name)) for name in GROUPS}
        groups["fetch"].extra = dict(self.fetch.extra)
        arguments: dict[str, Any] = {"url": self.url, "callback": self.callback, "method": self.method,
                                     "errback": self.errback, "cb_kwargs": dict(self.cb_kwargs),
                                     "meta": dict(self.meta), "dont_filter": self.dont_filter, **groups}
        arguments.update(changes)
        return Request(**arguments)

    def fingerprint(self) -> str:
        """A sha1 hex digest that is equal for requests that would fetch the same thing."""
        digest = hashlib.sha1()
        for part in (self.method.encode(), self._canonical_url().encode(), self._body_key()):
            digest.update(part)
            digest.update(b"\0")  # so that moving bytes between parts changes the digest
        return digest.hexdigest()

    def _canonical_url(self) -> str:
        """The URL with `params` merged into its query, made canonical by w3lib (query sorted, percent-
        encoding normalised, host lower-cased, fragment dropped), and without its scheme's default port."""
        parts = urlsplit(self.url.strip())
        query = "&".join(part for part in (parts.query, urlencode(_pairs(self.params))) if part)
        return canonicalize_url(urlunsplit(_without_default_port(parts._replace(query=query))))

    def _body_key(self) -> bytes:
        if self.json is not None:
            return jsonlib.dumps(self.json, sort_keys=True, separators=(",", ":")).encode()
        if isinstance(self.data, bytes):
            return self.data
        if isinstance(self.data, str):
            return self.data.encode()
        if isinstance(self.data, (Mapping, list, tuple)):
            return urlencode(sorted(_pairs(self.data))).encode()
        return b""  # no body, or a stream that reading here would consume

    def __repr__(self) -> str:
        return f"<Request {self.method} {self.url}>"


def _unknown_keyword(name: str) -> str:
    known = [*GROUP_OF_KEYWORD, *REQUESTS_ONLY_KEYWORDS]
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else "Request's keywords: " + ", ".join(known)
    return f"Request: unknown keyword {name!r}; {hint}"


# Where an element keeps the URL response.follow() takes from it.
URL_ATTRIBUTES = {"a": "href", "area": "href", "link": "href", "img": "src", "iframe": "src", "frame": "src",
                  "script": "src", "source": "src", "embed": "src", "audio": "src", "video": "src"}


def _without_default_port(parts: SplitResult) -> SplitResult:
    """http://host:80/ and http://host/ are one resource (canonicalize_url keeps the port as written)."""
    port = DEFAULT_PORTS.get(parts.scheme.lower())
    if port is None or not parts.netloc.endswith(port):
        return parts
    return parts._replace(netloc=parts.netloc[:-len(port)])


def _pairs(fields: Optional[Fields]) -> list[tuple[str, str]]:
    """(key, value) string pairs from what requests accepts as params or form data."""
    if fields is None:
        return []
    if isinstance(fields, (str, bytes)):
        text = fields.decode() if isinstance(fields, bytes) else fields
        return parse_qsl(text, keep_blank_values=True)
    items = fields.items() if isinstance(fields, Mapping) else fields
    pairs: list[tuple[str, str]] = []
    for key, value in items:
        values = value if isinstance(value, (list, tuple)) else [value]
        pairs.extend((str(key), str(v)) for v in values if v is not None)
    return pairs


class Response:
    """A downloaded page, with the decoded text and a parsel selector made on demand.

    They are kept in plain attributes, not functools.cached_property: in Python 3.11 that holds one
    lock per property shared by every instance, so a worker's threads would parse one page at a time.
    A Response is read by the thread that downloaded it; nothing here needs a lock."""

    def __init__(self, raw: requests.Response, request: Request, content: bytes,
                 hop: bool = False) -> None:
        """`hop`: one of the redirects on the way to another response (no history of its own)."""
        self.status_code: int = raw.status_code
        self.url: str = raw.url
        self.headers: CaseInsensitiveDict[str] = raw.headers
        self.content = content  # decoded, read by the Downloader within its limits
        self.request = request
        self.meta = request.meta
        # The headers the last hop was sent with (a conditional request's If-None-Match among them).
        sent = getattr(raw, "request", None)
        self.sent_headers: Mapping[str, Any] = sent.headers if sent is not None else {}
        self.elapsed = 0.0      # seconds from sending the request to the end of its body (the downloader's)
        self.rendered = False   # its body is a browser's DOM (render=True, or render="auto" on a rendered host)
        self.replayed = False   # it comes from an archive, not the network (`batchd reparse`)
        # Each hop (requests' response) with its body as it came, content-coded: kept for ARCHIVE (None: not kept).
        self.as_received: Optional[list[tuple[Any, bytes]]] = None
        # The redirects followed to get here, oldest first (their status, URL and headers; no body). Not each
        # hop's own history: requests 2.28's hops list one another, round and round.
        self.history: list[Response] = [] if hop else [Response(one, request, b"", hop=True) for one in raw.history]
        self._encoding: Optional[str] = None
        self._text: Optional[str] = None
        self._selector: Optional[parsel.Selector] = None
        self._base_url: Optional[str] = None

    @property
    def encoding(self) -> str:
        """The codec the body is read with: found with the text, the body decoded once."""
        return self._encoding if self._encoding is not None else self._decode()[0]

    @encoding.setter
    def encoding(self, codec: str) -> None:
        """The codec to read the body with, as the spider knows it better (the text is decoded again)."""
        if not _decodes_text(codec):  # fails here, where the spider set it, not at its next .text
            raise LookupError(f"Response.encoding: {codec!r} is not a text codec")
        self._encoding, self._text, self._selector = codec, None, None

    @property
    def text(self) -> str:
        """The body decoded (see the module's docstring), without a byte-order mark."""
        return self._text if self._text is not None else self._decode()[1]

    def _decode(self) -> tuple[str, str]:
        """The (codec, text): with the codec the spider set, else with the one the body declares or looks like."""
        if self._encoding is None:
            self._encoding, self._text = _decoded_body(self.headers.get("Content-Type", ""), self.content)
        else:
            text = to_unicode(self.content, self._encoding)
            self._text = text[1:] if text.startswith("\ufeff") else text
        return self._encoding, self._text

    def json(self, **kwargs: Any) -> Any:
        return jsonlib.loads(self.text, **kwargs)

    @property
    def selector(self) -> parsel.Selector:
        if self._selector is None:
            content_type = self.headers.get("Content-Type", "").lower()
            # None lets parsel pick (HTML, or JSON on parsel versions that know it).
            kind = "xml" if "xml" in content_type and "html" not in content_type else None
            self._selector = parsel.Selector(text=self.text, type=kind, base_url=self.url)
        return self._selector

    def css(self, query: str) -> parsel.SelectorList[parsel.Selector]:
        return self.selector.css(query)

    def xpath(self, query: str, **kwargs: Any) -> parsel.SelectorList[parsel.Selector]:
        return self.selector.xpath(query, **kwargs)

    def re(self, regex: Regex) -> list[str]:
        return self.selector.re(regex)

    @overload
    def re_first(self, regex: Regex, default: None = None) -> Optional[str]: ...

    @overload
    def re_first(self, regex: Regex, default: str) -> str: ...

    def re_first(self, regex: Regex, default: Optional[str] = None) -> Optional[str]:
        return self.selector.re_first(regex, default=default)

    # -- links
    @property
    def base_url(self) -> str:
        """What relative links resolve against: the page's <base href> if it has one, else its URL."""
        if self._base_url is None:
            self._base_url = get_base_url(self.text, self.url) if self._is_html() else self.url
        return self._base_url

    def urljoin(self, url: str) -> str:
        """`url` made absolute against the page (its <base href>, else its URL)."""
        return urljoin(self.base_url, url.strip())

    def follow(self, url: Union[str, parsel.Selector], callback: Union[Callback, str, None] = None,
               **request_kwargs: Any) -> Request:
        """A Request for a link of this page: a URL (relative ones resolved against the page), or a
        selector of an element (<a>, <link>, <img>...: its href or src) or of an attribute
        (`a::attr(href)`). `request_kwargs` are any other argument of Request."""
        return Request(self.urljoin(_url_of(url)), callback=callback, **request_kwargs)

    def follow_all(self, urls: Optional[Iterable[Union[str, parsel.Selector]]] = None,
                   callback: Union[Callback, str, None] = None, *, css: Optional[str] = None,
                   xpath: Optional[str] = None, **request_kwargs: Any) -> list[Request]:
        """Requests for several links: `urls` (URLs or selectors), or what `css` or `xpath` selects on
        this page (elements or attributes). An element without its URL attribute is skipped."""
        if sum(given is not None for given in (urls, css, xpath)) != 1:
            raise ValueError("follow_all takes exactly one of urls, css and xpath")
        if urls is None:
            urls = self.css(css) if css is not None else self.xpath(xpath or "")
        found = [url for url in urls if not _lacks_url(url)]
        return [self.follow(url, callback, **request_kwargs) for url in found]

    def _is_html(self) -> bool:
        content_type = self.headers.get("Content-Type", "").lower()
        return not content_type or "html" in content_type

    def __repr__(self) -> str:
        return f"<Response {self.status_code} {self.url}>"


def _url_of(link: Union[str, parsel.Selector]) -> str:
    if isinstance(link, str):
        return link
    if isinstance(link, parsel.SelectorList):
        raise TypeError("follow takes one link; for a list of selectors use follow_all")
    if not isinstance(link, parsel.Selector):
        raise TypeError(f"follow takes a URL or a selector, not a {type(link).__name__}")
    if isinstance(link.root, str):             # an attribute or a text node: its value is the URL
        return link.root
    tag, attribute, url = _element_link(link.root)
    if attribute is None:
        raise ValueError(f"follow: a <{tag}> element holds no link; select an <a>, <link>, <img>... "
                         "or an attribute (a::attr(href))")
    if url is None:
        raise ValueError(f"follow: this <{tag}> element has no {attribute} attribute")
    return url


def _lacks_url(link: Union[str, parsel.Selector]) -> bool:
    """An element selected by follow_all's css or xpath that holds no URL (an <a> without href)."""
    if not isinstance(link, parsel.Selector) or isinstance(link.root, str):
        return False
    return _element_link(link.root)[2] is None


def _element_link(element: Any) -> tuple[Any, Optional[str], Optional[str]]:
    """(tag, the attribute that holds its URL, the URL) of an lxml element; None where it has none."""
    tag = getattr(element, "tag", None)
    attribute = URL_ATTRIBUTES.get(tag) if isinstance(tag, str) else None
    return tag, attribute, (element.get(attribute) if attribute else None)


def _decoded_body(content_type: str, content: bytes) -> tuple[str, str]:
    """(codec, text) of a body: declared, then guessed (see the module's docstring)."""
    try:
        return html_to_unicode(_charset_parameter(content_type), content, default_encoding="utf-8",
                               auto_detect_fun=_guessed_codec)
    except (LookupError, UnicodeError):  # the page declares a codec of no text (<meta charset="base64">)
        codec = _guessed_codec(content) or "utf-8"
        return codec, to_unicode(content, codec)


def _charset_parameter(content_type: str) -> Optional[str]:
    """The header's charset as every w3lib version reads it (`charset=codec`), if it names a text codec."""
    found = HEADER_CHARSET.search(content_type)
    codec = _text_codec(found.group(1)) if found else None
    return None if codec is None else "charset=" + codec


def _guessed_codec(content: bytes) -> Optional[str]:
    """The codec of an undeclared body: UTF-8 if it strictly is, else the detector's guess, if any."""
    if _is_utf8(content):
        return "utf-8"  # detectors misjudge short UTF-8 pages; strict validity is a surer sign
    if chardet is None:
        return None
    return _text_codec(chardet.detect(content[:DETECT_BYTES]).get("encoding"))


@lru_cache(maxsize=256)
def _text_codec(label: Optional[str]) -> Optional[str]:
    """What browsers decode a charset label as, or None for unknown and non-text codecs."""
    name = resolve_encoding(label) if label else None
    return name if name is not None and _decodes_text(name) else None


def _decodes_text(codec: str) -> bool:
    """False for unknown codecs and those of no text (base64, zlib, idna, undefined...)."""
    try:
        b"\0".decode(codec, "replace")  # the empty bytes would pass them all
    except (LookupError, UnicodeError):
        return False
    return True


def _is_utf8(content: bytes) -> bool:
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class RequestFailed(Exception):
    """A request that will not succeed: retries exhausted, or an error not worth retrying."""

    def __init__(self, request: Request, response_or_exception: Union[Response, Exception], reason: str,
                 attempts: int) -> None:
        super().__init__(request, response_or_exception, reason, attempts)  # so copy/pickle can rebuild it
        self.request = request
        self.response_or_exception = response_or_exception
        self.reason = reason
        self.attempts = attempts

    def __str__(self) -> str:
        return self.reason
