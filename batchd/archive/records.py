"""One fetch as WARC/1.1 records, each gzipped on its own (a member a reader can seek to), and the CDXJ line
that finds it again.

What a fetch becomes:
- a plain 2xx: a request record and a response record per hop (each redirect too), headers and body as they
  came (the body content-coded as sent, de-chunked: Transfer-Encoding is left out of the headers kept);
- a 304 of a conditional request: a request record and a revisit record (profile server-not-modified) naming
  the URL and the date of the response it stands for (WARC-Refers-To-Target-URI, WARC-Refers-To-Date: when
  that response was fetched whole, as the page's record keeps it);
- a rendered page: a conversion record holding the DOM (the browser's, as the callback read it), with the main
  document's status and headers in a WARC-Batchd-HTTP field (JSON): a browser hands over no raw body.
Fields of batchd's own, which the index is rebuilt from when a torn file is cut (files.py):
WARC-Batchd-Batch (the batch), WARC-Batchd-Method (the request's method), WARC-Batchd-Requested (the URL asked,
when redirects led elsewhere), WARC-Batchd-Sample ("plain": the plain half of a render="auto" sample).

The records are written here, not with warcio's writer: a worker writes one or two for every page it fetches,
and building them through warcio's generic record objects cost a worker more than the page's parse (warcio
reads them back, checks and indexes them: replay.py, files.py, the tests). Digests are SHA-1 in base 16.
"""
import datetime
import hashlib
import json
import struct
import uuid
import zlib
from typing import Any, Iterable, Mapping, Optional
from urllib.parse import urlsplit

WARC_VERSION = b"WARC/1.1\r\n"
HEADERS_LEVEL = 6               # a record's headers: zlib's default (a few hundred bytes: little work)
STORED = 0                      # a body that came compressed is not compressed again (stored deflate blocks)
CODED = ("gzip", "x-gzip", "deflate", "br", "zstd", "compress")
GZIP_MEMBER = 16 + zlib.MAX_WBITS
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"   # deflate, no name, no time, OS unknown (RFC 1952)
NOT_MODIFIED_PROFILE = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
DOM_TYPE = "text/html; charset=utf-8"
HTTP_RESPONSE, HTTP_REQUEST = "application/http; msgtype=response", "application/http; msgtype=request"
HOP_HEADERS_LEFT_OUT = ("transfer-encoding",)   # the body is kept de-chunked
BATCH, METHOD, REQUESTED, SAMPLE, HTTP = ("WARC-Batchd-Batch", "WARC-Batchd-Method", "WARC-Batchd-Requested",
                                          "WARC-Batchd-Sample", "WARC-Batchd-HTTP")
INDEXED_TYPES = ("response", "revisit", "conversion")
EPOCH = datetime.datetime(1970, 1, 1)


def warc_date(epoch: float) -> str:
    """WARC/1.1's date, to the microsecond (a revisit names its response by URL and date)."""
    return (EPOCH + datetime.timedelta(seconds=epoch)).isoformat(timespec="microseconds") + "Z"


def fetch_records(response: Any, batch_id: int, when: float, refers_to: Optional[float], sample: bool,
                  level: int = 1) -> list:
    """The gzipped records of one fetch, and their index entries: [(member bytes, entry or None)].
    `response`: batchd's Response (its as_received: each hop, requests' response, with its body as it came;
    rendered: the DOM); `refers_to`: for a 304, when the page it revisits was fetched whole (None: not known);
    `level`: zlib's level for a body that came uncompressed (ARCHIVE_GZIP_LEVEL; a compressed one is stored as it
    is, its headers with it: deflating it again costs a worker about as much as the page's parse and saves
    nothing)."""
    date = warc_date(when)
    own = {BATCH: str(batch_id), METHOD: response.request.method}
    if sample:
        own[SAMPLE] = "plain"
    if getattr(response, "rendered", False):
        return [_member(_conversion(response, date, own), level)]
    hops = response.as_received or []
    members = []
    for n, (hop, body) in enumerate(hops):
        if hop.url != response.request.url:
            own = {**own, REQUESTED: response.request.url}
        request, answer = _exchange(hop, body, date, own, refers_to if n == len(hops) - 1 else None)
        members += [_member(request, HEADERS_LEVEL),
                    _member(answer, STORED if _content_coded(hop) else level)]
    return members


