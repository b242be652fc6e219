"""A worker's browsers: at most RENDER_CONCURRENCY pages at once, in one browser per proxy (each page in a tab of
its own: render/chromium.py), started on first use and reused page after page.

A browser is replaced (a "restart", counted in the batch's render/browser_restarts) when it crashed under a
page, after RENDER_PAGES_PER_BROWSER pages, or once its processes' PSS passes RENDER_MAX_MEMORY (read after its
first page and every MEMORY_EVERY pages). A crash fails the requests it held, each once, and they are retried
like any connection error; a worn browser takes no new page and is killed once its pages are done (drained), so
a recycle fails none. A page that does not settle in its render_timeout is closed with its tab, not its browser.

The proxy is one of a browser's arguments, so pages of different proxies cannot share a browser: while all
places are taken by browsers, an idle one of another proxy makes way for a page's own.

Browsers are started, and killed, by one guarded thread that lives as long as the pool: chromedriver's
parent-death signal fires when the thread that started it ends (render/processes.py), so the thread must not be
a worker's thread that could end first. The pool is the engine-neutral part: `Engine` makes a browser;
render/chromium.py's is the one there is.
"""
import logging
import queue
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from http.cookiejar import CookieJar
from typing import Any, Callable, Mapping, Optional

from ..service.threads import check_in, guard, start_thread
from .renderer import BROWSER_RESTARTS, BROWSER_STARTS, RENDER_MS, RENDERED, BrowserError, RenderedPage

log = logging.getLogger("batchd")

START_BOUND = 60.0          # seconds a browser may take to start on a loaded machine
IDLE_TICK = 5.0             # the launcher and the threads waiting for a page's place check in this often
MB = 1024 * 1024
# A browser's memory is read after its first page and every this many pages: a PSS reading walks the page tables
# of its ten or so processes, tens of milliseconds on a busy machine, a tenth of a page's time if done each page.
MEMORY_EVERY = 10

Count = Callable[[str, int], None]


def _count_nothing(name: str, n: int) -> None:
    """The default count of a pool outside a worker."""


class Held:
    """A browser of the pool, from the moment it is asked for: its start (a Future), its proxy, the pages in it
    now, and why it is retiring ('' while it takes pages)."""

    def __init__(self, proxy: Optional[str], start: Future):
        self.proxy, self.start, self.pages_in, self.retiring = proxy, start, 0, ""

    def browser(self) -> Any:
        """The browser, once started (BrowserError if it did not start in START_BOUND)."""
        with guard.waiting(START_BOUND + IDLE_TICK):
            try:
                return self.start.result(timeout=START_BOUND)
            except FutureTimeout:
                raise BrowserError(f"render: a browser did not start in {START_BOUND:g} s") from None

    def started(self) -> Optional[Any]:
        """The browser if it has started, else None."""
        if self.start.done() and self.start.exception() is None:
            return self.start.result()
        return None


