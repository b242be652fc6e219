"""A connection to a Chromium's own DevTools endpoint: the browser's commands, and its tabs' (one session each).

chromedriver will not do for pages that load side by side in one browser: a page may not open a browser context
or a tab ("Not allowed": those are the browser's commands), chromedriver holds any command to a tab whose
navigation has had no answer yet, and it gathers a tab's events (its performance log) only while the session is
on that tab. So each browser also has this one connection, to the endpoint chromedriver started it with (its
`debuggerAddress`), spoken over a plain socket with wsproto (which Selenium itself depends on, pip's and
Debian's alike). A tab is attached to it as a session of its own (`attach`, flattened: a command names its
session), and the tabs' events (`on_event`) are read on the way to each command's answer.

One command at a time, under the connection's lock: each is short (a look at a page, a cookie call), and a
command that outlasts its `bound` gives up waiting (its late answer is dropped when it comes).
"""
from __future__ import annotations

import itertools
import json
import select
import socket
import threading
import urllib.request
from typing import Any, Callable, Optional
from urllib.parse import urlsplit

from .renderer import BrowserError

ANSWER_BOUND = 30.0     # seconds the browser may take to answer (opening a tab on a loaded machine)
READ_SIZE = 65536


class CallTimeout(BrowserError):
    """A command's answer did not come in its time (the browser may be well: a page was busy)."""


class BrowserEndpoint:
    """The browser's DevTools endpoint at `address` ("host:port", as chromedriver reports it)."""

    def __init__(self, address: str):
        from wsproto import ConnectionType, WSConnection
        from wsproto.events import Request as Upgrade

        try:
            # (the opener with no proxy: the browser's loopback endpoint is never reached through HTTP_PROXY)
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with opener.open(f"http://{address}/json/version", timeout=ANSWER_BOUND) as answer:
                url = urlsplit(json.load(answer)["webSocketDebuggerUrl"])
            self.socket = socket.create_connection((url.hostname, url.port), timeout=ANSWER_BOUND)
        except (OSError, ValueError, KeyError) as exc:
            raise BrowserError(f"render: the browser's DevTools endpoint ({address}) did not answer: {exc}") from exc
        self.connection = WSConnection(ConnectionType.CLIENT)
        self.numbers = itertools.count(1)
        self.lock = threading.Lock()
        self.on_event: Callable[[dict], None] = lambda event: None
        self._text = ""                 # a message read in part
        self._send(Upgrade(host=url.netloc, target=url.path))
        self._read_until_upgraded()

    def call(self, method: str, params: Optional[dict] = None, session: Optional[str] = None,
             bound: float = ANSWER_BOUND) -> Any:
        """The answer to `method` (sent to the tab of `session`, or to the browser); BrowserError if it was
        refused or the browser is gone, CallTimeout if no answer came in `bound` seconds."""
        with self.lock:
            number = self._command(method, params, session)
            self.socket.settimeout(bound)
            answer = None
            while answer is None:
                for message in self._read_messages():
                    if "id" not in message:
                        self.on_event(message)
                    elif message["id"] == number:
                        answer = message
        if "error" in answer:
            raise BrowserError(f"render: {method} failed: {answer['error'].get('message')}")
        return answer.get("result", {})

    def pump(self) -> None:
        """The events that have come, handed to `on_event`, without waiting for more."""
        with self.lock:
            while select.select([self.socket], [], [], 0)[0]:
                for message in self._read_messages():
                    if "id" not in message:
                        self.on_event(message)

    def send(self, method: str, params: Optional[dict] = None, session: Optional[str] = None) -> None:
        """`method` sent, its answer not awaited (dropped when it comes): Page.navigate answers only once the
        server has, and the other tabs' commands would wait for it."""
        with self.lock:
            self._command(method, params, session)

    def _command(self, method: str, params: Optional[dict], session: Optional[str]) -> int:
        from wsproto.events import Message

        command: dict = {"id": next(self.numbers), "method": method, "params": params or {}}
        if session is not None:
            command["sessionId"] = session
        self._send(Message(data=json.dumps(command)))
        return command["id"]

    def attach(self, target: str) -> str:
        """A session of this connection on the tab `target`."""
        return self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

    def wait_for_news(self, seconds: float) -> None:
        """Until something comes on the connection (or `seconds` pass): a page waiting for its events wakes as
        they come, not at its next look."""
        try:
            select.select([self.socket], [], [], seconds)
        except (OSError, ValueError):
            return          # closed: the caller's next look finds the browser gone

    def alive(self) -> bool:
        """Whether the browser is still there: its end closes this connection. A look without waiting, as
        chromedriver goes on answering for a browser that is gone; while a command is under way, its own read
        will find the end."""
        if not self.lock.acquire(blocking=False):
            return True
        try:
            if not select.select([self.socket], [], [], 0)[0]:
                return True     # nothing to read: open
            return self.socket.recv(1, socket.MSG_PEEK) != b""
        except (OSError, ValueError):       # (ValueError: the socket is closed, the browser quit)
            return False
        finally:
            self.lock.release()

    def close(self) -> None:
        self.socket.close()

    def _send(self, event: Any) -> None:
        try:
            self.socket.sendall(self.connection.send(event))
        except OSError as exc:
            raise BrowserError(f"render: the browser's DevTools endpoint is gone: {exc}") from exc

    def _events(self) -> list:
        try:
            data = self.socket.recv(READ_SIZE)
        except socket.timeout:
            raise CallTimeout("render: the browser did not answer in time") from None
        except OSError as exc:
            raise BrowserError(f"render: the browser's DevTools endpoint is gone: {exc}") from exc
        if not data:
            raise BrowserError("render: the browser's DevTools endpoint closed")
        self.connection.receive_data(data)
        return list(self.connection.events())

    def _read_until_upgraded(self) -> None:
        from wsproto.events import AcceptConnection, RejectConnection

        while True:
            for event in self._events():
                if isinstance(event, AcceptConnection):
                    return
                if isinstance(event, RejectConnection):
                    raise BrowserError("render: the browser's DevTools endpoint refused the connection")

    def _read_messages(self) -> list:
        """The whole messages one read completes (a long one comes in parts), the browser's pings answered."""
        from wsproto.events import CloseConnection, Ping, TextMessage

        messages = []
        for event in self._events():
            if isinstance(event, Ping):
                self._send(event.response())
            elif isinstance(event, CloseConnection):
                raise BrowserError("render: the browser closed its DevTools endpoint")
            elif isinstance(event, TextMessage):
                self._text += event.data
                if event.message_finished:
                    messages.append(json.loads(self._text))
                    self._text = ""
        return messages
