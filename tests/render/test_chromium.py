"""Rendered requests through a real downloader and its chain, in Debian's Chromium, on pages served on loopback
(tests/httpserver.py's /js-* routes): the DOM after the page's scripts, render_wait, a hook, cookies both ways,
RENDER_BLOCK, the headers and the proxy, a page that never settles, a browser killed under its page, recycles,
and what is refused in one line."""
import json
import os
import signal
import subprocess
import sys
import threading

import pytest
import requests

from batchd.assembly import downloader_for
from batchd.config import settings_from_plain
from batchd.http import Request, RequestFailed
from batchd.render.processes import descendants
from harness import stays_true, wait_for
from pacing import SEND_JITTER
from procs import live
from httpserver import TestProxy

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/chromedriver"),
                                reason="apt install chromium chromium-driver (.ci/run installs them)")


class Counted:
    """A batch's counters, as the pool adds to them."""

    def __init__(self):
        self.counts, self.lock = {}, threading.Lock()

    def inc(self, name, n=1, batch_id=None):
        with self.lock:
            self.counts[name] = self.counts.get(name, 0) + n


@pytest.fixture
def render():
    """render(**settings) -> (downloader, counters): closed, browsers and all, after the test."""
    made = []

    def make(**settings):
        counted = Counted()
        downloader = downloader_for(settings_from_plain({"SPIDER_MAX_RETRY_TIMES": 1, **settings}, "test"), 4,
                                    stats=counted)
        made.append(downloader)
        return downloader, counted.counts

    yield make
    for downloader in made:
        downloader.close()


class Since(dict):
    """The counters a test added to a shared downloader's (a dict of them, read at the time of asking)."""

    def __init__(self, counted):
        super().__init__()
        self.counted, self.before = counted, dict(counted.counts)

    def __getitem__(self, name):
        return self.counted.counts.get(name, 0) - self.before.get(name, 0)

    def __contains__(self, name):
        return self[name] != 0


@pytest.fixture(scope="module")
def warm_downloader():
    """One downloader with the default settings for the tests that need no others: its browsers, started once,
    serve them all (a browser's start is most of such a test's time)."""
    counted = Counted()
    downloader = downloader_for(settings_from_plain({"SPIDER_MAX_RETRY_TIMES": 1}, "test"), 4, stats=counted)
    yield downloader, counted
    downloader.close()


@pytest.fixture
def shared(warm_downloader):
    """(the warm downloader, what this test adds to its counters), with no spider and an empty cookie jar."""
    downloader, counted = warm_downloader
    downloader.spider = None
    downloader.use_cookies(requests.cookies.RequestsCookieJar())
    return downloader, Since(counted)


def test_the_body_is_the_dom_once_the_scripts_ran(site, shared):
    downloader, counts = shared
    plain = downloader.fetch(Request(site.url("/js/3")))
    assert plain.css("h1.title").get() is None, "a plain fetch sees the empty shell"
    page = downloader.fetch(Request(site.url("/js/3"), render=True, render_wait="h1.title"))
    assert (page.status_code, page.url, page.css("h1.title::text").get()) == (200, site.url("/js/3"), "Title 3")
    assert page.headers["Content-Type"] == "text/html; charset=utf-8"
    assert site.hits("/js-data/3") == 1, "the page's own fetch() went out"
    assert counts["render/pages"] == 1 and counts["render/ms"] > 0


def test_status_and_url_are_the_main_documents_after_redirects(site, shared):
    downloader, _ = shared
    page = downloader.fetch(Request(site.url("/redirect?to=/js/4"), render=True, render_wait=".title"))
    assert (page.status_code, page.url) == (200, site.url("/js/4"))
    assert [(hop.status_code, hop.url) for hop in page.history] == [(302, site.url("/redirect?to=/js/4"))]
    with pytest.raises(RequestFailed, match="HTTP 404"):
        downloader.fetch(Request(site.url("/nothing-here"), render=True))


def _failing_hook(page):
    raise ValueError("no such form")


