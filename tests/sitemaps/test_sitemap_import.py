"""Sitemaps into the task table (batchd/sitemaps/sitemap_import.py) on every store, from sitemaps a real HTTP
server serves on loopback: robots.txt's Sitemap: lines, an index, a gzipped sitemap; one task per new URL and
nothing again on a re-import; what is skipped counted by why; a newer lastmod makes a task due; SITEMAPS
imported by the master as a batch opens; memory that does not grow with the URLs imported."""
import gzip
import logging
import pathlib
import re
import time
from datetime import datetime, timezone

import pytest

from batchd.config import load_settings
from batchd.model import Revisit, TaskLayout
from batchd.service.lifecycle import StopFlag
from batchd.sitemaps import sitemap_import
from batchd.sitemaps.sitemap_import import import_sitemaps
from harness import make_master
from sitemap_texts import sitemap_index, urlset
from taskdb import SqliteBackend

LAYOUT = TaskLayout("crawl_task")


def task_urls(backend) -> list:
    if backend.kind == "memory":
        return sorted(row["url"] for row in backend.store().rows)
    return sorted(url for (url,) in backend.sql("SELECT url FROM crawl_task"))


def stamp(seconds_ago: float) -> str:
    return datetime.fromtimestamp(time.time() - seconds_ago, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_each_new_url_is_one_task_and_a_reimport_adds_only_the_new(backend, site, monkeypatch, caplog):
    backend.create_tasks([site.url("/shop/1")])
    monkeypatch.setattr(sitemap_import, "MOST_ENTRIES", 4)
    site.robots_txt = f"User-agent: *\nSitemap: {site.url('/files/index.xml')}\n"
    site.files["index.xml"] = sitemap_index([site.url("/files/shop.xml.gz"), site.url("/files/missing.xml")])
    # robots.txt named the index: its sitemaps may list any URL of the site; the 5th entry is over the limit
    site.files["shop.xml.gz"] = gzip.compress(urlset([site.url(f"/shop/{n}") for n in (1, 2, 3, 2, 5)]))
    # a sitemap given itself holds only URLs under its folder
    blog = [site.url("/files/blog/a"), site.url("/elsewhere/b"), site.url("/files/blog/with space")]
    site.files["blog/sitemap.xml"] = urlset(blog)
    given = [site.url("/robots.txt"), site.url("/files/blog/sitemap.xml")]
    with caplog.at_level(logging.INFO, logger="batchd"):
        report = import_sitemaps(load_settings({}), backend.store(), LAYOUT, given)
    assert (report.read, report.failed, report.seen, report.added, report.known) == (3, 1, 8, 3, 2)
    assert (report.outside, report.over_limits, report.bad) == (1, 1, 1)
    assert task_urls(backend) == sorted([site.url("/files/blog/a")] + [site.url(f"/shop/{n}") for n in (1, 2, 3)])
    assert f"sitemap '{site.url('/files/missing.xml')}': HTTP 404; the other sitemaps go on" in caplog.text
    assert ("3 sitemaps read (1 could not be read), 8 URLs seen: 3 tasks added to crawl_task, 2 already known "
            "(0 made due), skipped 1 outside their sitemap's path, 1 over the protocol's limits, 1 not task URLs"
            in caplog.text)

    site.files["blog/sitemap.xml"] = urlset(blog + [site.url("/files/blog/new")])
    again = import_sitemaps(load_settings({}), backend.store(), LAYOUT, given)
    assert (again.added, again.known) == (1, 5)
    assert len(task_urls(backend)) == 5


def test_a_newer_lastmod_makes_the_task_due(backend, site):
    """Tasks 1 and 2 were crawled 10 days ago and are next due in 20; task 1's page changed a day ago, 2's
    twenty days ago (before that crawl); 3 was never crawled (due anyway). The task table's URLs have no index:
    the load's own table finds their ids."""
    newer_lastmod_makes_due(backend, site)


def test_a_newer_lastmod_makes_the_task_due_through_an_index_of_the_urls(shared_backend, site):
    newer_lastmod_makes_due(shared_backend, site, url_index=True)


def newer_lastmod_makes_due(backend, site, url_index: bool = False) -> None:
    urls = [site.url(f"/files/p{n}") for n in (1, 2, 3)]
    backend.create_tasks(urls)
    if url_index:
        backend.sql(f"CREATE INDEX idx_url ON crawl_task (url{'(255)' if backend.kind == 'mysql' else ''})")
    store = backend.store()
    store.open(LAYOUT)
    day, now = 86400.0, time.time()
    store.schedule_revisits([Revisit(task_id=n, interval=30 * day, next_due=now + 20 * day, verdict="unchanged",
                                     batch_id=1) for n in (1, 2)])
    site.files["sitemap.xml"] = urlset(list(zip(urls, [stamp(day), stamp(20 * day), stamp(day)])))
    report = import_sitemaps(load_settings({"BATCH_MODE": "due"}), store, LAYOUT, [site.url("/files/sitemap.xml")])
    assert (report.added, report.known, report.made_due) == (0, 3, 1)
    revisits = {int(r.task_id): r.next_due for r in store.revisits([1, 2]).values()}
    assert revisits[1] <= time.time() < revisits[2] == pytest.approx(now + 20 * day)
    assert import_sitemaps(load_settings({"BATCH_MODE": "due"}), store, LAYOUT,
                           [site.url("/files/sitemap.xml")]).made_due == 0      # due already


def test_the_master_imports_sitemaps_as_a_batch_opens(backend, site, caplog):
    backend.create_tasks([site.url("/files/old")])
    site.files["sitemap.xml"] = urlset([site.url("/files/old"), site.url("/files/new")])
    master, _ = make_master(backend, SITEMAPS=[site.url("/files/sitemap.xml"), site.url("/files/gone.xml")])
    with caplog.at_level(logging.INFO, logger="batchd"):
        master.patrol(StopFlag())
    assert task_urls(backend) == [site.url("/files/new"), site.url("/files/old")]
    assert f"sitemap '{site.url('/files/gone.xml')}': HTTP 404; the other sitemaps go on" in caplog.text
    assert len(backend.records()) == 1 and set(backend.states()) == {1, 2}


def resident_kb(field: str = "VmRSS") -> int:
    return int(re.search(rf"{field}:\s+(\d+)", pathlib.Path("/proc/self/status").read_text()).group(1))


def test_memory_does_not_grow_with_the_urls_imported(site, tmp_path, failed_items_path):
    """100,000 URLs (two gzipped sitemaps of the protocol's 50,000, in an index) into SQLite: the process's peak
    resident memory grows by less than half of what holding the URLs alone takes (measured after, the same
    way): the import holds a chunk and one parse at a time, not the URLs."""
    backend = SqliteBackend(tmp_path / "batchd.db", failed_items_path)
    pages = [[site.url(f"/files/big/{part}/{n}/{'x' * 100}") for n in range(50_000)] for part in range(2)]
    for part, urls in enumerate(pages):
        site.files[f"big/{part}.xml.gz"] = gzip.compress(urlset(urls), compresslevel=1)
    site.files["big/index.xml"] = sitemap_index([site.url(f"/files/big/{part}.xml.gz") for part in range(2)])
    pages = None
    store = backend.store()
    try:
        before = resident_kb()
        pathlib.Path("/proc/self/clear_refs").write_text("5")      # the peak (VmHWM) starts again from now
        report = import_sitemaps(load_settings({}), store, LAYOUT, [site.url("/files/big/index.xml")])
        grown = resident_kb("VmHWM") - before
    finally:
        backend.close()
    assert report.added == 100_000
    before = resident_kb()
    held = {f"{site.url('/files/big/0/')}{n}/{'x' * 100}" for n in range(100_000)}
    holding = resident_kb() - before
    assert len(held) == 100_000 and grown < holding / 2, f"grew {grown} KB; the URLs alone take {holding} KB"
