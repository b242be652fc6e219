"""The bare Playwright loop `python -m bench render` measures batchd against: no framework, one Chromium, N pages
opened once and reused, each taking the next URL, waiting for the selector and reading page.content(). Run by
the bench in its own venv (bench/.venv-render: playwright), never by batchd's.

    bench/.venv-render/bin/python bench/render_playwright.py URLS.json --concurrency 2 --wait '#content.ready'
"""
import argparse
import asyncio
import json
import sys

BROWSER = "/usr/bin/chromium"
# Debian's Chromium as batchd starts it (batchd/render/chromium.py's arguments, less what Playwright sets itself).
ARGUMENTS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
             "--disable-extensions", "--mute-audio"]


async def crawl(urls: list, concurrency: int, wait: str, timeout_ms: float) -> int:
    from playwright.async_api import async_playwright

    todo: asyncio.Queue = asyncio.Queue()
    for url in urls:
        todo.put_nowait(url)
    read = 0

    async def one_page(page) -> None:
        nonlocal read
        while not todo.empty():
            url = todo.get_nowait()
            await page.goto(url, timeout=timeout_ms)
            await page.wait_for_selector(wait, timeout=timeout_ms)
            if await page.content():
                read += 1

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=BROWSER, args=ARGUMENTS)
        context = await browser.new_context()
        pages = [await context.new_page() for _ in range(concurrency)]
        await asyncio.gather(*(one_page(page) for page in pages))
        await browser.close()
    return read


def arguments(description: str) -> tuple:
    """(the options, the URLs) of a contender's command line (render_scrapy.py's too)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("urls", help="a JSON file: the list of URLs")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--wait", default="#content.ready")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds a page may take")
    args = parser.parse_args()
    with open(args.urls) as f:
        return args, json.load(f)


def main() -> int:
    args, urls = arguments(__doc__.splitlines()[0])
    read = asyncio.run(crawl(urls, args.concurrency, args.wait, args.timeout * 1000))
    print(f"bare playwright: {read} pages read")
    return 0 if read == len(urls) else 1


if __name__ == "__main__":
    sys.exit(main())
