"""Items in the spider's own table, flushes that fail, failed_items.jsonl and `batchd retry --items`."""
import json
import logging
import os
import subprocess
import sys


from batchd.worker.dumps import FailedItemsFile
from batchd.model import ItemRow
from batchd.task import TaskState
from taskdb import bring_back
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
    for task_id in (1, 2):
        bring_back(mysql_backend, task_id)
    run_until_settled(mysql_backend, ColumnsSpider)     # the re-run updates the same rows
    rows = mysql_backend.sql("SELECT `url`, `title` FROM `crawl_item` ORDER BY `url`")
    assert rows == ((site.url("/page/1"), "Title 1"), (site.url("/page/2"), "Title 2"))


class LongTitleSpider(ColumnsSpider):
    """Task 7's title is longer than the column: MariaDB (strict mode) refuses that one row."""

    def parse(self, request, response, task):
        yield {"url": task["url"], "title": "x" * 300 if task["id"] == 7 else f"t{task['id']}", "extra": "e"}
        self.update_task(task["id"], ok=True)


def test_an_item_the_database_refuses_fails_its_task_alone(mysql_backend, site, caplog):
    mysql_backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 31)])
    mysql_backend.sql(ITEM_TABLE)
    with caplog.at_level(logging.INFO, logger="batchd"):
        # One flush holds every task's item: the refused one must not take the 29 others with it.
        run_until_settled(mysql_backend, LongTitleSpider, ITEM_FLUSH_SIZE=1000, ITEM_FLUSH_INTERVAL=1.0)
    states = mysql_backend.states()
    assert states.pop(7) == TaskState.FAILED and set(states.values()) == {D}
    assert mysql_backend.sql("SELECT COUNT(*) FROM `crawl_item`") == ((29,),)
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1 and refused[0].startswith("task 7 failed: item 0 of its request 0 was refused by "
                                                       "`crawl_item`: key 'title': ")
    assert "Data too long" in refused[0]
    assert not os.path.exists(mysql_backend.failed_items_path), "a refused item fails its task; it is not dumped"


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


def test_an_item_key_that_is_not_a_column_fails_its_task_where_it_is_yielded(mysql_backend, site, caplog):
    mysql_backend.create_tasks([site.url("/page/1"), site.url("/page/2")])
    mysql_backend.sql(ITEM_TABLE)
    with caplog.at_level(logging.ERROR, logger="batchd"):
        run_until_settled(mysql_backend, BadKeySpider)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert sorted(errors) == [f"task {i} failed: item key 'colour' is not a column of item table `crawl_item`"
                              for i in (1, 2)]
    assert mysql_backend.states() == {1: TaskState.FAILED, 2: TaskState.FAILED}
    assert not os.path.exists(mysql_backend.failed_items_path)


class OddValueSpider(CrawlTask):
    """Task 1 yields a set, task 2 a NaN, task 3 a good item: the default item table is a JSON document."""

    ODD = {1: {"tags": {"a", "b"}}, 2: {"price": float("nan")}, 3: {"nested": {"sizes": [1, float("inf")]}}}

    def parse(self, request, response, task):
        yield {"url": task["url"], **self.ODD.get(task["id"], {"title": "fine"})}
        self.update_task(task["id"], ok=True)


def test_a_value_the_destination_cannot_store_fails_its_task_at_once_and_the_worker_carries_on(backend, site,
                                                                                                caplog):
    backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 5)])
    with caplog.at_level(logging.ERROR, logger="batchd"):
        run_until_settled(backend, OddValueSpider)
    assert backend.states() == {1: TaskState.FAILED, 2: TaskState.FAILED, 3: TaskState.FAILED, 4: D}
    assert [item["title"] for item in backend.items()] == ["fine"]
    errors = sorted(r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)
    assert errors == ["task 1 failed: item key 'tags' holds a set, which a JSON document cannot store",
                      "task 2 failed: item key 'price' holds nan, which the database cannot store",
                      "task 3 failed: item key 'nested.sizes[1]' holds inf, which the database cannot store"]
    assert "Traceback" not in caplog.text and "died" not in caplog.text


def test_dumped_items_keep_their_types(failed_items_path):
    from datetime import datetime
    from decimal import Decimal
    row = ItemRow(3, 7, 1, 2, {"at": datetime(2026, 1, 2, 3, 4, 5), "price": Decimal("9.99"), "raw": b"\x00\x01"})
    FailedItemsFile(failed_items_path).append([FailedItemsFile.record("t", "columns", row, "boom")])
    with open(failed_items_path, encoding="utf-8") as f:
        _, table, kind, parsed = FailedItemsFile.parse(f.readline())
    assert (table, kind, parsed) == ("t", "columns", row)
