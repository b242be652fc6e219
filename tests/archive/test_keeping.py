"""ARCHIVE_KEEP (issue 36, point 1): the master removes the folders of older batches as a batch opens, logging
each, but keeps one whose responses a kept batch's revisit records stand for."""
import logging
import os

import pytest

from batchd.archive.files import batch_folders
from batchd.archive.replay import ArchiveReplay
from batchd.config import load_settings
from harness import next_batch, spider_factory
from spiders.seed import CrawlTask

pytest.importorskip("warcio")


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
def test_old_folders_go_but_one_a_kept_revisit_stands_for(backend, site, tmp_path, caplog):
    options = dict(ARCHIVE="warc", ARCHIVE_PATH=str(tmp_path / "archive"), ARCHIVE_KEEP=1, REVALIDATE=True)
    settings = load_settings(backend.settings(**options), environ={})
    factory = spider_factory(backend, CrawlTask, **options)
    one, two = site.url("/versioned/1"), site.url("/versioned/2")
    backend.create_tasks([one, two])
    next_batch(backend, factory)                         # 1: both fetched whole
    site.versions.update({1: 1, 2: 1})
    next_batch(backend, factory)                         # 2: both changed, fetched whole again
    site.versions[2] = 2
    with caplog.at_level(logging.INFO, logger="batchd.archive"):
        third = next_batch(backend, factory)["id"]       # opens: 1 goes; 1 unchanged (304 -> 2), 2 changed
        next_batch(backend, factory)                     # opens: 2 stays, batch 3's revisit stands for it
    assert sorted(batch_folders(settings.archive_path(), "crawl_task")) == [2, 3, 4]
    removed = [r.getMessage() for r in caplog.records if "removed" in r.getMessage()]
    assert removed == [f"archive: batch 1's folder {os.path.join(settings.archive_path(), 'crawl_task', '00000001')} "
                       "removed (ARCHIVE_KEEP=1)"]
    replay = ArchiveReplay(settings, "crawl_task", third)
    assert (replay.find("GET", one).batch_id, replay.find("GET", two).batch_id) == (2, 3)