def test_render_wait_seconds_and_a_hook_acting_on_the_page(site, shared):
    downloader, counts = shared
    waited = downloader.fetch(Request(site.url("/js/5"), render=True, render_wait=0.5))
    assert waited.css("h1.title::text").get() == "Title 5"

    class Spider:
        def more(self, page):
            page.click("#load")
            page.wait_for("#more li")

    downloader.spider = Spider()
    clicked = downloader.fetch(Request(site.url("/js-click"), render=True, render_hook="more"))
    assert clicked.css("#more li::text").getall() == ["one", "two"]
    with pytest.raises(RequestFailed, match="ValueError: no such form") as failed:
        downloader.fetch(Request(site.url("/js-click"), render=True, render_hook=_failing_hook))
    assert failed.value.attempts == 1 and "render/browser_restarts" not in counts, "the browser was well"
    by_callable = downloader.fetch(Request(site.url("/js-click"), render=True,
                                           render_hook=lambda page: page.evaluate("document.title = 'set'")))
    assert by_callable.css("title::text").get() == "set" and by_callable.css("#more li").getall() == []


def test_the_tasks_cookies_go_into_the_page_and_come_back(site, shared):
    downloader, _ = shared
    jar = requests.cookies.RequestsCookieJar()
    jar.set("task", "7", domain="127.0.0.1", path="/")        # (requests makes it HttpOnly: no script sees it)
    downloader.use_cookies(jar)
    page = downloader.fetch(Request(site.url("/js-cookies"), render=True, cookies={"own": "1"}))
    assert page.css("#cookies::text").get() == "own=1"
    assert {cookie.name: cookie.value for cookie in jar} == {"task": "7", "own": "1", "from_page": "1"}
    echoed = downloader.fetch(Request(site.url("/echo"), render=True))
    assert sorted(json.loads(echoed.css("pre::text").get())["headers"]["cookie"].split("; ")) == [
        "from_page=1", "own=1", "task=7"], "what the page set went on with the task"
    downloader.use_cookies(requests.cookies.RequestsCookieJar())
    again = downloader.fetch(Request(site.url("/js-cookies"), render=True))
    assert again.css("#cookies::text").get() is None, "another task's page sees none of them"


def test_a_page_done_with_does_nothing_more_while_its_tab_waits(site, render):
    """The tab keeps its last page until the next one replaces it: quieted, it neither runs its timers nor sets
    cookies the next task's page would carry."""
    downloader, _ = render(RENDER_CONCURRENCY=1)         # (one tab: the next page goes in the same one)
    downloader.use_cookies(requests.cookies.RequestsCookieJar())
    downloader.fetch(Request(site.url("/js-late"), render=True, render_wait="#ready"))
    stays_true(lambda: site.hits("/beacon/7") == 0, 1.5, message="the page's timer never ran after its read")
    jar = requests.cookies.RequestsCookieJar()
    downloader.use_cookies(jar)
    echoed = downloader.fetch(Request(site.url("/echo"), render=True))
    assert "cookie" not in json.loads(echoed.css("pre::text").get())["headers"]
    assert list(jar) == []


def test_a_page_differing_from_the_last_by_its_fragment_alone_loads_anew(site, render):
    downloader, _ = render(RENDER_CONCURRENCY=1)
    for fragment in ("#a", "#b"):
        page = downloader.fetch(Request(site.url("/js/3") + fragment, render=True, render_wait=".title",
                                        render_timeout=10))
        assert page.css(".title::text").get() == "Title 3"
    assert site.hits("/js-data/3") == 2


@pytest.mark.parametrize("block, loaded", [(None, {"style.css"}),
                                           ([], {"style.css", "picture.png", "font.woff2"})])
def test_render_block_keeps_resource_types_from_loading(site, render, shared, block, loaded):
    downloader = shared[0] if block is None else render(RENDER_BLOCK=block)[0]
    downloader.fetch(Request(site.url("/js-assets"), render=True, render_wait=0.5))
    fetched = {name for name in ("style.css", "picture.png", "font.woff2", "film.mp4") if site.hits(f"/asset/{name}")}
    assert loaded <= fetched and (block is not None or fetched == loaded), fetched


