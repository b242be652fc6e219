"""The dashboard in a real browser: headless Chromium (Debian's chromium, driven by Selenium through Debian's
chromedriver) against a real `batchd run` and `batchd web`, on MySQL + Redis and on SQLite. The page shows
the figures the database holds and follows the batch as it moves; the charts are drawn (a screenshot with
the line's colour in it), a closed batch's from its record once the master is gone, with its top failure
reasons linked to the Failures page and its bytes, 304s and re-crawl counts; an action without the token is refused and with it takes effect; a crawled
<script> stays text; a flagged batch's quality page marks its flagged cells (their colour drawn) and the
batch page lists its flags; and nothing the pages load comes from anywhere but the dashboard."""
import json
import os

import pytest

from harness import wait_for
from pngs import colours
from supervised import batchd, gated_urls, slow_urls, start_batchd
from dashboards import (NAMING_SHOP, SCRIPT, TELLING, TOKEN, Web, failing_urls, flagged_batch, recrawled_batch, shop_tasks,
                        table_counts)
from httpserver import TestSite

webdriver = pytest.importorskip("selenium.webdriver", reason="pip install selenium (the test extra)")
from selenium.common.exceptions import (NoAlertPresentException, NoSuchElementException,  # noqa: E402
                                        StaleElementReferenceException)
from selenium.webdriver.common.by import By  # noqa: E402

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
LINE_COLOUR = (0x2B, 0x6C, 0xD4)          # svg .line in assets.py
DONE_COLOUR = (0x2F, 0x9E, 0x5B)          # svg .done
FAILED_COLOUR = (0xD0, 0x4A, 0x3A)        # svg .failed
FLAGGED_COLOUR = (0xF8, 0xD7, 0xD3)       # td.flagged
SCREENSHOTS = os.environ.get("BATCHD_TEST_SCREENSHOTS")     # a folder to keep the pages' screenshots in


