"""A response's body as the downloader reads it: in pieces, decompressed here (gzip, deflate) and
bounded by DOWNLOAD_MAXSIZE as it grows, so that a compression bomb fails with `ResponseTooLarge`
(not retried) once it has produced that many bytes, and within the attempt's deadline
(downloader.py's `_DeadlineWatch` cuts a download past it; the reader stops at the next piece)."""
import zlib

import requests
import urllib3.exceptions
from requests.exceptions import ChunkedEncodingError, ContentDecodingError, ReadTimeout, SSLError

BODY_PIECE = 64 * 1024         # bytes per read from the socket, and most bytes per decompression step
GZIP_WBITS = 16 + zlib.MAX_WBITS
ACCEPT_ENCODING = "gzip, deflate"  # what _decoded() decodes, within bounds; nothing else is asked for


class ResponseTooLarge(requests.RequestException):
    """The decoded body is larger than DOWNLOAD_MAXSIZE: not retried, it would be as large again."""



def hooks_with(reader, hooks):
    """The request's own hooks with `reader` first among the response hooks: it reads the body
    before another hook could (through .content, without limits)."""
    hooks = dict(hooks or {})
    theirs = hooks.get("response", [])
    hooks["response"] = [reader, *([theirs] if callable(theirs) else theirs)]
    return hooks


class BodyReader:
    """The response hook that reads each body of an attempt (redirects too), decoded, within
    DOWNLOAD_MAXSIZE and the attempt's deadline. `body` is the last one read: the final response's.
    `keep_received`: each body is also kept as it came, content-coded, in `received` with its response (the
    archive's, ARCHIVE)."""

    def __init__(self, download, maxsize, keep_received=False):
        self.download = download
        self.maxsize = maxsize
        self.body = b""
        self.received: list = []     # (requests' response, its body as it came), one per hop
        self.keep_received = keep_received

    def __call__(self, response, **_send_options):
        try:
            self.body = self._read(response)
        except BaseException:
            response.close()  # a half-read connection must not go back to the pool
            raise

    def _read(self, response):
        declared = response.raw.length_remaining  # urllib3's reading of Content-Length (0 for HEAD)
        if declared is not None and declared > self.maxsize:
            raise ResponseTooLarge(f"Content-Length {declared} exceeds DOWNLOAD_MAXSIZE ({self.maxsize} bytes)")
        pieces, size, chunks = [], 0, self._chunks(response.raw)
        if self.keep_received:
            as_it_came: list = []
            self.received.append((response, as_it_came))
            chunks = _kept(chunks, as_it_came)
        for piece in _decoded(chunks, response.headers.get("Content-Encoding", "")):
            size += len(piece)
            if size > self.maxsize:
                raise ResponseTooLarge(f"decoded body exceeds DOWNLOAD_MAXSIZE ({self.maxsize} bytes)")
            pieces.append(piece)
        if self.keep_received:
            self.received[-1] = (response, b"".join(as_it_came))
        return b"".join(pieces)

    def _chunks(self, raw):
        """The body as it came (content-coded), chunk by chunk."""
        while True:
            if self.download.expired:
                raise self.download.overdue()
            chunk = _read_chunk(raw)
            if not chunk:
                break
            yield chunk
        if raw.length_remaining:  # urllib3 1.26 leaves a short body unnoticed; 2.x raised already
            raise ChunkedEncodingError(f"connection closed {raw.length_remaining} bytes short of the Content-Length")


def _kept(chunks, into: list):
    """`chunks` as they pass, each appended to `into`."""
    for chunk in chunks:
        into.append(chunk)
        yield chunk


def _read_chunk(raw):
    """Up to BODY_PIECE bytes of the body, undecoded; urllib3's errors become requests' ones."""
    try:
        return raw.read(BODY_PIECE, decode_content=False)
    except urllib3.exceptions.ReadTimeoutError as exc:
        raise ReadTimeout(exc) from exc
    except urllib3.exceptions.SSLError as exc:
        raise SSLError(exc) from exc
    except urllib3.exceptions.HTTPError as exc:  # the connection broke mid-body
        raise ChunkedEncodingError(exc) from exc


def _decoded(chunks, content_encoding):
    """`chunks` with their content codings undone, in pieces of at most BODY_PIECE bytes, so that
    a compression bomb never grows in memory past what the caller keeps. A coding we did not ask
    for (ACCEPT_ENCODING) leaves the body as it came, as urllib3 does."""
    codings = [c for c in (part.strip().lower() for part in content_encoding.split(",")) if c not in ("", "identity")]
    if not all(coding in ("gzip", "x-gzip", "deflate") for coding in codings):
        return chunks
    for coding in reversed(codings):  # the last one listed was applied last
        chunks = _inflated(chunks, coding)
    return chunks


def _inflated(chunks, coding):
    """`chunks` decompressed, in pieces of at most BODY_PIECE bytes."""
    inflater = None
    try:
        for data in chunks:
            held_back = False
            while data or held_back:
                if inflater is None:
                    inflater = zlib.decompressobj(_wbits(coding, data))
                elif inflater.eof:
                    if coding == "deflate" or not data.startswith(b"\x1f\x8b"):
                        break  # bytes after the compressed stream: ignored, as browsers do
                    inflater = zlib.decompressobj(GZIP_WBITS)  # a gzip body may hold several members
                piece = inflater.decompress(data, BODY_PIECE)
                if piece:
                    yield piece
                held_back = len(piece) == BODY_PIECE and not inflater.eof  # output the bound kept in zlib
                data = inflater.unused_data if inflater.eof else inflater.unconsumed_tail
    except zlib.error as exc:
        raise ContentDecodingError(f"cannot decode the {coding} body: {exc}") from exc


def _wbits(coding, first_chunk):
    if coding != "deflate":
        return GZIP_WBITS
    # "deflate" means a zlib stream (RFC 9110), but some servers send raw deflate.
    zlib_header = len(first_chunk) >= 2 and first_chunk[0] & 0x0F == 8 and \
        int.from_bytes(first_chunk[:2], "big") % 31 == 0
    return zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS
