"""Requests and responses: what a spider builds and what its callbacks receive.

`Response.text` never trusts requests' ISO-8859-1 default for undeclared text:
it looks, in order, at the Content-Type charset, a byte-order mark, a
<meta> charset in the first 4 KB, strict UTF-8, then statistical detection.
The downloader that turns one into the other is batchd/downloader.py.
"""
# Annotations stay unevaluated: requests 2.28 (Debian 12) has no subscriptable CaseInsensitiveDict.
from __future__ import annotations

import codecs
import hashlib
import json as jsonlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from http.cookiejar import CookieJar
from typing import IO, TYPE_CHECKING, Any, Optional, Union, overload
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

import parsel
from w3lib.html import get_base_url
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

META_SNIFF_BYTES = 4096
DETECT_BYTES = 64 * 1024  # detectors are slow on big pages and gain nothing past this
HEADER_CHARSET = re.compile(r"charset\s*=\s*[\"']?([^\"';,\s]+)", re.IGNORECASE)
META_CHARSET = re.compile(rb"<meta[^>]*?charset\s*=\s*[\"']?\s*([A-Za-z0-9_.:-]+)", re.IGNORECASE)
BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
# Pages labelled with these routinely contain bytes only the superset defines
# (browsers decode them the same way), so decoding strictly would garble them.
SUPERSETS = {"gb2312": "gb18030", "gbk": "gb18030", "ascii": "cp1252", "iso8859-1": "cp1252"}


class Request:
    """One HTTP request and what the spider wants done with its response."""

    def __init__(self, url: str, callback: Union[Callback, str, None] = None, method: str = "GET",
                 headers: Optional[Mapping[str, Union[str, bytes]]] = None, params: Optional[Fields] = None,
                 data: Union[Fields, IO[bytes], Iterable[bytes], None] = None, json: Any = None,
                 cookies: Union[Mapping[str, str], CookieJar, None] = None, meta: Optional[dict[str, Any]] = None,
                 timeout: Optional[Timeout] = None, allow_redirects: bool = True,
                 proxies: Optional[Mapping[str, str]] = None, verify: Union[bool, str, None] = None,
                 auth: Optional[Auth] = None, max_retry_times: Optional[int] = None, dont_filter: bool = False,
                 errback: Union[Errback, str, None] = None, cb_kwargs: Optional[dict[str, Any]] = None,
                 maxsize: Optional[int] = None, proxy: Optional[str] = None, **kwargs: Any) -> None:
        """`errback` is called instead of the spider's failed_request when this request fails for good
        (retries spent, or not retryable); `cb_kwargs` are passed to the callback as keyword arguments.
        `verify` (a CA bundle's path, or False) and `maxsize` (bytes) override TLS_VERIFY and
        DOWNLOAD_MAXSIZE for this request; `timeout` overrides REQUEST_TIMEOUT; `proxy` (a URL) is the
        proxy of this request alone, instead of PROXY or PROXY_POOL."""
        self.url = url
        self.callback = callback
        self.errback = errback
        self.cb_kwargs = {} if cb_kwargs is None else cb_kwargs
        self.method = method.upper()
        self.headers = headers
        self.params = params
        self.data = data
        self.json = json
        self.cookies = cookies
        self.meta = {} if meta is None else meta
        self.timeout = timeout
        self.allow_redirects = allow_redirects
        self.proxies = proxies
        self.verify = verify
        self.auth = auth
        self.max_retry_times = max_retry_times
        self.dont_filter = dont_filter
        self.maxsize = maxsize
        self.proxy = proxy
        self.kwargs = kwargs  # passed through to requests.Session.request (files, cert...)

    def replace(self, **changes: Any) -> Request:
        """A copy of this request with `changes` (any argument of Request). Its meta and cb_kwargs are
        copies too: changing them leaves this request's alone."""
        arguments = {name: getattr(self, name) for name in REQUEST_ARGUMENTS}
        arguments.update(meta=dict(self.meta), cb_kwargs=dict(self.cb_kwargs), **self.kwargs)
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
        scheme, netloc, path, query, _fragment = urlsplit(self.url.strip())
        pairs = parse_qsl(query, keep_blank_values=True) + _pairs(self.params)
        return urlunsplit((scheme.lower(), netloc.lower(), path or "/", urlencode(sorted(pairs)), ""))

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


REQUEST_ARGUMENTS = ("url", "callback", "method", "headers", "params", "data", "json", "cookies", "meta", "timeout",
                     "allow_redirects", "proxies", "verify", "auth", "max_retry_times", "dont_filter", "errback",
                     "cb_kwargs", "maxsize", "proxy")
# Where an element keeps the URL response.follow() takes from it.
URL_ATTRIBUTES = {"a": "href", "area": "href", "link": "href", "img": "src", "iframe": "src", "frame": "src",
                  "script": "src", "source": "src", "embed": "src", "audio": "src", "video": "src"}


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
        self.elapsed = 0.0      # seconds from sending the request to the end of its body (the downloader's)
        # The redirects followed to get here, oldest first (their status, URL and headers; no body). Not each
        # hop's own history: requests 2.28's hops list one another, round and round.
        self.history: list[Response] = [] if hop else [Response(one, request, b"", hop=True) for one in raw.history]
        self._encoding: Optional[str] = None
        self._text: Optional[str] = None
        self._selector: Optional[parsel.Selector] = None
        self._base_url: Optional[str] = None

    @property
    def encoding(self) -> str:
        if self._encoding is None:
            self._encoding = _choose_encoding(self.headers.get("Content-Type", ""), self.content)
        return self._encoding

    @encoding.setter
    def encoding(self, codec: str) -> None:
        """The codec to read the body with, as the spider knows it better (the text is decoded again)."""
        self._encoding, self._text, self._selector = codec, None, None

    @property
    def text(self) -> str:
        if self._text is None:
            text = self.content.decode(self.encoding, errors="replace")
            self._text = text[1:] if text.startswith("\ufeff") else text
        return self._text

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


def _choose_encoding(content_type: str, content: bytes) -> str:
    """The codec for a body: declared, then marked, then guessed; always a usable name."""
    for label in (_header_charset(content_type), _bom_charset(content), _meta_charset(content)):
        codec = _text_codec(label)
        if codec:
            return codec
    if _is_utf8(content):
        return "utf-8"  # detectors misjudge short UTF-8 pages; strict validity is a surer sign
    return _text_codec(_detected_charset(content)) or "utf-8"


def _header_charset(content_type: str) -> Optional[str]:
    found = HEADER_CHARSET.search(content_type)
    return found.group(1) if found else None


def _bom_charset(content: bytes) -> Optional[str]:
    return next((name for bom, name in BOMS if content.startswith(bom)), None)


def _meta_charset(content: bytes) -> Optional[str]:
    found = META_CHARSET.search(content[:META_SNIFF_BYTES])
    return found.group(1).decode("ascii") if found else None


def _detected_charset(content: bytes) -> Optional[str]:
    if chardet is None:
        return None
    return chardet.detect(content[:DETECT_BYTES]).get("encoding")


def _text_codec(label: Optional[str]) -> Optional[str]:
    """The Python codec for a charset label, or None for unknown and non-text codecs."""
    if not label:
        return None
    try:
        name = codecs.lookup(label).name
        b"".decode(name)  # rejects bytes-to-bytes codecs such as base64 or zlib
    except LookupError:
        return None
    return SUPERSETS.get(name, name)


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