def test_the_requests_headers_and_proxy_are_the_pages_and_its_sub_requests(site, render):
    with TestProxy() as proxy:
        downloader, _ = render(PROXY=proxy.url(), USER_AGENT=["rendering-agent/1"],
                               DEFAULT_REQUEST_HEADERS={"X-Everywhere": "yes"})
        echoed = downloader.fetch(Request(site.url("/echo"), render=True, headers={"X-Own": "1"}))
        seen = json.loads(echoed.css("pre::text").get())["headers"]
        assert (seen["user-agent"], seen["x-own"], seen["x-everywhere"]) == ("rendering-agent/1", "1", "yes")
        downloader.fetch(Request(site.url("/js/6"), render=True, render_wait=".title"))
        assert {site.url("/js/6"), site.url("/js-data/6")} <= set(proxy.requests), proxy.requests


def test_a_page_that_never_settles_is_closed_and_retried_like_a_timeout(site, shared):
    downloader, counts = shared
    with pytest.raises(RequestFailed, match="render_timeout") as failed:
        downloader.fetch(Request(site.url("/js-never"), render=True, render_timeout=2))
    assert failed.value.attempts == 2 and site.hits("/js-never") == 2
    assert "render/browser_restarts" not in counts, "each unsettled page was closed with its tab, not its browser"
    with pytest.raises(RequestFailed, match="render_wait: no '#absent'"):
        downloader.fetch(Request(site.url("/js/1"), render=True, render_wait="#absent", render_timeout=3,
                                 max_retry_times=0))
    assert downloader.fetch(Request(site.url("/js/2"), render=True, render_wait=".title")).status_code == 200


def test_a_browser_killed_under_its_pages_fails_each_of_them_once(site, render):
    downloader, counts = render()
    pages = {}
    fetching = [threading.Thread(target=lambda n=n: pages.update({n: downloader.fetch(
        Request(site.url(f"/gated/{n}"), render=True))})) for n in range(2)]
    for thread in fetching:
        thread.start()
    wait_for(lambda: site.held() == 2, message="both pages loading in the one browser")
    driver = downloader.render_pool().browser_processes()[0]
    browsers = [pid for pid in descendants(driver) if "--type=" not in _command_line(pid)]
    os.kill(browsers[0], signal.SIGKILL)
    wait_for(lambda: counts.get("render/browser_restarts"), message="the dead browser seen")
    site.gate.set()
    for thread in fetching:
        thread.join(60)
    assert [pages[n].status_code for n in range(2)] == [200, 200]
    assert [site.hits(f"/gated/{n}") for n in range(2)] == [2, 2], "each failed once, and retried"
    assert counts["render/browser_restarts"] == 1 and counts["render/browser_starts"] == 2
    wait_for(lambda: not live([driver]), message="the dead browser's driver killed too")


def test_a_worn_browser_finishes_its_pages_before_it_is_recycled(site, render):
    downloader, counts = render(RENDER_PAGES_PER_BROWSER=1)
    held = {}
    loading = threading.Thread(target=lambda: held.update(page=downloader.fetch(
        Request(site.url("/gated/1"), render=True))))
    loading.start()
    wait_for(lambda: site.held() == 1, message="a page loading")
    first = set(downloader.render_pool().browser_processes())
    downloader.fetch(Request(site.url("/page/1"), render=True))       # the browser's one page: it is worn
    assert loading.is_alive() and live(first) and counts["render/browser_restarts"] == 1
    site.gate.set()
    loading.join(60)
    assert held["page"].status_code == 200 and site.hits("/gated/1") == 1, "drained, not failed"
    wait_for(lambda: not live(first), message="the drained browser killed")
    downloader.fetch(Request(site.url("/page/2"), render=True))
    assert counts["render/browser_restarts"] == 2 and counts["render/browser_starts"] == 2
    second = set(downloader.render_pool().browser_processes())
    downloader.close()
    wait_for(lambda: not live(first | second), message="no browser process left after the recycles and the close")


def test_a_browser_past_render_max_memory_is_replaced_after_its_page(site, render):
    downloader, counts = render(RENDER_MAX_MEMORY=64)      # any Chromium takes more
    for n in range(2):
        downloader.fetch(Request(site.url(f"/page/{n}"), render=True))
    assert counts["render/browser_restarts"] == 2


