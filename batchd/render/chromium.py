"""One browser: Debian's chromedriver and Chromium, driven through Selenium 4, with up to RENDER_CONCURRENCY
pages open in it at once, each in a tab of its own.

chromedriver starts the browser (and its parent-death chain: render/processes.py) and serves the hooks
(`page.driver`); the pages themselves are driven over the browser's own DevTools connection
(render/devtools.py), one CDP session a tab, because chromedriver cannot load pages side by side: it holds every
command to a tab whose navigation has had no answer yet, and gathers a tab's network events only while it is on
that tab. Each tab is a browser context of its own (Target.createBrowserContext), so the cookies of one task's
page are never seen by the other's; a tab serves page after page, its cookies cleared between two tasks. A hook's
commands go through the one WebDriver session, switched to its tab under a lock (render/session.py).

A page is loaded (Page.navigate), then looked at (LOOK, a short script) until it has loaded and `render_wait`
holds. It is done with by reading its DOM and quieting it in the same script (QUIET): marked, its loads stopped,
its timers cleared, its cookie writes ignored. The next page in the tab replaces it, and has loaded once the
document is neither the marked one nor a new tab's blank. (Sending the tab to about:blank instead cost a
navigation more a page: on 2 cores it held the rendered pages/s at 0.80 of the bare Playwright loop's, against
1.17 without it.)
So a waiting tab holds its last page, quiet, until its next; the tab's cookies are cleared before each page
after its first. A page whose URL differs from the last only by its fragment would be no new document: it goes
by about:blank. The main document's status, headers and redirects are its tab's Network events.

RENDER_BLOCK: images are switched off by type (Blink's imagesEnabled); CDP has no other switch by type short
of intercepting every request, so fonts, media and stylesheets are blocked by their URLs' extensions
(`BLOCKED_EXTENSIONS`): a font served from a URL without one still loads.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.cookiejar import CookieJar
from typing import Any, Callable, Mapping, Optional
from urllib.parse import urldefrag, urlsplit

from requests.cookies import create_cookie

from ..http import Request
from .devtools import BrowserEndpoint, CallTimeout
from .page import Page
from .pool import Count, RenderPool
from .processes import descendants, kill_tree, parent_death_wrapper, pss_bytes
from .renderer import BrowserError, Hop, RenderedPage, RenderTimeout
from .session import SharedSession
from .tools import BrowserTools, find_tools

BROWSER_ARGUMENTS = ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                     "--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
                     "--disable-sync", "--disable-extensions", "--mute-audio", "--window-size=1280,1024",
                     # Each window (a tab in a context of its own is one) preloads the omnibox's popups, WebUI
                     # renderers of 10 to 50 MB that no headless page uses.
                     "--disable-features=WebUIOmniboxPopup,OmniboxAimPopupWebUIContent,OmniboxFullPopupWebUIContent")
BLOCKED_EXTENSIONS = {
    "image": ("png", "jpg", "jpeg", "gif", "webp", "avif", "svg", "ico", "bmp"),
    "font": ("woff", "woff2", "ttf", "otf", "eot"),
    "media": ("mp4", "webm", "ogg", "ogv", "oga", "mp3", "wav", "m4a", "m4v", "mov", "flac", "aac"),
    "stylesheet": ("css",),
}
QUIT_BOUND = 10.0           # seconds a killed driver and browser are waited for, until none is alive
HOOK_BOUND = 30             # seconds a hook's WebDriver command may hold the session (a load, an async script)
SHORT_BOUND = 10.0          # seconds a look at a page outside its time may take (its liveness, its leaving)
LOOK_EVERY = 0.01           # seconds between two looks at a loading page (a look costs the browser well under 1 ms)
DONE = "batchd:done"        # the mark on a page done with (a window property no page of its own would use)
# A page done with, quieted where it is: marked, its loads stopped, its timers and animation frames cleared, its
# cookie writes ignored (the next page replaces it; until then it does nothing).
QUIET = """window[done] = true;
try {
  window.stop();
  for (let id = setTimeout(() => {}, 0); id > 0; id--) { clearTimeout(id); clearInterval(id); }
  window.requestAnimationFrame = () => 0;
  Object.defineProperty(document, "cookie", {get: () => "", set: () => {}});
} catch (e) {}"""
# A look at the page: null until the new document has loaded and `selector` (if any) is in it; then
# {dom, href} (the DOM and the document's URL, the page done with, when withDom), or {failed: true} on Chromium's
# error page.
LOOK = """(function (selector, withDom, done) {
if (window[done] || location.href === "about:blank" || document.readyState !== "complete") return null;
if (location.protocol === "chrome-error:") return {failed: true};
if (selector && !document.querySelector(selector)) return null;
if (!withDom) return {dom: null};
const dom = document.documentElement.outerHTML;
%s
return {dom, href: location.href};
})""" % QUIET
# The DOM and URL of a page done with (after its hook, or its seconds), quieted.
LEAVE = """(function (done) {
const dom = document.documentElement ? document.documentElement.outerHTML : "";
%s
return {dom, href: location.href};
})""" % QUIET
# The Network events a tab keeps for its page: the main document's (main_document reads them).
DOCUMENT_EVENTS = ("Network.requestWillBeSent", "Network.responseReceived", "Network.loadingFailed")
# What WebDriver says when the browser under a page is gone.
DEAD_BROWSER_WORDS = ("crash", "not reachable", "disconnected", "invalid session id", "no such window",
                      "session deleted", "target window already closed")


@dataclass(eq=False)
class Tab:
    """A tab of the browser, in a browser context of its own: its target (chromedriver's window handle), its
    context, its session on the DevTools connection, the headers its requests carry now, whether cookies may be
    left in it, whether its page is done with, whether a hook drove it, its page's URL and document events."""
    target: str
    context: str
    session: str
    headers: tuple = ({}, None)
    cookies_left: bool = False
    left: bool = True
    driven: bool = False        # a hook drove it through WebDriver
    url: str = "about:blank"
    events: list = field(default_factory=list)


class ChromiumBrowser:
    """A chromedriver and its Chromium, started with the tools, the types to block and a proxy (a URL, or None),
    rendering pages in tabs; `pages` counts what it rendered, and `broken` says it may not render again."""

    def __init__(self, tools: BrowserTools, block: tuple, proxy: Optional[str]):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        self.proxy, self.pages, self.broken = proxy, 0, False
        self.blocked = blocked_patterns(block)
        self.folder = tempfile.mkdtemp(prefix="batchd-browser-")
        options = webdriver.ChromeOptions()
        options.binary_location = parent_death_wrapper(tools.browser, self.folder, "chromium")
        for argument in browser_arguments(self.folder, block, proxy):
            options.add_argument(argument)
        service = Service(executable_path=parent_death_wrapper(tools.driver, self.folder, "chromedriver"))
        try:
            self.driver = webdriver.Chrome(service=service, options=options)
        except Exception as exc:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise BrowserError(f"render: the browser did not start: {_one_line(exc)}") from exc
        self.driver_pid = service.process.pid
        try:
            self.driver.set_page_load_timeout(HOOK_BOUND)
            self.driver.set_script_timeout(HOOK_BOUND)
            self.endpoint = BrowserEndpoint(self.driver.capabilities["goog:chromeOptions"]["debuggerAddress"])
        except Exception as exc:
            self.quit()
            raise BrowserError(f"render: the browser did not start: {_one_line(exc)}") from exc
        self.endpoint.on_event = self._keep_event
        self.session = SharedSession(self.driver)
        self._close_first_window()
        self._tabs: dict = {}       # DevTools session -> Tab, every tab open
        self._free: list = []       # the tabs no page is in
        self._tabs_lock = threading.Lock()

    def _close_first_window(self) -> None:
        """The window chromedriver opened is closed: the pages have tabs of their own, and a window costs a
        renderer or two (a headless Chromium lives on with no window at all)."""
        first = self.session.window
        if first is not None:
            self.session.forget(first)
            try:
                self.endpoint.call("Target.closeTarget", {"targetId": first})
            except BrowserError as exc:
                self.quit()
                raise BrowserError(f"render: the browser did not start: {exc}") from exc

    def render(self, request: Request, jar: CookieJar, headers: Mapping[str, str], timeout: float,
               hook: Optional[Callable[[Page], Any]] = None) -> RenderedPage:
        """The page of `request` once loaded, waited for (render_wait) and acted on (`hook`), in a tab of its own."""
        started = time.monotonic()
        deadline = started + timeout
        tab = self._take_tab()
        try:
            page = self._render_in(tab, request, jar, headers, hook, deadline)
        except (RenderTimeout, CallTimeout) as exc:
            self._close_tab(tab)        # a page that does not settle is closed with its tab
            raise RenderTimeout(f"{_timeout_words(exc)} (render_timeout {timeout:g} s)") from exc
        except Exception as exc:        # the browser's, WebDriver's (a hook's command), or the hook's own
            if self._alive(tab, exc):
                self._give_back(tab)
                raise                   # the page's or the hook's own error: the browser is well
            self.broken = True
            raise BrowserError(f"render: the browser failed under the page: {_one_line(exc)}") from exc
        except BaseException:
            self._close_tab(tab)        # stopped mid-page (TASK_TIMEOUT): what the page was doing is unknown
            raise
        self._give_back(tab)
        self.pages += 1
        page.seconds = time.monotonic() - started
        return page

    def _render_in(self, tab: Tab, request: Request, jar: CookieJar, headers: Mapping[str, str],
                   hook: Optional[Callable[[Page], Any]], deadline: float) -> RenderedPage:
        if tab.url != "about:blank" and urldefrag(request.url)[0] == urldefrag(tab.url)[0]:
            self._blank(tab, deadline)      # (a fragment's change alone loads no new document)
        self._prepare(tab, request, jar, headers)
        tab.events, tab.left = [], False
        self.endpoint.send("Page.navigate", {"url": request.url, "transitionType": "typed"}, tab.session)
        self._await_answer(tab, deadline)
        dom = self._settled_dom(tab, request.rendering.render_wait, hook, deadline)
        cookies = self._call(tab, "Network.getAllCookies", {}, deadline)["cookies"]
        final, redirects = main_document(tab.events, tab.target)
        tab.cookies_left = True      # (the quiet page's late answers may still set some)
        _refill(jar, cookies)
        return RenderedPage(final, dom, redirects)

    def _await_answer(self, tab: Tab, deadline: float) -> None:
        """Until the main document's answer (or its failure) has come: before it, the browser holds a command to
        the tab (a look) until the server answers, and the other tabs' commands would wait behind it."""
        while True:
            self.endpoint.pump()
            if _answered(tab.events, tab.target):
                return
            if not self.endpoint.alive():
                raise BrowserError("render: the browser is gone")
            if time.monotonic() >= deadline:
                raise RenderTimeout("render: the page's server did not answer in its render_timeout")
            self.endpoint.wait_for_news(LOOK_EVERY)

    def _call(self, tab: Tab, method: str, params: dict, deadline: float) -> Any:
        """`method` sent to the tab, its answer awaited until the page's deadline (a second at least)."""
        return self.endpoint.call(method, params, tab.session, max(deadline - time.monotonic(), 1.0))

    def _prepare(self, tab: Tab, request: Request, jar: CookieJar, headers: Mapping[str, str]) -> None:
        """The task's cookies (and the request's own) in the tab, and the request's headers on its requests."""
        if tab.cookies_left:            # (a new tab has none)
            self.endpoint.call("Network.clearBrowserCookies", {}, tab.session)
            tab.cookies_left = False
        cookies = [_cdp_cookie(cookie, request.url) for cookie in jar] + _own_cookies(request)
        if cookies:
            self.endpoint.call("Network.setCookies", {"cookies": cookies}, tab.session)
            tab.cookies_left = True
        agent = next((str(value) for name, value in headers.items() if name.lower() == "user-agent"), None)
        extra = {name: str(value) for name, value in headers.items() if name.lower() not in ("user-agent", "cookie")}
        if (extra, agent) != tab.headers:     # (most pages of a worker go with the same ones)
            self.endpoint.call("Network.setExtraHTTPHeaders", {"headers": extra}, tab.session)
            if agent:
                self.endpoint.call("Network.setUserAgentOverride", {"userAgent": agent}, tab.session)
            tab.headers = (extra, agent)

    def _settled_dom(self, tab: Tab, wait: Any, hook: Optional[Callable[[Page], Any]], deadline: float) -> str:
        """The DOM once the page has loaded, `wait` (a selector, or seconds) is over and the hook has acted.
        Without a hook or seconds to wait, the look that finds the page ready reads its DOM too."""
        selector = wait if isinstance(wait, str) else None
        seconds = 0.0 if selector is not None else float(wait or 0)
        read_now = hook is None and not seconds
        while True:
            seen = self._evaluate(tab, LOOK, [selector, read_now, DONE], deadline)
            if seen:
                break
            if not self.endpoint.alive():
                raise BrowserError("render: the browser is gone")
            if time.monotonic() >= deadline:
                loaded = selector and self._evaluate(tab, LOOK, [None, False, DONE], deadline) is not None
                raise RenderTimeout(f"render_wait: no {selector!r} on the page" if loaded
                                    else "render: the page did not settle in its render_timeout")
            time.sleep(LOOK_EVERY)
        if seen.get("failed"):
            return self._leave(tab, deadline)       # Chromium's error page: the Network events say what failed
        if read_now:
            tab.left, tab.url = True, seen["href"]
            return seen["dom"]
        page = Page(self.driver, deadline)
        if seconds:
            page.wait(seconds)
        if hook is not None:
            tab.driven = True
            with self.session.on(tab.target):
                hook(page)
        return self._leave(tab, deadline)

    def _evaluate(self, tab: Tab, function: str, arguments: list, deadline: float) -> Any:
        """What `function` returns, called with `arguments` in the tab's page."""
        answer = self._call(tab, "Runtime.evaluate", {"expression": f"{function}(...{json.dumps(arguments)})",
                                                      "returnByValue": True}, deadline)
        if "exceptionDetails" in answer:
            raise BrowserError(f"render: a look at the page failed: {answer['exceptionDetails'].get('text')}")
        return answer["result"].get("value")

    def _leave(self, tab: Tab, deadline: float) -> str:
        """The DOM of the page in `tab`, done with."""
        left = self._evaluate(tab, LEAVE, [DONE], deadline)
        tab.left, tab.url = True, left["href"]
        return left["dom"]

    def _blank(self, tab: Tab, deadline: float) -> None:
        """The tab sent to about:blank, and waited for there."""
        self._call(tab, "Page.navigate", {"url": "about:blank"}, deadline)
        tab.url = "about:blank"

    def _keep_event(self, message: dict) -> None:
        """(on the DevTools connection, under its lock) A tab's document events, kept for its page."""
        if message.get("method") in DOCUMENT_EVENTS:
            tab = self._tabs.get(message.get("sessionId"))
            if tab is not None and message["params"].get("type") == "Document":
                tab.events.append(message)

    def _take_tab(self) -> Tab:
        with self._tabs_lock:
            if self._free:
                return self._free.pop()
        return self._open_tab()

    def _open_tab(self) -> Tab:
        """A new tab in a browser context of its own, caching nothing and blocking what RENDER_BLOCK names."""
        try:
            context = self.endpoint.call("Target.createBrowserContext", {"disposeOnDetach": True})["browserContextId"]
            target = self.endpoint.call("Target.createTarget", {"url": "about:blank",
                                                                "browserContextId": context})["targetId"]
            tab = Tab(target, context, self.endpoint.attach(target))
            self._tabs[tab.session] = tab
            self.endpoint.call("Network.enable", {}, tab.session)
            self.endpoint.call("Network.setCacheDisabled", {"cacheDisabled": True}, tab.session)  # as served now
            if self.blocked:
                self.endpoint.call("Network.setBlockedURLs", {"urls": self.blocked}, tab.session)
        except BrowserError as exc:
            self.broken = True
            raise BrowserError(f"render: the browser could not open a tab: {exc}") from exc
        return tab

    def _give_back(self, tab: Tab) -> None:
        """`tab` to the free ones, its page done with (it is, unless it failed before its DOM was read). A tab a
        hook drove is closed instead: chromedriver, attached to it since, holds a new page's renderer there
        until chromedriver itself is next asked something (it lets a renderer run only when it reads events)."""
        if tab.driven:
            self._close_tab(tab)
            return
        if not tab.left:
            try:
                self._leave(tab, time.monotonic() + SHORT_BOUND)
            except BrowserError:
                self._close_tab(tab)
                return
        with self._tabs_lock:
            self._free.append(tab)

    def _close_tab(self, tab: Tab) -> None:
        """Close `tab` and its context; a browser that cannot is broken."""
        self._tabs.pop(tab.session, None)
        self.session.forget(tab.target)
        try:
            self.endpoint.call("Target.closeTarget", {"targetId": tab.target})
            self.endpoint.call("Target.disposeBrowserContext", {"browserContextId": tab.context})
        except BrowserError:
            self.broken = True

    def _alive(self, tab: Tab, error: Exception) -> bool:
        if not self.endpoint.alive() or any(words in str(error).lower() for words in DEAD_BROWSER_WORDS):
            return False
        try:
            self._evaluate(tab, "(() => 1)", [], time.monotonic() + SHORT_BOUND)
        except BrowserError:
            return False
        return True

    def processes(self) -> list:
        """chromedriver's pid and every process under it (the browser's)."""
        return [self.driver_pid, *descendants(self.driver_pid)]

    def memory(self) -> int:
        """Bytes (PSS) of the driver and its browser together."""
        return pss_bytes(self.processes())

    def quit(self) -> None:
        """End the driver and its browser, to the last process, and remove the profile. They are killed, not
        asked: a WebDriver quit can hang on a wedged browser, and a killed one leaves nothing the profile's
        removal does not take."""
        kill_tree(self.driver_pid, QUIT_BOUND)
        endpoint = getattr(self, "endpoint", None)
        if endpoint is not None:
            endpoint.close()
        try:
            self.driver.service.process.wait(QUIT_BOUND)      # (chromedriver is this process's child: reaped)
        except Exception:
            pass                # reaped by whoever adopts it
        shutil.rmtree(self.folder, ignore_errors=True)


def chromium_pool(settings: Any, count: Count) -> RenderPool:
    """A worker's pool of Chromium browsers; RenderUnavailable (one line) if the tools are not all here."""
    tools = find_tools(settings)
    return RenderPool(settings, lambda proxy: ChromiumBrowser(tools, settings.RENDER_BLOCK, proxy), count)


def browser_arguments(folder: str, block: tuple, proxy: Optional[str]) -> list:
    arguments = [*BROWSER_ARGUMENTS, f"--user-data-dir={os.path.join(folder, 'profile')}"]
    if os.geteuid() == 0:
        arguments.append("--no-sandbox")          # Chromium will not start its sandbox as root
    if "image" in block:
        arguments.append("--blink-settings=imagesEnabled=false")
    if proxy:
        # <-loopback>: loopback goes through the proxy too, as with every other request of the worker.
        arguments += [f"--proxy-server={proxy}", "--proxy-bypass-list=<-loopback>"]
    return arguments


def blocked_patterns(block: tuple) -> list:
    return [f"*.{extension}{tail}" for kind in block for extension in BLOCKED_EXTENSIONS[kind] for tail in ("", "?*")]


def main_document(messages: list, main_frame: str) -> tuple:
    """(the main document's last answer, the redirects before it) from a tab's Network events of documents (a
    tab's main frame has the tab's target id); BrowserError if the page could not be reached."""
    final, redirects, documents, failure = None, [], set(), None
    for message in messages:
        method, event = message.get("method"), message.get("params", {})
        if event.get("frameId") != main_frame or event.get("type") != "Document":
            if not (method == "Network.loadingFailed" and event.get("requestId") in documents):
                continue
        if method == "Network.requestWillBeSent":
            documents.add(event["requestId"])
            if "redirectResponse" in event:
                redirects.append(_hop(event["redirectResponse"]))
            else:                       # a navigation begins (the hook's too): what came before is not the page
                final, redirects, failure = None, [], None
        elif method == "Network.responseReceived":
            final = _hop(event["response"])
        elif method == "Network.loadingFailed" and not event.get("canceled"):
            failure = event.get("errorText", "failed")
    if final is None:
        raise BrowserError(f"render: the page could not be loaded ({failure or 'no answer'})")
    return final, redirects


def _answered(events: list, main_frame: str) -> bool:
    """Whether a tab's document events hold its main document's answer, or its failure."""
    documents = set()
    for event in events:
        method, params = event["method"], event["params"]
        if method == "Network.requestWillBeSent":
            if params.get("frameId") == main_frame:
                documents.add(params["requestId"])
        elif params.get("requestId") in documents and (
                method == "Network.responseReceived" or method == "Network.loadingFailed" and not params.get("canceled")):
            return True
    return False


def _hop(response: dict) -> Hop:
    return Hop(int(response.get("status", 0)), response.get("url", ""), dict(response.get("headers", {})))


def _cdp_cookie(cookie: Any, page: str) -> dict:
    """A cookie of the task's jar as CDP sets it: domain cookies by domain, host-only ones by URL (the page's
    own origin for its host: Chromium binds a cookie set by URL to that URL's port)."""
    made: dict = {"name": cookie.name, "value": cookie.value or "", "path": cookie.path or "/",
                  "secure": bool(cookie.secure), "httpOnly": bool(cookie.has_nonstandard_attr("HttpOnly"))}
    if cookie.domain.startswith("."):
        made["domain"] = cookie.domain
    else:
        parts = urlsplit(page)
        origin = (f"{parts.scheme}://{parts.netloc}" if parts.hostname == cookie.domain
                  else f"{'https' if cookie.secure else 'http'}://{cookie.domain}")
        made["url"] = origin + made["path"]
    if cookie.expires is not None:
        made["expires"] = float(cookie.expires)
    return made


def _own_cookies(request: Request) -> list:
    """The request's own cookies (Request(cookies=...)), for its URL."""
    own = request.fetch.cookies
    if not own:
        return []
    pairs = own.items() if isinstance(own, Mapping) else ((cookie.name, cookie.value) for cookie in own)
    return [{"name": name, "value": value, "url": request.url} for name, value in pairs]


def _refill(jar: CookieJar, cookies: list) -> None:
    """The task's jar holds what the browser holds now (it held the jar's cookies when the page began)."""
    jar.clear()
    for cookie in cookies:
        jar.set_cookie(create_cookie(
            cookie["name"], cookie["value"], domain=cookie.get("domain", ""), path=cookie.get("path", "/"),
            secure=bool(cookie.get("secure")), expires=None if cookie.get("session", True) else int(cookie["expires"]),
            rest={"HttpOnly": None} if cookie.get("httpOnly") else {}))


def _timeout_words(exc: BaseException) -> str:
    if isinstance(exc, CallTimeout):
        return "render: the page did not answer a look in its render_timeout"
    return str(exc)


def _one_line(exc: BaseException) -> str:
    text = getattr(exc, "msg", None) or str(exc)
    return " ".join(str(text).split())[:300]