class RenderPool:
    """Renders requests, at most `settings.RENDER_CONCURRENCY` at once. `engine(proxy)` starts a browser
    (render/chromium.py's ChromiumBrowser); `count(name, n)` adds to the batch's counters."""

    def __init__(self, settings: Any, engine: Callable[[Optional[str]], Any], count: Count = _count_nothing):
        self.settings, self.engine, self.count = settings, engine, count
        self._places = threading.Semaphore(settings.RENDER_CONCURRENCY)
        self._lock = threading.Lock()
        self._held: list = []           # every browser asked for and not yet killed
        self._launcher: Optional[Launcher] = None
        self.closed = False

    def render(self, request: Any, jar: CookieJar, headers: Mapping[str, str], proxy: Optional[str],
               timeout: Optional[float], hook: Optional[Callable[[Any], Any]] = None) -> RenderedPage:
        """`timeout`: the request's render_timeout (None: RENDER_TIMEOUT)."""
        timeout = timeout or self.settings.RENDER_TIMEOUT
        with self._place(), guard.waiting(START_BOUND + timeout + IDLE_TICK):
            held = self._enter(proxy)
            try:
                browser = held.browser()
                page = browser.render(request, jar, headers, timeout, hook)
            except BaseException as failure:
                browser = held.started()
                if browser is None:
                    self._retire(held, "")      # it did not start: the next page starts another
                elif browser.broken:
                    self._retire(held, f"{type(failure).__name__}: {failure}")
                raise
            finally:
                self._leave(held)
            self.count(RENDERED, 1)
            self.count(RENDER_MS, round(page.seconds * 1000))
            why = self._worn(browser)
            if why:
                self._retire(held, why)
            return page

    @contextmanager
    def _place(self):
        """One of RENDER_CONCURRENCY places, waited for with a check-in now and then (each page in them ends by
        its render_timeout)."""
        while not self._places.acquire(timeout=IDLE_TICK):
            check_in(within=IDLE_TICK)
        try:
            yield
        finally:
            self._places.release()

    def _enter(self, proxy: Optional[str]) -> Held:
        """The browser of `proxy` a page goes into (started, or starting), else a new one."""
        stale = None
        with self._lock:
            if self.closed:
                raise BrowserError("render: the worker is stopping")
            held = next((held for held in self._held if held.proxy == proxy and not held.retiring), None)
            if held is None:
                stale = self._idle_of_another_proxy()
                if stale is not None:
                    self._drop(stale, "to use another proxy")
                if self._launcher is None:
                    self._launcher = Launcher()
                held = Held(proxy, self._launcher.submit(lambda: self._start(proxy)))
                self._held.append(held)
            held.pages_in += 1
        if stale is not None:
            self._kill(stale)
        return held

    def _idle_of_another_proxy(self) -> Optional[Held]:
        """(under the lock) With as many browsers as places, an idle one makes way for the one about to start."""
        taking = [held for held in self._held if not held.retiring]
        idle = [held for held in taking if held.pages_in == 0]
        return idle[0] if idle and len(taking) >= self.settings.RENDER_CONCURRENCY else None

    def _start(self, proxy: Optional[str]) -> Any:
        browser = self.engine(proxy)
        self.count(BROWSER_STARTS, 1)
        return browser

    def _leave(self, held: Held) -> None:
        """A page is out of `held`: the last page out of a retiring browser kills it."""
        with self._lock:
            held.pages_in -= 1
            if not (held.retiring and held.pages_in == 0 and held in self._held):
                return
            self._held.remove(held)
        self._kill(held)

    def _worn(self, browser: Any) -> str:
        """Why a browser that rendered well is replaced all the same, or ''."""
        if browser.pages >= self.settings.RENDER_PAGES_PER_BROWSER:
            return f"{browser.pages} pages (RENDER_PAGES_PER_BROWSER)"
        if browser.pages != 1 and browser.pages % MEMORY_EVERY:
            return ""
        memory = browser.memory()
        if memory > self.settings.RENDER_MAX_MEMORY * MB:
            return f"{memory // MB} MB (RENDER_MAX_MEMORY {self.settings.RENDER_MAX_MEMORY})"
        return ""

    def _retire(self, held: Held, why: str) -> None:
        """`held` takes no more pages and is replaced (`why`: a restart, said and counted; '' for a browser that
        did not start): killed once its pages are out if it is well (drained), at once if it is broken (its pages
        fail with it). Done once, however many pages see it go."""
        with self._lock:
            if held.retiring or held not in self._held:
                return
            browser = held.started()
            if held.pages_in and (browser is None or not browser.broken):
                held.retiring = why or "it did not start"
                if why:
                    self._say_restart(why)
                return      # the last page out kills it
            self._drop(held, why)
        self._kill(held)

    def _drop(self, held: Held, why: str) -> None:
        """(under the lock) `held` out of the pool; the caller kills it."""
        held.retiring = why or "it did not start"
        self._held.remove(held)
        if why:
            self._say_restart(why)

    def _say_restart(self, why: str) -> None:
        log.info("render: a browser is replaced after %s", why)
        self.count(BROWSER_RESTARTS, 1)

    def _kill(self, held: Held) -> None:
        """Kill `held`'s browser; one still starting is killed once it has."""
        if not held.start.done():
            held.start.add_done_callback(lambda start: self._kill(held))
            return
        browser = held.started()
        if browser is None:
            return
        launcher = self._launcher
        if launcher is not None:
            launcher.submit(browser.quit)      # in the background: the page's thread goes on with its task
        else:
            browser.quit()

    def browser_processes(self) -> list:
        """The pids of every live browser's processes (its driver's included)."""
        with self._lock:
            browsers = [held.started() for held in self._held]
        return [pid for browser in browsers if browser is not None for pid in browser.processes()]

    def close(self) -> None:
        """Kill every browser now (the worker stops), and the launcher thread after them."""
        with self._lock:
            self.closed = True
            held, self._held = self._held, []
            launcher, self._launcher = self._launcher, None
        for one in held:
            self._kill(one)
        if launcher is not None:
            launcher.stop()


class Launcher:
    """The one guarded thread that starts and kills a pool's browsers, in the order asked."""

    def __init__(self):
        self._jobs: queue.Queue = queue.Queue()
        self._thread = start_thread(self._serve, "render-launcher")

    def submit(self, job: Callable[[], Any]) -> Future:
        done: Future = Future()
        self._jobs.put((job, done))
        return done

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join(START_BOUND)

    def _serve(self) -> None:
        while True:
            check_in(within=IDLE_TICK + START_BOUND)
            try:
                work = self._jobs.get(timeout=IDLE_TICK)
            except queue.Empty:
                continue
            if work is None:
                guard.forget()
                return
            job, done = work
            try:
                done.set_result(job())
            except Exception as failure:       # the caller's to judge (a browser that did not start)
                done.set_exception(failure)

