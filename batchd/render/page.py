"""The page a `render_hook` acts on before its DOM is read: click, fill a form, scroll, wait for what comes.

    def more(page):
        page.click("button.more")                 # waits for the button, then clicks it
        page.wait_for(".review:nth-child(20)")    # until the 20th review is there
    ...
    yield Request(url, render=True, render_hook=more)     # or render_hook="more", a method of the spider

Every wait ends by the request's render_timeout: past it the page is closed and retried like any timeout.
`page.driver` is the Selenium WebDriver itself, for anything else: its commands go to the page's tab (the
browser's other pages load on meanwhile; their hooks' commands wait for each of its commands to end).
"""
import time
from typing import Any, Callable

from .renderer import RenderTimeout

POLL = 0.05     # seconds between two looks for what a wait waits for


class Page:
    """A rendered page, for a hook: `url`, `click`, `fill`, `scroll_to_bottom`, `wait_for`, `wait`, `evaluate`,
    and `driver` (the Selenium WebDriver)."""

    def __init__(self, driver: Any, deadline: float):
        self.driver, self.deadline = driver, deadline

    @property
    def url(self) -> str:
        return self.driver.current_url

    def wait_for(self, css: str, timeout: float = float("inf")) -> Any:
        """The first element `css` selects, once there is one (at most `timeout` seconds, and never past the
        page's render_timeout)."""
        by_css = _by_css()
        found = until(lambda: self.driver.find_elements(by_css, css), min(time.monotonic() + timeout, self.deadline),
                      f"render: no {css!r} on the page")
        return found[0]

    def click(self, css: str) -> None:
        """Click the element `css` selects, once it is there (by script if something covers it)."""
        element = self.wait_for(css)
        try:
            element.click()
        except Exception:       # covered, or out of view: a script's click reaches it all the same
            self.driver.execute_script("arguments[0].click()", element)

    def fill(self, css: str, text: str, submit: bool = False) -> None:
        """Type `text` into the field `css` selects (its old value cleared); `submit`: then submit its form."""
        element = self.wait_for(css)
        element.clear()
        element.send_keys(text)
        if submit:
            element.submit()

    def scroll_to_bottom(self, times: int = 1, pause: float = 0.2) -> None:
        """Scroll to the end of the page `times` times, `pause` seconds apart (pages that load more as you go)."""
        for _ in range(times):
            self.driver.execute_script("window.scrollTo(0, document.documentElement.scrollHeight)")
            self.wait(pause)

    def wait(self, seconds: float) -> None:
        """Let the page run `seconds` (never past its render_timeout)."""
        left = self.deadline - time.monotonic()
        if seconds > left:
            raise RenderTimeout(f"render: a wait of {seconds:g} s would outlast the page's render_timeout")
        time.sleep(seconds)

    def evaluate(self, script: str, *arguments: Any) -> Any:
        """What `script` returns, run in the page (`arguments[0]`... are `arguments`)."""
        return self.driver.execute_script(script, *arguments)


def until(look: Callable[[], Any], deadline: float, what_failed: str) -> Any:
    """What `look()` returns once it is truthy, polled until `deadline` (time.monotonic()); RenderTimeout after."""
    while True:
        found = look()
        if found:
            return found
        if time.monotonic() >= deadline:
            raise RenderTimeout(what_failed)
        time.sleep(POLL)


def _by_css() -> str:
    from selenium.webdriver.common.by import By
    return By.CSS_SELECTOR
