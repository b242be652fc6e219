"""What rendering needs on the machine: a Chromium, the chromedriver of its major version, Selenium 4.8 or
newer, and wsproto (the browser's DevTools connection: render/devtools.py; Selenium brings it, pip's and
Debian's alike). Nothing is ever downloaded: a missing part is one line saying how to install it (`batchd check` prints
that line; a worker fails its rendered requests with it)."""
import importlib.util
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Optional

from .renderer import RenderUnavailable

SELENIUM_AT_LEAST = (4, 8)
VERSION = re.compile(r"(\d+)\.(\d+)[.\d]*")
READY = "render: ready: "
INSTALL_SELENIUM = "pip install 'batchd[render]', or apt install python3-selenium"
INSTALL_WSPROTO = "pip install 'batchd[render]', or apt install python3-wsproto"


@dataclass(frozen=True)
class BrowserTools:
    """The Chromium and the chromedriver a worker's browsers run (full paths), and their versions."""
    browser: str
    driver: str
    browser_version: str = ""
    driver_version: str = ""
    selenium_version: str = ""

    def summary(self) -> str:
        return (f"Chromium {self.browser_version} ({self.browser}), ChromeDriver {self.driver_version} "
                f"({self.driver}), Selenium {self.selenium_version}")


def find_tools(settings: Any, versions: bool = True) -> BrowserTools:
    """The tools RENDER_BROWSER and RENDER_DRIVER name, found on PATH and checked to fit together
    (`versions`: asked for their versions too); RenderUnavailable says what is missing."""
    selenium_version = _selenium_version()
    _need_wsproto()
    browser = _found(settings.RENDER_BROWSER, "RENDER_BROWSER", "apt install chromium")
    driver = _found(settings.RENDER_DRIVER, "RENDER_DRIVER", "apt install chromium-driver")
    if not versions:
        return BrowserTools(browser, driver, selenium_version=selenium_version)
    browser_version, driver_version = _version_of(browser), _version_of(driver)
    if _major(browser_version) != _major(driver_version):
        raise RenderUnavailable(f"render: ChromeDriver {driver_version or '?'} ({driver}) does not drive Chromium "
                                f"{browser_version or '?'} ({browser}): install the chromium-driver of the same "
                                "version (apt install chromium chromium-driver)")
    return BrowserTools(browser, driver, browser_version, driver_version, selenium_version)


def readiness(settings: Any) -> str:
    """One line for `batchd check`: what renders pages here, or what is missing and how to install it."""
    try:
        return READY + find_tools(settings).summary()
    except RenderUnavailable as missing:
        return str(missing)


def _selenium_version() -> str:
    try:
        import selenium
    except ImportError:
        raise RenderUnavailable(f"render: Selenium is not installed: {INSTALL_SELENIUM}") from None
    version = getattr(selenium, "__version__", "0")
    found = VERSION.match(version)
    if found is None or (int(found.group(1)), int(found.group(2))) < SELENIUM_AT_LEAST:
        raise RenderUnavailable(f"render: Selenium {version} is too old (4.8 or newer): {INSTALL_SELENIUM}")
    return version


def _need_wsproto() -> None:
    if importlib.util.find_spec("wsproto") is None:
        raise RenderUnavailable(f"render: wsproto is not installed: {INSTALL_WSPROTO}")


def _found(command: str, setting: str, install: str) -> str:
    path = shutil.which(command)
    if path is None:
        raise RenderUnavailable(f"render: {setting}: no {command!r} on this machine: {install}, or point "
                                f"{setting} at one")
    return path


def _version_of(program: str) -> str:
    try:
        said = subprocess.run([program, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    found = VERSION.search(said)
    return found.group(0) if found else ""


def _major(version: str) -> Optional[str]:
    return version.split(".")[0] if version else None
