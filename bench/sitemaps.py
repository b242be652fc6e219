"""`batchd tasks import-sitemap` at scale: an index of gzipped sitemaps of 50,000 URLs each (the protocol's most),
served on loopback by the standard library's HTTP server, imported into a fresh SQLite file (and, with --mysql
URL, a fresh MariaDB table), at two sizes in one sitting:

    .venv/bin/python -m bench.sitemaps                        # 100,000 then 1,000,000 URLs, SQLite
    .venv/bin/python -m bench.sitemaps --sizes 200000 --mysql mysql://root@127.0.0.1:3306/batchd_bench --json

For each size: URLs/s of the import into an empty table, URLs/s of the same import again (every URL known), and
how much the process's peak resident memory (VmHWM, reset before each import through /proc/self/clear_refs)
grew over its resident memory before the import. The import streams, so that growth stays flat from one size to
the next: what would grow is the URLs held, 100 to 150 bytes each in a Python set.
"""
import argparse
import functools
import gzip
import json
import logging
import os
import re
import tempfile
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

from batchd.config import load_settings
from batchd.sitemaps.sitemap_files import MOST_ENTRIES
from batchd.sitemaps.sitemap_import import import_sitemaps
from bench.task_import import LAYOUT, fresh_store

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


def write_sitemaps(directory: str, urls: int, base: str) -> str:
    """`urls` page URLs in gzipped sitemaps of MOST_ENTRIES each, and their index; the index's path."""
    parts = []
    for part, start in enumerate(range(0, urls, MOST_ENTRIES)):
        entries = "".join(f"<url><loc>{base}/docs/section-{n // 1000}/page-{n}.html?lang=en</loc>"
                          f"<lastmod>2026-11-{1 + n % 28:02d}</lastmod></url>"
                          for n in range(start, min(urls, start + MOST_ENTRIES)))
        with open(os.path.join(directory, f"part-{part}.xml.gz"), "wb") as f:
            f.write(gzip.compress(f"<?xml version=\"1.0\"?><urlset {NS}>{entries}</urlset>".encode(), 1))
        parts.append(f"{base}/part-{part}.xml.gz")
    with open(os.path.join(directory, "index.xml"), "w") as f:
        f.write(f"<?xml version=\"1.0\"?><sitemapindex {NS}>"
                + "".join(f"<sitemap><loc>{url}</loc></sitemap>" for url in parts) + "</sitemapindex>")
    return f"{base}/index.xml"


def resident_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"{field}:\s+(\d+)", f.read()).group(1))


def measured_import(store, index: str, urls: int) -> tuple:
    """(URLs/s, KB the peak grew by) of one import, checked."""
    before = resident_kb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    started = time.perf_counter()
    report = import_sitemaps(load_settings({}), store, LAYOUT, [index])
    seconds = time.perf_counter() - started
    assert report.seen == urls and report.added + report.known == urls and not report.failed, report
    return urls / seconds, resident_kb("VmHWM") - before


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sitemaps", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000", help="URLs of each run, comma-separated")
    parser.add_argument("--mysql", metavar="URL", help="also a MariaDB database (its crawl_task table is dropped)")
    parser.add_argument("--json", action="store_true", help="the figures as one JSON line at the end")
    args = parser.parse_args(argv)
    logging.getLogger("batchd").setLevel(logging.ERROR)
    sizes = [int(size) for size in args.sizes.split(",")]
    places = ["sqlite"] + ([args.mysql] if args.mysql else [])
    figures = []
    with tempfile.TemporaryDirectory() as directory:
        server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=directory))
        threading.Thread(target=server.serve_forever, daemon=True, name="bench-sitemaps").start()
        base = f"http://127.0.0.1:{server.server_port}"
        print("| store | URLs | import, URLs/s | again (all known), URLs/s | peak RSS growth |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for urls in sizes:
            index = write_sitemaps(directory, urls, base)
            for place in places:
                store = fresh_store(place, directory, f"tasks-{urls}")
                rate, grown = measured_import(store, index, urls)
                again, grown_again = measured_import(store, index, urls)
                store.close()
                name = "SQLite" if place == "sqlite" else "MariaDB"
                figures.append({"store": name, "urls": urls, "urls_per_s": round(rate), "again_per_s": round(again),
                                "peak_growth_kb": max(grown, grown_again)})
                print(f"| {name} | {urls:,} | {rate:,.0f} | {again:,.0f} | {max(grown, grown_again) / 1024:.1f} MB |")
        server.shutdown()
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
