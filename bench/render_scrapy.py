"""scrapy-playwright as `python -m bench render` runs it: a Scrapy crawl of the same pages in Debian's Chromium
(PLAYWRIGHT_LAUNCH_OPTIONS' executable_path), CONCURRENT_REQUESTS and PLAYWRIGHT_MAX_PAGES_PER_CONTEXT at the
bench's concurrency, waiting for the same selector (PageMethod("wait_for_selector")). Run by the bench in its own
venv (bench/.venv-render: scrapy-playwright), never by batchd's.

    bench/.venv-render/bin/python bench/render_scrapy.py URLS.json --concurrency 2 --wait '#content.ready'
"""
import sys

from render_playwright import ARGUMENTS, BROWSER, arguments


def crawl(urls: list, concurrency: int, wait: str, timeout: float) -> int:
    import scrapy
    from scrapy.crawler import CrawlerProcess
    from scrapy_playwright.page import PageMethod

    scraped = []

    class RenderedPages(scrapy.Spider):
        name = "rendered"

        async def start(self):      # (Scrapy 2.13 and newer: start_requests is no longer read)
            for url in urls:
                yield scrapy.Request(url, meta={"playwright": True, "playwright_page_methods": [
                    PageMethod("wait_for_selector", wait, timeout=timeout * 1000)]})

        def parse(self, response):
            scraped.append(response.url)
            yield {"url": response.url, "title": response.css("#content h1::text").get()}

    process = CrawlerProcess(settings={
        "DOWNLOAD_HANDLERS": {"http": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler",
                              "https": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler"},
        "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
        "PLAYWRIGHT_BROWSER_TYPE": "chromium",
        "PLAYWRIGHT_LAUNCH_OPTIONS": {"executable_path": BROWSER, "args": ARGUMENTS},
        "PLAYWRIGHT_MAX_PAGES_PER_CONTEXT": concurrency,
        "PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT": timeout * 1000,
        "CONCURRENT_REQUESTS": concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": concurrency,
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "WARNING",
    })
    process.crawl(RenderedPages)
    process.start()
    return len(scraped)


def main() -> int:
    args, urls = arguments(__doc__.splitlines()[0])
    read = crawl(urls, args.concurrency, args.wait, args.timeout)
    print(f"scrapy-playwright: {read} pages read")
    return 0 if read == len(urls) else 1


if __name__ == "__main__":
    sys.exit(main())