def test_at_most_render_concurrency_pages_at_once(site, render):
    downloader, counts = render(RENDER_CONCURRENCY=2)
    threads = [threading.Thread(target=downloader.fetch, args=(Request(site.url(f"/gated/{n}"), render=True),))
               for n in range(4)]
    for thread in threads:
        thread.start()
    wait_for(lambda: site.held() == 2, message="two pages loading")
    stays_true(lambda: site.held() == 2, 1.0, message="no third page while two load")
    site.gate.set()
    for thread in threads:
        thread.join(60)
    assert counts["render/pages"] == 4 and counts["render/browser_starts"] == 1, "the pages share one browser"


def test_two_pages_at_once_in_one_browser_see_only_their_own_tasks_cookies(site, render):
    downloader, counts = render()
    both_loaded, seen, jars = threading.Barrier(2, timeout=30), {}, {}

    def task(name):
        jars[name] = requests.cookies.RequestsCookieJar()
        downloader.use_cookies(jars[name])

        def look(page):
            both_loaded.wait()          # the two pages are in the browser at once
            seen[name] = page.evaluate("return document.cookie")
        downloader.fetch(Request(site.url(f"/js-cookies?{name}"), render=True, cookies={f"own_{name}": "1"},
                                 render_hook=look))
    threads = [threading.Thread(target=task, args=(name,)) for name in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert seen == {"a": "own_a=1; from_page=1", "b": "own_b=1; from_page=1"}
    assert {name: sorted(cookie.name for cookie in jar) for name, jar in jars.items()} == {
        "a": ["from_page", "own_a"], "b": ["from_page", "own_b"]}
    assert counts["render/browser_starts"] == 1


def test_what_a_browser_cannot_do_fails_in_one_line(site, render):
    downloader, _ = render()
    with pytest.raises(RequestFailed, match="a browser loads a page with GET only"):
        downloader.fetch(Request(site.url("/echo"), method="POST", data={"a": "1"}, render=True))
    downloader, _ = render(PROXY="http://user:secret@127.0.0.1:9")
    with pytest.raises(RequestFailed) as failed:
        downloader.fetch(Request(site.url("/page/1"), render=True))
    assert "no proxy with a password" in str(failed.value) and "secret" not in str(failed.value)
    downloader, _ = render(RENDER_BROWSER="no-such-chromium")
    with pytest.raises(RequestFailed, match="RENDER_BROWSER: no 'no-such-chromium' on this machine: apt install "
                                            "chromium") as failed:
        downloader.fetch(Request(site.url("/page/1"), render=True))
    assert failed.value.attempts == 1, "not retried"


def test_a_spider_that_never_renders_imports_no_browser_and_starts_none(site):
    program = ("import sys; from batchd.assembly import downloader_for; from batchd.config import Settings; "
               "from batchd.http import Request; d = downloader_for(Settings(), 2); "
               f"d.fetch(Request({site.url('/page/1')!r})); "
               "print(sorted(m for m in sys.modules if m.startswith(('selenium', 'batchd.render.pool', "
               "'batchd.render.chromium'))))")
    ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert ran.stdout.strip() == "[]", ran.stdout + ran.stderr


def _command_line(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def test_rendered_requests_keep_robots_txt_and_the_hosts_pace(site, render, sends):
    site.robots_txt = "User-agent: *\nDisallow: /js/2\n"
    downloader, counts = render(ROBOTSTXT_OBEY=True, DOWNLOAD_DELAY=0.5, RANDOMIZE_DOWNLOAD_DELAY=False)
    with pytest.raises(RequestFailed, match="robots.txt"):
        downloader.fetch(Request(site.url("/js/2"), render=True))
    assert site.hits("/js/2") == 0 and counts.get("render/pages", 0) == 0, "refused before any browser loaded it"
    for n in (3, 4, 5):
        downloader.fetch(Request(site.url(f"/js/{n}"), render=True))
    assert min(sends.gaps("/js/")) >= 0.5 - SEND_JITTER, "DOWNLOAD_DELAY holds between rendered pages of one host"
