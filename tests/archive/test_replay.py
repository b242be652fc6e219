"""The archive on every store (issue 36, point 1): two batches of re-crawled pages, the first fetched whole,
the second revalidated (304s); the reader finds every page of either, the second's through its revisit records
to the first's folder, and warcio checks and indexes every file."""
import glob
import io
import os
from contextlib import redirect_stdout

import pytest

import batchd as mw

from batchd.archive.replay import ArchiveReplay
from batchd.config import load_settings
from harness import next_batch, spider_factory
from spiders.seed import CrawlTask

warcio_checker = pytest.importorskip("warcio.checker")
warcio_indexer = pytest.importorskip("warcio.indexer")


def archive_settings(backend, tmp_path, **more):
    return load_settings(backend.settings(ARCHIVE="warc", ARCHIVE_PATH=str(tmp_path / "archive"), REVALIDATE=True, **more), environ={})


def crawl(backend, tmp_path) -> int:
    factory = spider_factory(backend, CrawlTask, ARCHIVE="warc", ARCHIVE_PATH=str(tmp_path / "archive"),
                             REVALIDATE=True)
    return next_batch(backend, factory)["id"]


def warcio_says(command: str, path: str) -> tuple:
    """(exit value, what it printed) of `warcio check` or `warcio index` on one file."""
    out = io.StringIO()
    with redirect_stdout(out):
        if command == "check":
            code = warcio_checker.Checker(type("Args", (), {"inputs": [path], "verbose": False})()).process_all()
        else:
            warcio_indexer.Indexer("warc-type,warc-target-uri,offset,length", [path], out).process_all()
            code = 0
    return code, out.getvalue()


def test_two_batches_are_archived_and_a_304_is_replayed_from_the_batch_that_fetched_it(backend, site, tmp_path):
    urls = [site.url(f"/versioned/{n}") for n in (1, 2, 3)]
    backend.create_tasks(urls)
    first = crawl(backend, tmp_path)
    second = crawl(backend, tmp_path)
    assert (site.status_counts(200), site.status_counts(304)) == (3, 3)
    settings = archive_settings(backend, tmp_path)

    replay = ArchiveReplay(settings, "crawl_task", second)
    try:
        for n, url in enumerate(urls, 1):
            page = replay.find("GET", url)
            assert page is not None and page.revisit and page.batch_id == first
            assert (page.status, page.url, page.rendered) == (200, url, False)
            assert f"Title {n} v0".encode() in page.body
            assert ("ETag", f'"{n}-0"') in page.headers
        assert replay.find("GET", site.url("/versioned/9")) is None
        assert replay.find("POST", urls[0]) is None
    finally:
        replay.close()
    files = sorted(glob.glob(os.path.join(settings.archive_path(), "*", "*", "*.warc.gz")))
    assert len(files) == 2 and not glob.glob(os.path.join(settings.archive_path(), "*", "*", "*.open"))
    for path in files:
        code, said = warcio_says("check", path)
        assert code == 0, said
        code, listed = warcio_says("index", path)
        types = [line.split('"warc-type": "')[1].split('"')[0] for line in listed.splitlines()]
        assert types.count("request") == 3 and types.count("warcinfo") == 1
        assert types.count("response" if path == files[0] else "revisit") == 3


class Rendered(CrawlTask):
    def task_requests(self, task):
        yield mw.Request(task["url"], callback=self.parse, render=True, render_wait="h1.title")


@pytest.mark.skipif(not os.path.exists("/usr/bin/chromedriver"), reason="apt install chromium chromium-driver")
@pytest.mark.parametrize("shared_backend", ["sqlite"], indirect=True)      # (every store: the test above)
def test_a_rendered_page_is_archived_as_its_dom_and_replayed_as_the_callback_read_it(shared_backend, site, tmp_path):
    url = site.url("/js/1")
    shared_backend.create_tasks([url])
    options = dict(ARCHIVE="warc", ARCHIVE_PATH=str(tmp_path / "archive"))
    batch = next_batch(shared_backend, spider_factory(shared_backend, Rendered, **options))["id"]
    page = ArchiveReplay(load_settings(shared_backend.settings(**options), environ={}), "crawl_task", batch).find(
        "GET", url)
    assert (page.status, page.url, page.rendered) == (200, url, True)
    assert b'<h1 class="title">Title 1</h1>' in page.body          # what the script wrote: the DOM, not the shell
    [path] = glob.glob(os.path.join(str(tmp_path / "archive"), "*", "*", "*.warc.gz"))
    code, said = warcio_says("check", path)
    assert code == 0, said
    assert [line.split('"warc-type": "')[1].split('"')[0] for line in warcio_says("index", path)[1].splitlines()] \
        == ["warcinfo", "conversion"]
