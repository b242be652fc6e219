"""The dashboard's HTTP server: small, bounded, and safe to leave running.

Bounds, so that a slow or huge client holds nothing up:
    MAX_CONNECTIONS   requests served at once, each on its own guarded thread; one more is answered 503 at
                      once, without a thread
    REQUEST_DEADLINE  seconds a request may take from its first byte to the end of its answer: a reaper
                      shuts the socket of one that takes longer (a client sending a byte a second)
    MAX_BODY          bytes of a POST body; more is refused (413) unread
http.server bounds the request line and each header to 64 KiB and a request to 100 headers. One request
per connection (HTTP/1.0): a connection never idles between requests.

Actions (POST) exist only when a token is set; each needs `Authorization: Bearer TOKEN`, compared in
constant time: none gets 401, a wrong one 403. Without a token they are 404, as any unknown path.

When it listens on a loopback address, a request whose Host is not a loopback name is refused (421): a web
page elsewhere cannot reach the dashboard through a name it rebinds to 127.0.0.1.
"""
import hmac
import http.server
import ipaddress
import json
import logging
import socket
import socketserver
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional
from urllib.parse import parse_qs, urlsplit

from ..errors import ConfigError
from ..service.threads import start_thread

log = logging.getLogger("batchd.web")

MAX_CONNECTIONS = 32
REQUEST_DEADLINE = 10.0
MAX_BODY = 4096
REAP_EVERY = 0.5
LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")
BUSY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 1\r\n"
        b"Content-Length: 21\r\n\r\ntoo many connections\n")
# Scripts and styles only from the dashboard itself, nothing inline, no frames: a crawled value that
# escaped escaping still could not run.
SECURITY_HEADERS = {"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                                                "img-src 'self'; connect-src 'self'; frame-ancestors 'none'; "
                                                "form-action 'none'; base-uri 'none'",
                    "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
                    "Cache-Control": "no-store"}


@dataclass
class Answer:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: Optional[dict] = None

    @classmethod
    def json(cls, data, status: int = 200, headers: Optional[dict] = None) -> "Answer":
        return cls(status, (json.dumps(data, default=str, indent=1) + "\n").encode(), headers=headers)

    @classmethod
    def error(cls, status: int, message: str, headers: Optional[dict] = None) -> "Answer":
        return cls.json({"error": message}, status, headers)


@dataclass
class Request:
    method: str
    path: str
    query: dict             # name -> its first value
    body: bytes
    header_given: bool      # an Authorization header came with it
    authorized: bool        # ... and holds the bearer token


def parse_listen(text: str) -> tuple:
    """ADDRESS:PORT (or [IPv6]:PORT) -> (address, port); a ConfigError names the culprit."""
    address, _, port = text.rpartition(":")
    address = address[1:-1] if address.startswith("[") and address.endswith("]") else address
    if not address or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--listen / WEB_LISTEN {text!r}: must be ADDRESS:PORT, e.g. 127.0.0.1:9380")
    return address, int(port)


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address in LOOPBACK_NAMES


class Deadlines:
    """The sockets being served and when each must be done; a guarded thread shuts those past it."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self._lock = threading.Lock()
        self._due: dict = {}           # socket -> monotonic deadline

    def watch(self, sock: socket.socket) -> None:
        sock.settimeout(self.seconds)
        with self._lock:
            self._due[sock] = time.monotonic() + self.seconds

    def forget(self, sock: socket.socket) -> None:
        with self._lock:
            self._due.pop(sock, None)

    def reap(self, stopped: threading.Event) -> None:
        while not stopped.wait(REAP_EVERY):
            now = time.monotonic()
            with self._lock:
                late = [sock for sock, due in self._due.items() if due <= now]
            for sock in late:
                try:
                    sock.shutdown(socket.SHUT_RDWR)      # its thread's read or write ends at once
                except OSError:
                    pass


class DashboardServer(socketserver.TCPServer):
    # Not http.server's HTTPServer: its bind looks the address's name up (a DNS wait for 0.0.0.0).
    allow_reuse_address = True

    def __init__(self, listen: str, route: Callable[[Request], Answer], token: Optional[str]):
        address, port = parse_listen(listen)
        self.address_family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.route, self.token, self.loopback = route, token, is_loopback(address)
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.deadlines = Deadlines(REQUEST_DEADLINE)
        self.stopped = threading.Event()
        try:
            super().__init__((address, port), Handler)
        except OSError as e:
            raise ConfigError(f"--listen / WEB_LISTEN {listen}: cannot listen there: {e.strerror or e}") from None
        start_thread(self.deadlines.reap, "batchd-web-reaper", self.stopped)

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), self.server_address[1]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(blocking=False):
            try:
                request.sendall(BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        self.deadlines.watch(request)
        start_thread(self._serve_one, "batchd-web-request", request, client_address)

    def _serve_one(self, request, client_address) -> None:
        try:
            self.finish_request(request, client_address)
        except OSError:
            pass              # the client went away, or was cut at its deadline
        except Exception as e:   # one request's fault is its own: log it in a line, serve the next
            log.error("batchd web: a request failed: %s: %s", type(e).__name__, e)
        finally:
            self.deadlines.forget(request)
            self.shutdown_request(request)
            self.slots.release()

    def server_close(self) -> None:
        self.stopped.set()
        super().server_close()

    def authorized(self, header: Optional[str]) -> bool:
        given = (header or "").partition(" ")
        return (self.token is not None and given[0].lower() == "bearer"
                and hmac.compare_digest(given[2].strip().encode(), self.token.encode()))


class Handler(http.server.BaseHTTPRequestHandler):
    server: DashboardServer
    server_version = "batchd-web"
    sys_version = ""

    def do_GET(self) -> None:
        self._answer("GET")

    def do_HEAD(self) -> None:
        self._answer("HEAD")

    def do_POST(self) -> None:
        self._answer("POST")

    def _answer(self, method: str) -> None:
        answer = self._refusal(method) or self._routed(method)
        self.send_response(answer.status)
        for name, value in {**SECURITY_HEADERS, "Content-Type": answer.content_type,
                            "Content-Length": str(len(answer.body)), **(answer.headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(answer.body)

    def _refusal(self, method: str) -> Optional[Answer]:
        if self.server.loopback and not is_loopback(_host_name(self.headers.get("Host", ""))):
            return Answer.error(421, "this dashboard answers to a loopback name only (localhost, 127.0.0.1)")
        if method == "POST":
            length = self.headers.get("Content-Length", "0")
            if not length.isdigit():
                return Answer.error(411, "a POST needs a Content-Length")
            if int(length) > MAX_BODY:
                return Answer.error(413, f"a POST body holds {MAX_BODY} bytes at most")
        return None

    def _routed(self, method: str) -> Answer:
        parts = urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0"))) if method == "POST" else b""
        query = {name: values[0] for name, values in parse_qs(parts.query).items()}
        given = self.headers.get("Authorization")
        request = Request("GET" if method == "HEAD" else method, parts.path, query, body, given is not None,
                          self.server.authorized(given))
        return self.server.route(request)

    def log_message(self, format, *args) -> None:
        pass      # a page refreshing every few seconds is no news for the journal


def _host_name(host: str) -> str:
    """The name of a Host header without its port: localhost:9380 -> localhost, [::1]:9380 -> ::1."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host
