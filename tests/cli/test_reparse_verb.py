"""`batchd reparse` as a user types it (cli/reparse_verb.py): after an archived crawl on an SQLite store, the verb
reparses it in its own process and prints the responses replayed, the items stored and the requests not archived;
what it refuses is one line and its exit code."""
import os

import pytest

from batchd.cli.main import main
from batchd.errors import ExitCode
from harness import next_batch, spider_factory
from spiders.reparsing import ShopPages

SPIDER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "spiders", "reparsing.py")


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_verb_reparses_and_says_what_it_replayed_stored_and_skipped(backend, site, tmp_path, monkeypatch, capsys,
                                                                        caplog):
    archive = {"ARCHIVE": "warc", "ARCHIVE_PATH": str(tmp_path / "archive")}
    backend.create_tasks([site.url("/page/1"), site.url("/page/2")])
    next_batch(backend, spider_factory(backend, ShopPages, **archive))
    monkeypatch.chdir(tmp_path)
    for name, value in backend.env(**archive).items():
        monkeypatch.setenv(name, value)
    hits = site.hits("/page/1") + site.hits("/page/2") + site.hits("/page/3")
    capsys.readouterr()

    assert main(["reparse", f"{SPIDER}:ShopPagesCorrected", "--batch", "1"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "batch 2, a reparse of batch 1: 2 tasks, 2 done, 0 failed (clean)" in out
    assert "responses replayed     3" in out and "items stored           3" in out
    assert "requests not archived  1 (skipped; --fetch-missing fetches them)" in out
    assert site.hits("/page/1") + site.hits("/page/2") + site.hits("/page/3") == hits

    assert main(["status", f"{SPIDER}:ShopPagesCorrected"]) == ExitCode.OK
    assert "batch    2 (reparse of 1) opened" in capsys.readouterr().out
    assert main(["quality", f"{SPIDER}:ShopPagesCorrected"]) == ExitCode.OK
    assert capsys.readouterr().out.startswith("batch 2 (a reparse of batch 1): clean, 0 flags (baseline: the median "
                                              "of batches 1)")

    assert main(["reparse", f"{SPIDER}:ShopPagesCorrected", "--batch", "9"]) == ExitCode.FAILURE
    assert main(["reparse", f"{SPIDER}:ShopPagesCorrected", "--host", "127.0.0.1"]) == ExitCode.CONFIG
    assert "batch 9 of crawl_task was never opened" in caplog.text and "set BATCH_TASK_HOST_FIELD" in caplog.text