class Record:
    """One WARC record: its type, its named fields (WARC-Type, -Date, -Record-ID... are among them), and its block
    (an HTTP message's head, then its payload)."""

    __slots__ = ("fields", "head", "payload", "status", "mime")

    def __init__(self, fields: dict, content_type: str, head: bytes = b"", payload: bytes = b"",
                 status: Optional[int] = None, mime: str = ""):
        """`status` and `mime`: of the HTTP message the block holds, for the index."""
        self.head, self.payload, self.status, self.mime = head, payload, status, mime
        block = hashlib.sha1(head)
        block.update(payload)
        if head and payload:
            fields["WARC-Payload-Digest"] = "sha1:" + hashlib.sha1(payload).hexdigest()
        fields.update({"WARC-Block-Digest": "sha1:" + block.hexdigest(), "Content-Type": content_type,
                       "Content-Length": str(len(head) + len(payload))})
        self.fields = fields

    def parts(self) -> tuple:
        """(the record up to its payload, the payload and the record's end)."""
        named = "".join(f"{name}: {value}\r\n" for name, value in self.fields.items()).encode("utf-8")
        return b"".join((WARC_VERSION, named, b"\r\n", self.head)), self.payload + b"\r\n\r\n"


def _exchange(hop: Any, body: bytes, date: str, own: dict, refers_to: Optional[float]) -> tuple:
    """The request record and the response (or revisit) record of one hop of a plain fetch."""
    answer_id = _record_id()
    fields = {"WARC-Type": "response", "WARC-Record-ID": answer_id, "WARC-Date": date, "WARC-Target-URI": hop.url}
    head, content_type = _response_head(hop), (hop.headers.get("Content-Type") or "").split(";")[0].strip()
    if hop.status_code == 304:
        fields.update({"WARC-Type": "revisit", "WARC-Profile": NOT_MODIFIED_PROFILE,
                       "WARC-Refers-To-Target-URI": hop.url})
        if refers_to is not None:
            fields["WARC-Refers-To-Date"] = warc_date(refers_to)
        answer = Record({**fields, **own}, HTTP_RESPONSE, head, b"", 304, "warc/revisit")
    else:
        answer = Record({**fields, **own}, HTTP_RESPONSE, head, body, hop.status_code, content_type)
    sent = hop.request
    request = Record({"WARC-Type": "request", "WARC-Record-ID": _record_id(), "WARC-Date": date,
                      "WARC-Target-URI": sent.url, "WARC-Concurrent-To": answer_id},
                     HTTP_REQUEST, _request_head(sent), _request_body(sent))
    return request, answer


def _conversion(response: Any, date: str, own: dict) -> Record:
    """The DOM of a rendered page, with its main document's status and headers."""
    http = json.dumps([response.status_code, [[name, value] for name, value in response.headers.items()]])
    fields = {"WARC-Type": "conversion", "WARC-Record-ID": _record_id(), "WARC-Date": date,
              "WARC-Target-URI": response.url, HTTP: http, **own}
    if response.url != response.request.url:
        fields[REQUESTED] = response.request.url
    return Record(fields, DOM_TYPE, b"", response.content, response.status_code, DOM_TYPE)


def warcinfo_member(filename: str, info: dict, when: float) -> bytes:
    """The first record of a file: what wrote it."""
    fields = "".join(f"{name}: {value}\r\n" for name, value in info.items()).encode("utf-8")
    record = Record({"WARC-Type": "warcinfo", "WARC-Record-ID": _record_id(), "WARC-Date": warc_date(when),
                     "WARC-Filename": filename}, "application/warc-fields", b"", fields)
    return _member(record, HEADERS_LEVEL)[0]


