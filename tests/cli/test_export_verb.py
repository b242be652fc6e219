"""`batchd export` on the command line (the table's choice on MySQL and SQLite, the rest on SQLite: tests/export/
runs the core on every store): the spider's table found, or the tables named when several hold rows; -o's
suffix picks the format, `-` is standard output; a bad --table, --batch or ITEM_BATCH_COLUMN is one line and
its exit code; `batchd check` says whether ITEM_BATCH_COLUMN fits the tables; `batchd status` shows the verb
where it shows the items."""
import json
import logging
import os

import pytest

from batchd.cli.main import main
from batchd.cli.status_text import EXPORT_HINT
from batchd.task import TaskState
from harness import InProcessBatch, spider_factory, wait_for
from spiders.exporting import REVIEWS, ReviewSpider
from procs import ROOT
from taskdb import SqliteBackend

SPIDER = os.path.join(ROOT, "tests", "spiders", "exporting.py") + ":ReviewSpider"


def crawl(backend, site, tmp_path, monkeypatch) -> str:
    """A batch of ReviewSpider over two pages, ITEM_BATCH_COLUMN on; the store's URL for --store."""
    backend.create_tasks([site.url("/page/1"), site.url("/page/2")])
    backend.create_table(REVIEWS)
    with InProcessBatch(spider_factory(backend, ReviewSpider, ITEM_BATCH_COLUMN="batch")):
        wait_for(lambda: set(backend.states().values()) == {TaskState.DONE}, message="every task done")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BATCHD_ITEM_BATCH_COLUMN", "batch")
    return backend.mysql_url if backend.kind == "mysql" else f"sqlite:///{backend.path}"


@pytest.fixture
def crawled(tmp_path, site, failed_items_path, monkeypatch):
    """crawl() into an SQLite store."""
    backend = SqliteBackend(tmp_path / "crawl.db", failed_items_path)
    yield crawl(backend, site, tmp_path, monkeypatch)
    backend.close()


def export(store, *args) -> int:
    return main(["export", SPIDER, "--store", store, *args])


def errors(caplog) -> list:
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]


def test_the_spiders_table_its_batch_and_the_format_of_the_file(shared_backend, site, tmp_path, monkeypatch, capsys,
                                                                 caplog):
    crawled = crawl(shared_backend, site, tmp_path, monkeypatch)
    # Its items are in two tables that both hold rows: it names them and asks for one.
    assert export(crawled) == 78
    assert errors(caplog) == ["the spider's items are in 2 tables: crawl_task_item, reviews; name one with --table"]
    assert export(crawled, "--table", "reviews", "--batch", "1", "-o", "-") == 0
    out, err = capsys.readouterr()
    assert sorted(json.loads(line)["product"] for line in out.splitlines()) == ["p1", "p2"]
    assert "exported 2 rows of batch 1 of table reviews to standard output as jsonl" in err
    assert export(crawled, "--table", "crawl_task_item", "-o", "items.csv") == 0
    assert (tmp_path / "items.csv").read_text(encoding="utf-8").splitlines()[0] == "url,title"
    # One of its tables holding rows: that one, without --table.
    shared_backend.sql("DELETE FROM reviews")
    assert export(crawled, "-o", "items.jsonl") == 0
    assert sorted(json.loads(line)["title"] for line in (tmp_path / "items.jsonl").read_text().splitlines()) == [
        "Title 1", "Title 2"]


@pytest.mark.parametrize("args, code, message", [
    (["--table", "nope"], 78, 'item table "nope" not found in SQLite file '),
    (["--table", "no pe"], 78, "--table: 'no pe' is not a valid table or column name"),
    (["--table", "reviews", "--batch", "9"], 1, "--batch 9: no such batch (the last is 1)"),
    (["--table", "reviews", "-o", "missing/items.jsonl"], 74, "-o missing/items.jsonl: cannot write there"),
])
def test_a_bad_table_batch_or_file_is_one_line(crawled, caplog, args, code, message):
    assert export(crawled, *args) == code
    assert len(errors(caplog)) == 1 and message in errors(caplog)[0]


def test_check_says_whether_item_batch_column_fits_the_tables(crawled, capsys, monkeypatch):
    assert main(["check", SPIDER, "--store", crawled]) == 0
    assert "OK    item batch  `batch` in reviews (ITEM_BATCH_COLUMN)" in capsys.readouterr().out
    monkeypatch.setenv("BATCHD_ITEM_BATCH_COLUMN", "batch_no")
    assert main(["check", SPIDER, "--store", crawled]) == 78
    assert "FAIL  item batch  item table `reviews` has no column `batch_no` (ITEM_BATCH_COLUMN)" in capsys.readouterr().out


def test_status_shows_the_verb_where_it_shows_the_items(crawled, capsys):
    assert main(["status", SPIDER, "--store", crawled]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines.index(EXPORT_HINT) == [n for n, line in enumerate(lines) if line.startswith("items    in")][0] + 1
