"""Requests, responses and the downloader that turns one into the other.

`Downloader.fetch` owns the retry loop: network errors, timeouts, 5xx, 408 and
429 are retried with jittered exponential backoff (or the server's Retry-After);
anything else that is not a 2xx fails at once with `RequestFailed`.

`Response.text` never trusts requests' ISO-8859-1 default for undeclared text:
it looks, in order, at the Content-Type charset, a byte-order mark, a
<meta> charset in the first 4 KB, strict UTF-8, then statistical detection.
"""
import codecs
import hashlib
import json as jsonlib
import random
import re
import threading
import time
from collections.abc import Mapping
from datetime import timezone
from email.utils import parsedate_to_datetime
from functools import cached_property
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import parsel
import requests
from requests.adapters import HTTPAdapter
from requests.compat import chardet  # whichever detector requests uses; may be None
from requests.exceptions import InvalidSchema, InvalidURL, MissingSchema, SSLError

MALFORMED_URL_ERRORS = (MissingSchema, InvalidSchema, InvalidURL)
TRANSIENT_ERRORS = (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError)
RETRY_AFTER_STATUSES = frozenset({429, 503})

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

    def __init__(self, url, callback=None, method="GET", headers=None, params=None, data=None,
                 json=None, cookies=None, meta=None, timeout=None, allow_redirects=True,
                 proxies=None, verify=True, auth=None, max_retry_times=None, dont_filter=False,
                 **kwargs):
        self.url = url
        self.callback = callback
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
        self.kwargs = kwargs  # passed through to requests.Session.request (files, stream, cert...)

    def fingerprint(self):
        """A sha1 hex digest that is equal for requests that would fetch the same thing."""
        digest = hashlib.sha1()
        for part in (self.method.encode(), self._canonical_url().encode(), self._body_key()):
            digest.update(part)
            digest.update(b"\0")  # so that moving bytes between parts changes the digest
        return digest.hexdigest()

    def _canonical_url(self):
        scheme, netloc, path, query, _fragment = urlsplit(self.url.strip())
        pairs = parse_qsl(query, keep_blank_values=True) + _pairs(self.params)
        return urlunsplit((scheme.lower(), netloc.lower(), path or "/", urlencode(sorted(pairs)), ""))

    def _body_key(self):
        if self.json is not None:
            return jsonlib.dumps(self.json, sort_keys=True, separators=(",", ":")).encode()
        if isinstance(self.data, bytes):
            return self.data
        if isinstance(self.data, str):
            return self.data.encode()
        if isinstance(self.data, (Mapping, list, tuple)):
            return urlencode(sorted(_pairs(self.data))).encode()
        return b""  # no body, or a stream that reading here would consume

    def __repr__(self):
        return f"<Request {self.method} {self.url}>"


def _pairs(fields):
    """(key, value) string pairs from what requests accepts as params or form data."""
    if fields is None:
        return []
    if isinstance(fields, (str, bytes)):
        text = fields.decode() if isinstance(fields, bytes) else fields
        return parse_qsl(text, keep_blank_values=True)
    items = fields.items() if isinstance(fields, Mapping) else fields
    pairs = []
    for key, value in items:
        values = value if isinstance(value, (list, tuple)) else [value]
        pairs.extend((str(key), str(v)) for v in values if v is not None)
    return pairs


class Response:
    """A downloaded page, with the decoded text and a parsel selector made on demand."""

    def __init__(self, raw, request):
        self.status_code = raw.status_code
        self.url = raw.url
        self.headers = raw.headers
        self.content = raw.content
        self.request = request
        self.meta = request.meta

    @cached_property
    def encoding(self):
        return _choose_encoding(self.headers.get("Content-Type", ""), self.content)

    @cached_property
    def text(self):
        text = self.content.decode(self.encoding, errors="replace")
        return text[1:] if text.startswith("\ufeff") else text

    def json(self, **kwargs):
        return jsonlib.loads(self.text, **kwargs)

    @cached_property
    def selector(self):
        content_type = self.headers.get("Content-Type", "").lower()
        # None lets parsel pick (HTML, or JSON on parsel versions that know it).
        kind = "xml" if "xml" in content_type and "html" not in content_type else None
        return parsel.Selector(text=self.text, type=kind, base_url=self.url)

    def css(self, query):
        return self.selector.css(query)

    def xpath(self, query, **kwargs):
        return self.selector.xpath(query, **kwargs)

    def re(self, regex):
        return self.selector.re(regex)

    def re_first(self, regex, default=None):
        return self.selector.re_first(regex, default=default)

    def __repr__(self):
        return f"<Response {self.status_code} {self.url}>"


def _choose_encoding(content_type, content):
    """The codec for a body: declared, then marked, then guessed; always a usable name."""
    for label in (_header_charset(content_type), _bom_charset(content), _meta_charset(content)):
        codec = _text_codec(label)
        if codec:
            return codec
    if _is_utf8(content):
        return "utf-8"  # detectors misjudge short UTF-8 pages; strict validity is a surer sign
    return _text_codec(_detected_charset(content)) or "utf-8"


def _header_charset(content_type):
    found = HEADER_CHARSET.search(content_type)
    return found.group(1) if found else None


def _bom_charset(content):
    return next((name for bom, name in BOMS if content.startswith(bom)), None)


def _meta_charset(content):
    found = META_CHARSET.search(content[:META_SNIFF_BYTES])
    return found.group(1).decode("ascii") if found else None


def _detected_charset(content):
    if chardet is None:
        return None
    return chardet.detect(content[:DETECT_BYTES]).get("encoding")


