"""One WebDriver session shared by the threads whose pages are open in its browser, one tab each.

chromedriver runs a session's commands one at a time, on the window it was last switched to. So every command
of the session (Selenium's, the hook's, an element's: all go through `WebDriver.execute`) is sent under one
lock, after switching to the calling thread's tab when the session is on another. Commands are short (a
script that looks, a CDP call): a page's load goes on in the browser while other tabs' commands are sent, and
its thread waits outside the lock. A hook's long command (an async script) holds the others up while it runs.
Only hooks send WebDriver commands (render/chromium.py drives its pages over the DevTools connection), and only
to a page that has loaded: chromedriver would hold a command to a tab still waiting for its answer.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Optional

SWITCH = "switchToWindow"       # Selenium's Command name, the same since 4.0


class SharedSession:
    """`driver`'s commands, sent under `lock` in the calling thread's tab (`on(tab)`)."""

    def __init__(self, driver: Any):
        self.driver, self.lock = driver, threading.RLock()
        self._local = threading.local()
        self._send = driver.execute
        self.window: Optional[str] = driver.current_window_handle     # the window the session is on
        driver.execute = self._execute

    @contextmanager
    def on(self, tab: str):
        """This thread's commands go to the window (target) `tab` until the block ends."""
        before = getattr(self._local, "tab", None)
        self._local.tab = tab
        try:
            yield
        finally:
            self._local.tab = before

    def forget(self, tab: str) -> None:
        """`tab` is closed: the next command of any tab switches first."""
        with self.lock:
            if self.window == tab:
                self.window = None

    def _execute(self, command: str, params: Optional[dict] = None) -> Any:
        tab = getattr(self._local, "tab", None)
        with self.lock:
            if command == SWITCH:       # (a hook's own switch: the session is then where it said)
                self.window = (params or {}).get("handle")
            elif tab is not None and tab != self.window:
                self._send(SWITCH, {"handle": tab})
                self.window = tab
            return self._send(command, params)