def _member(record: Record, level: int) -> tuple:
    """(the record as one gzip member, its index entry or None): its headers deflated at HEADERS_LEVEL, its payload
    at `level`. Two deflate runs make one stream: the first ends on a sync flush (byte-aligned, no final block),
    and the second's blocks follow it."""
    head, tail = record.parts()
    first, second = (zlib.compressobj(lvl, zlib.DEFLATED, -zlib.MAX_WBITS) for lvl in (HEADERS_LEVEL, level))
    deflated = first.compress(head) + first.flush(zlib.Z_SYNC_FLUSH) + second.compress(tail) + second.flush()
    trailer = struct.pack("<II", zlib.crc32(tail, zlib.crc32(head)), (len(head) + len(tail)) & 0xFFFFFFFF)
    return GZIP_HEADER + deflated + trailer, index_entry(record.fields, record.status, record.mime)


def index_entry(fields: Mapping[str, str], status: Optional[int], mime: str) -> Optional[dict]:
    """What the CDXJ line of a record says (offset, length and filename are the file's to add), or None for a
    record no lookup needs (warcinfo, request). `fields`: the record's named fields; `status` and `mime`: of
    its HTTP message, if it holds one."""
    kind = fields.get("WARC-Type")
    if kind not in INDEXED_TYPES:
        return None
    entry: dict = {"url": fields["WARC-Target-URI"], "date": fields["WARC-Date"],
                   "mime": "warc/revisit" if kind == "revisit" else mime, "status": status}
    if fields.get(METHOD, "GET") != "GET":
        entry["method"] = fields[METHOD]
    if kind == "conversion":
        entry.update(status=json.loads(fields[HTTP])[0], rendered=True)
    for field, key in (("WARC-Refers-To-Date", "refers_to_date"), ("WARC-Payload-Digest", "digest"),
                       (REQUESTED, "requested"), (SAMPLE, "sample")):
        if fields.get(field):
            entry[key] = fields[field]
    return entry


def cdxj_line(entry: dict, offset: int, length: int, filename: str) -> str:
    """`urlkey timestamp {json}`: the key a SURT-like form of the URL, the timestamp the 14 digits of WARC-Date."""
    stamp = "".join(c for c in entry["date"][:19] if c.isdigit())
    fields = {**entry, "offset": offset, "length": length, "filename": filename}
    return f"{url_key(entry['url'])} {stamp} {json.dumps(fields, separators=(',', ':'))}\n"


def url_key(url: str) -> str:
    """A SURT-like key: the host's labels reversed, then the path and query (`com,example)/a?b`)."""
    parts = urlsplit(url)
    host = ",".join(reversed((parts.hostname or "").split(".")))
    port = f":{parts.port}" if parts.port and parts.port not in (80, 443) else ""
    return f"{host}{port}){parts.path or '/'}{'?' + parts.query if parts.query else ''}".lower()


def _content_coded(hop: Any) -> bool:
    codings = (hop.headers.get("Content-Encoding") or "").lower()
    return any(coding.strip() in CODED for coding in codings.split(","))


def _response_head(hop: Any) -> bytes:
    """The status line and the headers of a requests.Response as they came (repeated names kept; http.client
    read them as ISO-8859-1, so they go back as the bytes they were)."""
    raw = getattr(hop, "raw", None)
    headers: Iterable = raw.headers.iteritems() if raw is not None and hasattr(raw.headers, "iteritems") \
        else hop.headers.items()
    version = "HTTP/1.0" if getattr(raw, "version", 11) == 10 else "HTTP/1.1"
    lines = [f"{version} {hop.status_code} {hop.reason or ''}".rstrip()]
    lines += [f"{name}: {value}" for name, value in headers if name.lower() not in HOP_HEADERS_LEFT_OUT]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("iso-8859-1", "replace")


def _request_head(sent: Any) -> bytes:
    parts = urlsplit(sent.url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = list(sent.headers.items())
    if not any(name.lower() == "host" for name, _ in headers):
        headers.insert(0, ("Host", parts.netloc))
    lines = [f"{sent.method} {target} HTTP/1.1"] + [f"{name}: {_text(value)}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("iso-8859-1", "replace")


def _text(value: Any) -> str:
    return value.decode("iso-8859-1") if isinstance(value, bytes) else str(value)


def _request_body(sent: Any) -> bytes:
    """The body sent (a streamed one, a file or a generator, is not kept: it was read as it went)."""
    body = sent.body
    if isinstance(body, str):
        return body.encode("utf-8")
    return body if isinstance(body, bytes) else b""


def _record_id() -> str:
    return f"<urn:uuid:{uuid.uuid4()}>"