def _text_codec(label):
    """The Python codec for a charset label, or None for unknown and non-text codecs."""
    if not label:
        return None
    try:
        name = codecs.lookup(label).name
        b"".decode(name)  # rejects bytes-to-bytes codecs such as base64 or zlib
    except LookupError:
        return None
    return SUPERSETS.get(name, name)


def _is_utf8(content):
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class RequestFailed(Exception):
    """A request that will not succeed: retries exhausted, or an error not worth retrying."""

    def __init__(self, request, response_or_exception, reason, attempts):
        super().__init__(request, response_or_exception, reason, attempts)  # so copy/pickle can rebuild it
        self.request = request
        self.response_or_exception = response_or_exception
        self.reason = reason
        self.attempts = attempts

    def __str__(self):
        return self.reason


def _sleep_without_stop(seconds):
    time.sleep(seconds)
    return False


class Downloader:
    """Fetches requests over one pooled requests.Session per thread, retrying what may heal."""

    def __init__(self, max_retry_times=3, timeout=30.0, pool_size=10, backoff_base=0.5,
                 backoff_max=30.0, headers=None, sleep=None):
        self.max_retry_times = max_retry_times
        self.timeout = timeout
        self.pool_size = pool_size
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.headers = dict(headers or {})
        self.sleep = sleep or _sleep_without_stop
        self._local = threading.local()
        self._sessions = []
        self._sessions_lock = threading.Lock()

    def fetch(self, request):
        """The 2xx Response for `request`, or RequestFailed."""
        retries = self.max_retry_times if request.max_retry_times is None else request.max_retry_times
        attempts = 0
        while True:
            attempts += 1
            outcome = self._attempt(request, attempts)
            if _succeeded(outcome):
                return outcome
            if attempts > retries:
                raise RequestFailed(request, outcome, _failure_reason(outcome, attempts), attempts)
            if self.sleep(self._wait_before_retry(outcome, attempts)):
                raise RequestFailed(request, outcome, "stopped", attempts)

    def _attempt(self, request, attempts):
        """A 2xx or retryable Response, or a transient exception; RequestFailed for the rest."""
        try:
            response = Response(self._send(request), request)
        except MALFORMED_URL_ERRORS as exc:
            raise RequestFailed(request, exc, f"invalid URL: {request.url!r} ({_one_line(exc)})", attempts) from exc
        except SSLError as exc:
            # A certificate that fails verification will fail the same way in a few seconds.
            raise RequestFailed(request, exc, _failure_reason(exc, attempts), attempts) from exc
        except TRANSIENT_ERRORS as exc:
            return exc
        except requests.RequestException as exc:  # too many redirects, bad header values...
            raise RequestFailed(request, exc, _failure_reason(exc, attempts), attempts) from exc
        if not (_succeeded(response) or _retryable_status(response.status_code)):
            raise RequestFailed(request, response, _failure_reason(response, attempts), attempts)
        return response

    def _send(self, request):
        session = self._session()
        # One session serves unrelated tasks in turn: cookies must not travel between them.
        session.cookies.clear()
        return session.request(
            request.method, request.url, params=request.params, data=request.data,
            json=request.json, headers=request.headers, cookies=request.cookies,
            timeout=self.timeout if request.timeout is None else request.timeout,
            allow_redirects=request.allow_redirects, proxies=request.proxies,
            verify=request.verify, auth=request.auth, **request.kwargs)

    def _wait_before_retry(self, outcome, attempts):
        if isinstance(outcome, Response) and outcome.status_code in RETRY_AFTER_STATUSES:
            asked = _retry_after_seconds(outcome.headers.get("Retry-After"))
            if asked is not None:
                return min(asked, self.backoff_max)
        return self._backoff(attempts)

    def _backoff(self, attempts):
        # Full jitter: spreads out workers that failed together. The exponent is capped
        # only so that a huge retry count cannot overflow the float.
        ceiling = min(self.backoff_max, self.backoff_base * 2 ** min(attempts - 1, 64))
        return random.uniform(0, ceiling)

    def _session(self):
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._new_session()
            self._local.session = session
            with self._sessions_lock:
                self._sessions.append(session)
        return session

    def _new_session(self):
        session = requests.Session()
        adapter = HTTPAdapter(pool_connections=self.pool_size, pool_maxsize=self.pool_size)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        session.headers["User-Agent"] = _user_agent()
        session.headers.update(self.headers)
        return session

    def close(self):
        """Close every session this downloader opened; a later fetch opens fresh ones."""
        with self._sessions_lock:
            sessions, self._sessions = self._sessions, []
            self._local = threading.local()
        for session in sessions:
            session.close()


def _succeeded(outcome):
    return isinstance(outcome, Response) and 200 <= outcome.status_code < 300


def _retryable_status(status):
    return 500 <= status < 600 or status in (408, 429)


def _retry_after_seconds(value):
    """Seconds asked for by a Retry-After header (delay or HTTP-date), or None if unreadable."""
    if not value:
        return None
    value = value.strip()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)  # HTTP-dates are always GMT
    return max(0.0, when.timestamp() - time.time())


def _failure_reason(outcome, attempts):
    after = f" after {attempts} attempts" if attempts > 1 else ""
    if isinstance(outcome, Response):
        return f"HTTP {outcome.status_code}{after}"
    return f"{type(outcome).__name__}{after}: {_one_line(outcome)}"


def _one_line(exc):
    return " ".join(str(exc).split())


def _user_agent():
    try:
        from batchd import __version__
    except ImportError:
        return "batchd"
    return f"batchd/{__version__}"
