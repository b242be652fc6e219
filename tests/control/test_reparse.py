"""`batchd reparse` (control/reparse.py) on real parts: a real batch run with ARCHIVE = "warc" against the test site,
then the spider corrected (one more field, and a follow-up request the crawl never made) and the batch reparsed:
its items updated with no request reaching the site, on every store; a revisit followed to the earlier batch's body;
--fetch-missing; and under the daemon, the reparse queued for the workers."""
import logging

import pytest

from batchd.control.reparse import NoSuchBatch, ReparseFigures, reparse
from batchd.control.actions import BatchStillOpen
from batchd.errors import ConfigError
from batchd.model import BatchOpening
from harness import InProcessBatch, next_batch, quality_in_full, spider_factory, wait_for
from spiders.reparsing import ShopPages, ShopPagesCorrected

PAGES = 3


def archived(tmp_path, **settings) -> dict:
    return {"ARCHIVE": "warc", "ARCHIVE_PATH": str(tmp_path / "archive"), **settings}


def crawl(backend, site, tmp_path, paths, **settings) -> dict:
    """Batch 1 of ShopPages over `paths`, archived; the site's hits by path after it."""
    backend.create_tasks([site.url(path) for path in paths])
    next_batch(backend, spider_factory(backend, ShopPages, **archived(tmp_path, **settings)))
    return hits(site, paths)


def hits(site, paths) -> dict:
    return {path: site.hits(path) for path in paths + [f"/page/{PAGES + 1}"]}


def corrected(backend, tmp_path, **settings):
    return ShopPagesCorrected(batch_store=backend.store(), settings=backend.settings(**archived(tmp_path, **settings)))


def test_a_corrected_spider_reparses_a_batch_with_no_request_to_the_site(backend, site, tmp_path):
    paths = [f"/page/{n}" for n in range(1, PAGES + 1)]
    before = crawl(backend, site, tmp_path, paths)
    seen = []
    figures = reparse(corrected(backend, tmp_path).runtime, 1, on_progress=seen.append)
    # Each page and its next link (the next task's page, archived), but the last one's (never fetched: skipped).
    assert figures == ReparseFigures(batch_id=2, reparse_of=1, total=PAGES, done=PAGES, failed=0,
                                     replayed=2 * PAGES - 1, stored=2 * PAGES - 1, not_archived=1, fetched=0,
                                     outcome="clean")
    assert hits(site, paths) == before                   # nothing reached the site
    assert seen and seen[-1].batch_id == 2
    items = [item for item in backend.items() if "text" in item]
    assert sorted((item["url"], item["text"], item["replayed"]) for item in items) == [
        (site.url(path), path.rsplit("/", 1)[1], True) for path in paths]
    record = backend.records()[-1]
    assert BatchOpening.from_json(record["opening"]).reparse_of == 1 and record["outcome"] == "clean"
    assert quality_in_full(record)["compared"] == [1]        # judged against the batch it parsed again


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_reparse_follows_a_revisit_to_the_body_an_earlier_batch_kept(backend, site, tmp_path):
    paths = [f"/versioned/{n}" for n in range(1, PAGES + 1)]
    crawl(backend, site, tmp_path, paths, REVALIDATE=True)
    site.versions[1] = 1         # one page changed; the others answer 304: revisits of batch 1's responses
    next_batch(backend, spider_factory(backend, ShopPages, **archived(tmp_path, REVALIDATE=True)))
    assert site.status_counts(304) == PAGES - 1
    before = hits(site, paths)
    figures = reparse(corrected(backend, tmp_path, REVALIDATE=True).runtime, 2)
    assert (figures.reparse_of, figures.done, figures.replayed, figures.stored) == (2, PAGES, PAGES, PAGES)
    assert hits(site, paths) == before
    texts = sorted((item["url"], item["text"]) for item in backend.items() if "text" in item)
    assert texts == [(site.url(path), path[-1]) for path in paths]    # the unchanged pages too, from batch 1's bodies


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
def test_fetch_missing_fetches_what_the_archive_lacks(backend, site, tmp_path, caplog):
    paths = [f"/page/{n}" for n in range(1, PAGES + 1)]
    before = crawl(backend, site, tmp_path, paths)
    figures = reparse(corrected(backend, tmp_path).runtime, 1, fetch_missing=True)
    assert (figures.replayed, figures.fetched, figures.not_archived, figures.stored) == (2 * PAGES - 1, 1, 0, 2 * PAGES)
    after = hits(site, paths)
    assert [after[path] - before[path] for path in paths] == [0] * PAGES           # the archived pages: not fetched
    assert after[f"/page/{PAGES + 1}"] == before[f"/page/{PAGES + 1}"] + 1          # the next links: fetched


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
def test_a_task_whose_page_the_archive_lacks_fails_naming_the_batch(backend, site, tmp_path):
    paths = [f"/page/{n}" for n in range(1, PAGES + 1)]
    crawl(backend, site, tmp_path, paths)
    backend.add_task(site.url("/page/9"))         # added after the crawl: not in its archive
    figures = reparse(corrected(backend, tmp_path).runtime, 1)
    assert (figures.done, figures.failed, figures.outcome) == (PAGES, 1, "failed")
    failure, = [f for f in backend.failures().values() if f["batch_id"] == 2]
    assert failure["reason"].startswith("not in the archive of batch 1") and failure["url"] == site.url("/page/9")


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
def test_what_a_reparse_refuses(backend, site, tmp_path):
    paths = ["/page/1"]
    crawl(backend, site, tmp_path, paths)
    runtime = corrected(backend, tmp_path).runtime
    with pytest.raises(NoSuchBatch):
        reparse(runtime, 7)
    with pytest.raises(ConfigError, match="BATCH_TASK_HOST_FIELD"):
        reparse(runtime, 1, host="127.0.0.1")
    with pytest.raises(ConfigError, match="has no archive"):
        reparse(corrected(backend, tmp_path / "elsewhere").runtime, 1)
    runtime.backend.leases.set_paused(1.0)
    with pytest.raises(BatchStillOpen, match="paused"):
        reparse(runtime, 1)
    runtime.backend.leases.set_paused(None)
    backend.reopen_last_batch()
    with pytest.raises(BatchStillOpen, match="still open"):
        reparse(runtime, 1)


def test_under_the_daemon_the_reparse_is_queued_for_its_workers(mysql_backend, site, tmp_path, caplog):
    paths = [f"/page/{n}" for n in range(1, PAGES + 1)]
    before = crawl(mysql_backend, site, tmp_path, paths)
    with InProcessBatch(spider_factory(mysql_backend, ShopPagesCorrected, **archived(tmp_path)), workers=2) as daemon:
        wait_for(lambda: daemon.loops[0][3].served, message="the daemon's master patrolling")
        with caplog.at_level(logging.INFO, logger="batchd"):
            figures = reparse(corrected(mysql_backend, tmp_path).runtime, 1)
    assert "the reparse is queued for its workers" in caplog.text
    assert (figures.batch_id, figures.done, figures.replayed, figures.not_archived) == (2, PAGES, 2 * PAGES - 1, 1)
    assert hits(site, paths) == before
    workers = [loop for name, _, _, loop in daemon.loops if name.startswith("worker")]
    assert sum(worker.ledger.totals()["done"] for worker in workers) == PAGES       # they did it, not this process
