"""Items in the spider's own table, flushes that fail, failed_items.jsonl and `batchd retry --items`."""
import json
import logging
import os
import subprocess
import sys


from batchd.failed_items import FailedItemsFile
from batchd.store.base import ItemRow
from batchd.task import TaskState
from harness import InProcessBatch, wait_for
from spiders.seed import CrawlTask

D = TaskState.DONE

ITEM_TABLE = """CREATE TABLE `crawl_item` (
  `url` VARCHAR(500) NOT NULL,
  `title` VARCHAR(100),
  `extra` VARCHAR(10) NOT NULL,
  PRIMARY KEY (`url`)
)"""


class ColumnsSpider(CrawlTask):
    __item_table__ = "crawl_item"


class BadKeySpider(ColumnsSpider):
    def parse(self, request, response, task):
        yield {"url": task["url"], "title": "t", "extra": "x", "colour": "red"}
        self.update_task(task["id"], ok=True)


def run_until_settled(backend, cls, **settings):
    with InProcessBatch(lambda: cls(batch_store=backend.store(), settings=backend.settings(**settings))):
        wait_for(lambda: set(backend.states().values()) <= {D, TaskState.FAILED}, message="tasks settled")


def lines(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def retry_items(backend, path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHD_")}
    env.update(BATCHD_MYSQL_URL=backend.mysql_url, BATCHD_CONFIG=os.devnull)
    return subprocess.run([sys.executable, "-m", "batchd", "retry", "--items", path], env=env,
                          capture_output=True, text=True, timeout=60)


def test_items_go_to_the_spiders_table_as_upserts(mysql_backend, site):
    mysql_backend.create_tasks([site.url("/page/1"), site.url("/page/2")])
    mysql_backend.sql(ITEM_TABLE.replace("NOT NULL,\n  PRIMARY", "NOT NULL DEFAULT '',\n  PRIMARY"))
    run_until_settled(mysql_backend, ColumnsSpider)
    mysql_backend.sql("UPDATE `crawl_task` SET `batch_status` = 0")
    run_until_settled(mysql_backend, ColumnsSpider)     # the re-run updates the same rows
    rows = mysql_backend.sql("SELECT `url`, `title` FROM `crawl_item` ORDER BY `url`")
    assert rows == ((site.url("/page/1"), "Title 1"), (site.url("/page/2"), "Title 2"))


def test_a_failed_flush_is_dumped_then_replayed(mysql_backend, site, caplog):
    urls = [site.url(f"/page/{i}") for i in range(1, 4)]
    mysql_backend.create_tasks(urls)
    mysql_backend.sql(ITEM_TABLE)                  # `extra` NOT NULL without default: every insert fails
    with caplog.at_level(logging.WARNING, logger="batchd"):
        run_until_settled(mysql_backend, ColumnsSpider)
    assert set(mysql_backend.states().values()) == {D}, "dumped items count as landed"
    assert mysql_backend.sql("SELECT COUNT(*) FROM `crawl_item`") == ((0,),)
    dumped = lines(mysql_backend.failed_items_path)
    assert sorted(d["item"]["url"] for d in dumped) == sorted(urls)
    assert all(d["table"] == "crawl_item" and "extra" in d["error"] for d in dumped)
    assert "replay them with: batchd retry --items" in caplog.text

    mysql_backend.sql("ALTER TABLE `crawl_item` MODIFY `extra` VARCHAR(10) NOT NULL DEFAULT ''")
    done = retry_items(mysql_backend, mysql_backend.failed_items_path)
    assert done.returncode == 0, done.stderr
    assert mysql_backend.sql("SELECT COUNT(*) FROM `crawl_item`") == ((3,),)
    assert not os.path.exists(mysql_backend.failed_items_path) or lines(mysql_backend.failed_items_path) == []


def test_replay_keeps_what_still_cannot_be_stored(mysql_backend, failed_items_path):
    mysql_backend.create_tasks(["http://x.invalid/1"])
    mysql_backend.sql(ITEM_TABLE.replace("NOT NULL,\n  PRIMARY", "NOT NULL DEFAULT '',\n  PRIMARY"))
    good = FailedItemsFile.record("crawl_item", "columns", ItemRow(1, 1, 0, 0, {"url": "u1", "title": "a"}), "x")
    bad = FailedItemsFile.record("no_such_table", "columns", ItemRow(1, 2, 0, 0, {"url": "u2"}), "x")
    FailedItemsFile(failed_items_path).append([good, bad])
    done = retry_items(mysql_backend, failed_items_path)
    assert done.returncode == 1
    assert mysql_backend.sql("SELECT `url` FROM `crawl_item`") == (("u1",),)
    kept = lines(failed_items_path)
    assert [k["item"]["url"] for k in kept] == ["u2"] and "no_such_table" in kept[0]["error"]
    assert [name for name in os.listdir(os.path.dirname(failed_items_path))] == ["failed_items.jsonl"]


def test_an_item_key_that_is_not_a_column_is_dumped_naming_the_key(mysql_backend, site, caplog):
    mysql_backend.create_tasks([site.url("/page/1")])
    mysql_backend.sql(ITEM_TABLE)
    with caplog.at_level(logging.ERROR, logger="batchd"):
        run_until_settled(mysql_backend, BadKeySpider)
    assert "item key 'colour' is not a column of item table `crawl_item`" in caplog.text
    assert [d["item"]["colour"] for d in lines(mysql_backend.failed_items_path)] == ["red"]
    assert mysql_backend.states() == {1: D}


def test_dumped_items_keep_their_types(failed_items_path):
    from datetime import datetime
    from decimal import Decimal
    row = ItemRow(3, 7, 1, 2, {"at": datetime(2026, 1, 2, 3, 4, 5), "price": Decimal("9.99"), "raw": b"\x00\x01"})
    FailedItemsFile(failed_items_path).append([FailedItemsFile.record("t", "columns", row, "boom")])
    with open(failed_items_path, encoding="utf-8") as f:
        _, table, kind, parsed = FailedItemsFile.parse(f.readline())
    assert (table, kind, parsed) == ("t", "columns", row)


def test_items_neither_stored_nor_dumped_keep_their_tasks_unwritten(mysql_backend, site, caplog):
    """The database refuses the items and the disk refuses the dump: the tasks must not be done."""
    mysql_backend.create_tasks([site.url("/page/1"), site.url("/page/2")])
    mysql_backend.sql(ITEM_TABLE)                  # every insert fails
    unwritable = "/dev/null/failed_items.jsonl"    # under a file: no directory can be made there
    factory = lambda: ColumnsSpider(batch_store=mysql_backend.store(), settings=mysql_backend.settings(
        FAILED_ITEMS_PATH=unwritable, STOP_TIMEOUT=3))
    with caplog.at_level(logging.ERROR, logger="batchd"):
        with InProcessBatch(factory):
            wait_for(lambda: "cannot append to /dev/null/failed_items.jsonl" in caplog.text, timeout=30,
                     message="the dump to fail")
    assert set(mysql_backend.states().values()) == {TaskState.PROCESSING}
    assert mysql_backend.sql("SELECT COUNT(*) FROM `crawl_item`") == ((0,),)