@pytest.fixture
def browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.fail("apt install chromium chromium-driver (.ci/run installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1200,2000", "--no-first-run", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(20)
    yield driver
    driver.quit()


def text_of(browser, element_id: str) -> str:
    return browser.find_element(By.ID, element_id).text


def shown(browser, element_id: str):
    """The element's text, or None while the page is between two loads (it reloads itself)."""
    try:
        return browser.find_element(By.ID, element_id).text
    except (NoSuchElementException, StaleElementReferenceException):
        return None


def fresh(look):
    """What `look()` returns, or None if the page reloaded itself under it (an element it held went stale)."""
    try:
        return look()
    except (NoSuchElementException, StaleElementReferenceException):
        return None


def figure(browser, element_id: str) -> int:
    return int(text_of(browser, element_id))


def keep(browser, name: str) -> None:
    if SCREENSHOTS:
        browser.save_screenshot(os.path.join(SCREENSHOTS, f"{name}.png"))


def loaded_from(browser) -> set:
    """Every address the page loaded anything from: itself and its resources."""
    return {browser.current_url.split("/")[2]} | {
        url.split("/")[2] for url in browser.execute_script(
            "return performance.getEntriesByType('resource').map(function (e) { return e.name; });")}


def test_the_dashboard_in_a_browser_follows_the_batch(shared_backend, site, procs, browser):
    # Four gated pages (tests/httpserver.py): the batch is still running while the page is watched mid-batch.
    shared_backend.create_tasks(slow_urls(site, 146, seconds=0.1) + gated_urls(site, 4) + failing_urls(site))
    web = Web(procs, shared_backend)
    namespace = web.api("namespaces")[0]["namespace"]
    start_batchd(procs, shared_backend, "run", "--workers", "1", spider=TELLING, SPIDER_THREAD_COUNT=2)
    page = f"{web.base}/ns/{namespace}/"

    # -- mid-batch: the figures move from one reload to the next, and the page's are the table's
    seen = []

    def moved() -> bool:
        browser.get(page)
        if browser.find_elements(By.ID, "settled"):
            seen.append(figure(browser, "settled"))
        return len(set(seen)) >= 3 and seen[-1] < 155
    wait_for(moved, timeout=60, message="the page's settled figure moving three times mid-batch")
    assert seen == sorted(seen), seen
    assert figure(browser, "total") == 155 and text_of(browser, "batch-state") == "running"
    keep(browser, f"mid-batch-{shared_backend.__class__.__name__}")
    site.gate.set()
    wait_for(lambda: shown(browser, "settled") not in (None, str(seen[-1])), timeout=30,
             message="the page reloading itself with a newer figure")

    # -- at the end: done and failed as the table holds them, the charts drawn
    wait_for(lambda: shown(browser, "batch-state") == "finished", timeout=90,
             message="the page saying the batch finished (reloading itself)")
    browser.refresh()                  # (read in one load, not across the page's own reload)
    held = table_counts(shared_backend)
    assert (figure(browser, "done"), figure(browser, "failed"), figure(browser, "total")) == (
        held["done"], held["failed"], held["total"]) == (150, 5, 155)
    assert "finished" in text_of(browser, "verdict")
    keep(browser, f"batch-{shared_backend.__class__.__name__}")
    chart = browser.find_element(By.CSS_SELECTOR, "#progress-chart svg")
    assert len(chart.find_element(By.CSS_SELECTOR, "polyline").get_attribute("points").split()) >= 3
    assert LINE_COLOUR in colours(chart.screenshot_as_png), "the progress line is drawn"
    assert DONE_COLOUR in colours(browser.find_element(By.CSS_SELECTOR, "#progress-bar svg").screenshot_as_png)

    browser.get(f"{web.base}/ns/{namespace}/history")
    keep(browser, f"history-{shared_backend.__class__.__name__}")
    assert DONE_COLOUR in colours(browser.find_element(By.CSS_SELECTOR, "#history-tasks svg").screenshot_as_png)
    assert browser.find_element(By.CSS_SELECTOR, "#history tr:nth-child(2) td").text == "1"
    assert loaded_from(browser) == {web.base.split("/")[2]}, "nothing loaded from elsewhere"


def test_a_closed_batch_names_its_failure_reasons_and_draws_its_chart_from_its_record(mysql_backend, site, procs,
                                                                                   browser):
    recrawled_batch(mysql_backend, site)
    web = Web(procs, mysql_backend)
    browser.get(f"{web.base}/ns/{web.api('namespaces')[0]['namespace']}/")
    keep(browser, "closed-batch")
    (reason,) = browser.find_elements(By.CSS_SELECTOR, "#top-reasons tr:nth-child(2)")
    assert reason.text == "HTTP 404 2"
    assert [text_of(browser, cell) for cell in ("bar-failed", "not-modified", "found-changed", "found-unchanged")] == [
        "2 failed (40.0%)", "2", "1", "2"]
    assert FAILED_COLOUR in colours(browser.find_element(By.CSS_SELECTOR, "#progress-bar svg").screenshot_as_png)
    line = browser.find_element(By.CSS_SELECTOR, "#progress-chart polyline.from-record")
    assert len(line.get_attribute("points").split()) == 2 and text_of(browser, "chart-source").startswith(
        "Drawn from the batch's record")
    assert LINE_COLOUR in colours(browser.find_element(By.CSS_SELECTOR, "#progress-chart svg").screenshot_as_png)

    reason.find_element(By.LINK_TEXT, "HTTP 404").click()
    wait_for(lambda: "HTTP 404" in (shown(browser, "failed-total") or ""), timeout=10,
             message="the Failures page, filtered by the reason")
    assert text_of(browser, "failed-total") == "Batch 2: 2 failed tasks whose reason holds “HTTP 404”"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#failures td.reason")) == 2


def test_actions_in_the_browser_take_the_token_and_crawled_script_stays_text(shared_backend, site, procs, browser):
    shared_backend.create_tasks([site.url("/slow?seconds=60")] + failing_urls(site))
    web = Web(procs, shared_backend, token=TOKEN)
    start_batchd(procs, shared_backend, "run", "--workers", "1", spider=TELLING)
    wait_for(lambda: (web.api("status")["tasks"] or {}).get("failed") == 5, timeout=60,
             message="the five failures settled, the slow task still open")
    browser.get(f"{web.base}/ns/{web.api('namespaces')[0]['namespace']}/")

    def press(button: str, token: str) -> str:
        """The answer shown to a press of `button` with `token` in the field. The page reloads itself every few
        seconds (not while the field has the focus, an action is on its way, or its answer was just shown):
        a reload that lands before the click leaves the elements held stale, and the press is made again."""
        def pressed():
            try:
                field = browser.find_element(By.ID, "token")
                field.clear()
                if token:
                    field.send_keys(token)
                result = browser.find_element(By.ID, "action-result")
                browser.find_element(By.CSS_SELECTOR, f'button[data-action="{button}"]').click()
                wait_for(lambda: result.get_attribute("data-status"), timeout=30, message=f"the answer to {button}")
                said = result.text
                browser.execute_script("arguments[0].removeAttribute('data-status');", result)
                return said
            except StaleElementReferenceException:
                return None
        return wait_for(pressed, timeout=90, message=f"a press of {button} answered")

    assert press("pause", "").startswith("401")
    assert press("pause", "not-the-token").startswith("403")
    assert web.api("status")["paused_since"] is None, "a refused action changed nothing"
    assert press("pause", TOKEN).startswith("200")
    assert json.loads(batchd("status", TELLING, "--json", backend=shared_backend).stdout)["paused_since"] is not None
    # (the dashboard reuses what it read for a second: a reload may still show the namespace running)
    wait_for(lambda: browser.refresh() or "Paused since" in (shown(browser, "paused") or ""), timeout=30,
             message="the page saying paused")
    assert press("resume", TOKEN).startswith("200")
    assert json.loads(batchd("status", TELLING, "--json", backend=shared_backend).stdout)["paused_since"] is None

    # -- the failures page: the crawled <script> is shown as text and runs nowhere
    # (each page reloads itself: what a reload made stale is looked up again)
    wait_for(lambda: fresh(lambda: browser.find_element(By.LINK_TEXT, "Failures").click() or True),
             message="the Failures link followed")
    reasons = wait_for(lambda: fresh(lambda: [cell.text for cell in browser.find_elements(
        By.CSS_SELECTOR, "#failures td.reason")]), message="the failures page's reasons")
    assert f"ValueError: {SCRIPT}" in reasons, reasons
    assert not browser.find_elements(By.CSS_SELECTOR, "main script")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text
    keep(browser, f"failures-{shared_backend.__class__.__name__}")
    assert "hunter2" not in browser.page_source


def test_the_quality_page_marks_the_flagged_cells_and_the_batch_page_lists_the_flags(mysql_backend, site, procs,
                                                                                     browser):
    with TestSite() as captcha:
        shop_tasks(mysql_backend, site, captcha)
        flagged_batch(procs, mysql_backend)
        site_host, captcha_host = (s.url("/").split("/")[2] for s in (site, captcha))
    web = Web(procs, mysql_backend, spider=NAMING_SHOP)
    namespace = web.api("namespaces")[0]["namespace"]
    browser.get(f"{web.base}/ns/{namespace}/")
    flags = [item.text for item in browser.find_elements(By.CSS_SELECTOR, "#batch-flags li.flag")]
    assert len(flags) == 3 and sum(text.startswith(captcha_host) for text in flags) == 2, flags
    assert text_of(browser, "quality-outcome").startswith("batch 1: flagged, 3 flags")

    browser.find_element(By.LINK_TEXT, "per host and field").click()
    wait_for(lambda: browser.find_elements(By.ID, "quality-hosts"), timeout=10, message="the quality page")
    keep(browser, "quality")
    marked = {(cell.find_element(By.XPATH, "..").get_attribute("data-host"), cell.get_attribute("data-cell"),
               cell.get_attribute("data-field")) for cell in browser.find_elements(By.CSS_SELECTOR, "td.flagged")}
    assert marked == {(captcha_host, "top-body", ""), (captcha_host, "host", ""),
                      (site_host, "field", "crawl_task_item.title")}
    title = browser.find_element(By.CSS_SELECTOR, f'tr[data-host="{site_host}"] td[data-field="crawl_task_item.title"]')
    assert title.text == "92%" and "under its floor of 95%" in title.get_attribute("title")
    assert FLAGGED_COLOUR in colours(title.screenshot_as_png), "a flagged cell is drawn marked"
    headers = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#quality-hosts th")]
    assert SCRIPT in headers, headers          # the crawl's field name, shown as text
    assert not browser.find_elements(By.CSS_SELECTOR, "main script")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text
    assert loaded_from(browser) == {web.base.split("/")[2]}, "nothing loaded from elsewhere"
