"""failed_items.jsonl and its replay, against real refusals: MariaDB's JSON column refusing NaN, a
strict-mode INT column refusing text, a torn line, a server stopped mid-replay, a full tmpfs and a
read-only one (root ignores file modes: only a real mount refuses a write), and `batchd retry
--items` end to end for its exit codes and its one-line errors."""
import json
import logging
import os
import subprocess
import sys


from batchd.worker.dumps import REFUSALS_LOGGED, FailedItemsFile, ReplayResult
from batchd.model import COLUMNS_ITEM_KIND, DEFAULT_ITEM_KIND, ItemRow
from servers import fill_disk
from spiders.seed import CrawlTask

NAN = float("nan")
DEFAULT_TABLE = "crawl_task_item"
COLUMN_TABLE = """CREATE TABLE `crawl_item` (
  `url` VARCHAR(200) NOT NULL,
  `n` INT NOT NULL,
  PRIMARY KEY (`url`)
)"""


class Odd:
    """A value no codec knows, with a repr of its own."""

    def __repr__(self):
        return "Odd(42)"


class BrokenRepr:
    def __repr__(self):
        raise RuntimeError("no repr for you")


# -- helpers
def item_store(backend):
    """The store, with the seed spider's default item table created as a worker creates it."""
    spider = CrawlTask(batch_store=backend.store(), settings=backend.settings())
    spider.runtime.store.open(spider.runtime.layout)
    return spider.runtime.store


def record(task_id, item=None, table=DEFAULT_TABLE, kind=DEFAULT_ITEM_KIND):
    row = ItemRow(batch_id=1, task_id=task_id, request_seq=0, item_seq=0,
                  data={"title": f"Title {task_id}"} if item is None else item)
    return FailedItemsFile.record(table, kind, row, "OperationalError: the first flush failed")


def lines(path):
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def files_beside(path):
    """The failed-items files beside `path`: itself, its claimed files, its .torn."""
    name = os.path.basename(path)
    return sorted(n for n in os.listdir(os.path.dirname(path)) if n.startswith(name))


def stored_titles(backend):
    return sorted(item["title"] for item in backend.items())


def retry_items(backend, path):
    """`batchd retry --items PATH` to its end, with the backend's settings in the environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHD_")}
    env.update(backend.env(), BATCHD_CONFIG=os.devnull)
    return subprocess.run([sys.executable, "-m", "batchd", "retry", "--items", path], env=env,
                          capture_output=True, text=True, timeout=120)


def no_traceback(result):
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result.stderr.strip().splitlines()


class CountingStore:
    """The real store, counting save_items calls (one transaction, one INSERT each) for the figures;
    `after_stored(calls)` runs after each call the store took."""

    def __init__(self, store, after_stored=None):
        self.store, self.calls, self.after_stored = store, 0, after_stored

    def save_items(self, table, kind, rows, key=()):
        self.calls += 1
        self.store.save_items(table, kind, rows, key)
        if self.after_stored:
            self.after_stored(self.calls)

    def __getattr__(self, name):
        return getattr(self.store, name)


# -- one bad item no longer poisons its group
def test_a_nan_item_is_kept_alone_and_the_29_others_are_stored(mysql_backend, caplog):
    """The operator's file: an older worker dumped a whole flush of 30 tasks because one item held a
    NaN. The flush's statement is one multi-row INSERT ... ON DUPLICATE KEY UPDATE; `item` is a
    LONGTEXT with CHECK (json_valid(`item`)), NaN is not JSON, so the server refuses the whole
    statement (error 4025), and a replay that resends the group can never store any of it."""
    mysql_backend.create_tasks(["http://x.invalid/1"])
    store = CountingStore(item_store(mysql_backend))
    nan_task = 17
    failed = FailedItemsFile(mysql_backend.failed_items_path)
    failed.append([record(t, {"title": f"Title {t}", "score": NAN if t == nan_task else 1.5}) for t in range(1, 31)])
    with caplog.at_level(logging.INFO, logger="batchd"):
        result = failed.replay(store)
    assert result == ReplayResult(stored=29, kept=1)
    assert stored_titles(mysql_backend) == sorted(f"Title {t}" for t in range(1, 31) if t != nan_task)
    [kept] = lines(failed.path)
    assert kept["task_id"] == nan_task and kept["item"]["score"] != kept["item"]["score"]
    assert "(4025, 'CONSTRAINT `crawl_task_item.item` failed for" in kept["error"]
    refusals = [r.getMessage() for r in caplog.records if "refused by" in r.getMessage()]
    assert len(refusals) == 1 and refusals[0].startswith(f"item of task {nan_task} refused by `{DEFAULT_TABLE}`")
    assert "4025" in refusals[0]
    assert "29 items stored, 1 kept for the next retry, 0 moved aside" in caplog.text
    assert store.calls == 11, "1 for the group, then 2 per halving down to the bad item: 30, 15, 7, 3, 2, 1"
    assert files_beside(failed.path) == ["failed_items.jsonl"]


def test_a_column_table_keeps_only_the_values_its_columns_refuse(mysql_backend, caplog):
    mysql_backend.create_tasks(["http://x.invalid/1"])
    mysql_backend.sql(COLUMN_TABLE)
    values = {task_id: task_id * 10 for task_id in range(1, 11)}
    values[4] = "many"      # strict mode: Incorrect integer value (1366)
    values[8] = NAN         # mysqlclient refuses NaN before sending (ProgrammingError)
    failed = FailedItemsFile(mysql_backend.failed_items_path)
    failed.append([record(t, {"url": f"u{t}", "n": n}, table="crawl_item", kind=COLUMNS_ITEM_KIND)
                   for t, n in values.items()])
    store = CountingStore(mysql_backend.store())
    with caplog.at_level(logging.INFO, logger="batchd"):
        result = failed.replay(store, batch_size=500)
    assert result == ReplayResult(stored=8, kept=2)
    assert mysql_backend.sql("SELECT COUNT(*) FROM `crawl_item`") == ((8,),)
    kept = {k["task_id"]: k["error"] for k in lines(failed.path)}
    assert set(kept) == {4, 8}
    assert "Incorrect integer value: 'many' for column" in kept[4] and "at row 1" in kept[4]
    assert "nan can not be used with MySQL" in kept[8]
    assert "item of task 4 refused by `crawl_item`" in caplog.text
    assert "item of task 8 refused by `crawl_item`" in caplog.text
    assert store.calls == 13, "10 items, 2 refused: 13 statements (item by item would be 10, all at once 1)"

    mysql_backend.sql("ALTER TABLE `crawl_item` MODIFY `n` VARCHAR(10) NOT NULL")   # the operator's fix
    assert failed.replay(mysql_backend.store()) == ReplayResult(stored=1, kept=1)
    assert [k["task_id"] for k in lines(failed.path)] == [8]         # NaN: refused by the driver itself


def test_every_refusal_is_logged_up_to_a_cap_then_counted(mysql_backend, caplog):
    mysql_backend.create_tasks(["http://x.invalid/1"])
    store = item_store(mysql_backend)
    bad = REFUSALS_LOGGED + 5
    failed = FailedItemsFile(mysql_backend.failed_items_path)
    failed.append([record(t, {"title": f"Title {t}", "score": NAN}) for t in range(1, bad + 1)])
    with caplog.at_level(logging.INFO, logger="batchd"):
        result = failed.replay(store)
    assert result == ReplayResult(kept=bad)
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "refused by" in m]) == REFUSALS_LOGGED
    assert "5 more items refused; each keeps its reason in the `error` field of" in caplog.text
    assert len(lines(failed.path)) == bad


# -- torn lines
def test_a_torn_line_is_moved_aside_once(backend, caplog):
    backend.create_tasks(["http://x.invalid/1"])
    store = item_store(backend)
    failed = FailedItemsFile(backend.failed_items_path)
    failed.append([record(1), record(2)])
    with open(failed.path, "ab") as f:
        f.write(b'{"table": "crawl_task_item", "kind": "def')    # a crash in the middle of an append
    failed.append([record(3)])                                   # goes on a line of its own
    with open(failed.path, "ab") as f:
        f.write(b"not json at all\n[1, 2]\n\n")
    with caplog.at_level(logging.INFO, logger="batchd"):
        result = failed.replay(store)
    assert result == ReplayResult(stored=3, moved_aside=3)
    assert stored_titles(backend) == ["Title 1", "Title 2", "Title 3"]
    with open(failed.torn_path, "rb") as f:
        assert f.read() == b'{"table": "crawl_task_item", "kind": "def\nnot json at all\n[1, 2]\n'
    assert "3 unreadable lines of" in caplog.text and f"moved aside to {failed.torn_path}" in caplog.text
    assert "3 items stored, 0 kept for the next retry, 3 moved aside" in caplog.text
    assert files_beside(failed.path) == ["failed_items.jsonl.torn"]

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="batchd"):
        assert failed.replay(store) == ReplayResult()
    assert f"nothing to replay in {failed.path}" in caplog.text
    assert os.path.getsize(failed.torn_path) == len(b'{"table": "crawl_task_item", "kind": "def\nnot json at all\n'
                                                    b'[1, 2]\n')


# -- an outage in the middle of a replay
def test_an_outage_mid_replay_puts_back_what_was_not_stored(private_mysql, caplog):
    db, backend = private_mysql
    backend.create_tasks(["http://x.invalid/1"])
    item_store(backend)
    failed = FailedItemsFile(backend.failed_items_path)
    failed.append([record(t) for t in range(1, 26)])
    failed.append([record(26, {"title": "Title 26", "score": NAN})])
    # The server stops for real once the first batch is in: the second batch meets the outage.
    stops = CountingStore(backend.store(), after_stored=lambda calls: calls == 1 and db.stop())
    with caplog.at_level(logging.INFO, logger="batchd"):
        result = failed.replay(stops, batch_size=10)
    assert result == ReplayResult(stored=10, kept=16, interrupted_by_outage=True)
    assert sorted(k["task_id"] for k in lines(failed.path)) == list(range(11, 27))
    assert files_beside(failed.path) == ["failed_items.jsonl"], "the claimed file is gone"
    assert "stopped by an outage" in caplog.text and "10 items stored, 16 kept" in caplog.text
    assert "refused" not in caplog.text, "an outage refuses nothing"

    db.start()
    backend.reconnect()
    assert failed.replay(backend.store()) == ReplayResult(stored=15, kept=1)
    assert stored_titles(backend) == sorted(f"Title {t}" for t in range(1, 26))
    assert [k["task_id"] for k in lines(failed.path)] == [26]


# -- a disk that refuses (the small_disk fixture: tests/conftest.py)
def test_a_full_disk_ends_the_retry_with_one_line_and_74(mysql_backend, small_disk):
    mysql_backend.create_tasks(["http://x.invalid/1"])
    item_store(mysql_backend)
    failed = FailedItemsFile(str(small_disk / "failed_items.jsonl"))
    failed.append([record(t) for t in range(1, 6)] + [record(6, {"title": "Title 6", "score": NAN})])
    fill_disk(small_disk)

    full = retry_items(mysql_backend, failed.path)
    errors = no_traceback(full)
    assert full.returncode == 74, full.stderr
    [disk_line] = [line for line in errors if "No space left on device" in line]
    assert f"cannot write {failed.path}: [Errno 28] No space left on device" in disk_line
    claimed = [name for name in files_beside(failed.path) if ".replaying." in name]
    assert len(claimed) == 1 and claimed[0] in disk_line
    assert len(lines(small_disk / claimed[0])) == 6, "no item lost: the claimed file stays whole"

    os.unlink(small_disk / "filler")
    again = retry_items(mysql_backend, failed.path)
    no_traceback(again)
    assert again.returncode == 1, again.stderr              # the NaN item is still refused, and kept
    assert "5 items stored, 1 kept" in again.stderr
    assert stored_titles(mysql_backend) == [f"Title {t}" for t in range(1, 6)]
    assert [k["task_id"] for k in lines(failed.path)] == [6]
    assert files_beside(failed.path) == ["failed_items.jsonl"]


def test_a_full_disk_with_a_torn_line_stores_nothing_yet(mysql_backend, small_disk):
    mysql_backend.create_tasks(["http://x.invalid/1"])
    item_store(mysql_backend)
    failed = FailedItemsFile(str(small_disk / "failed_items.jsonl"))
    failed.append([record(1), record(2)])
    with open(failed.path, "ab") as f:
        f.write(b'{"table": "crawl')
    fill_disk(small_disk)
    full = retry_items(mysql_backend, failed.path)
    assert full.returncode == 74 and f"cannot write {failed.torn_path}" in " ".join(no_traceback(full))
    assert mysql_backend.items() == [], "moving the torn line aside comes first"
    os.unlink(small_disk / "filler")
    again = retry_items(mysql_backend, failed.path)
    assert again.returncode == 0, again.stderr
    assert "2 items stored, 0 kept for the next retry, 1 moved aside" in again.stderr
    assert files_beside(failed.path) == ["failed_items.jsonl.torn"]


def test_a_read_only_disk_ends_the_retry_with_one_line_and_74(mysql_backend, small_disk):
    mysql_backend.create_tasks(["http://x.invalid/1"])
    item_store(mysql_backend)
    failed = FailedItemsFile(str(small_disk / "failed_items.jsonl"))
    failed.append([record(1), record(2)])
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    try:
        read_only = retry_items(mysql_backend, failed.path)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    [line] = no_traceback(read_only)
    assert read_only.returncode == 74
    assert f"cannot claim {failed.path}: [Errno 30] Read-only file system" in line
    assert mysql_backend.items() == [] and len(lines(failed.path)) == 2
    done = retry_items(mysql_backend, failed.path)
    assert done.returncode == 0 and "2 items stored" in done.stderr
    assert stored_titles(mysql_backend) == ["Title 1", "Title 2"]


def test_retry_exit_codes_end_to_end(mysql_backend):
    mysql_backend.create_tasks(["http://x.invalid/1"])
    item_store(mysql_backend)
    failed = FailedItemsFile(mysql_backend.failed_items_path)
    nothing = retry_items(mysql_backend, failed.path)
    assert nothing.returncode == 0 and f"nothing to replay in {failed.path}" in nothing.stderr

    failed.append([record(1), record(2, {"title": "Title 2", "score": NAN})])
    refused = retry_items(mysql_backend, failed.path)
    assert refused.returncode == 1
    assert len(no_traceback(refused)) == 2          # the refused item, then the summary
    assert "item of task 2 refused by `crawl_task_item`" in refused.stderr

    down = subprocess.run(
        [sys.executable, "-m", "batchd", "retry", "--items", failed.path], capture_output=True, text=True,
        timeout=60, env={**{k: v for k, v in os.environ.items() if not k.startswith("BATCHD_")},
                         **mysql_backend.env(MYSQL_URL="mysql://root@127.0.0.1:1/x"), "BATCHD_CONFIG": os.devnull})
    assert down.returncode == 69 and len(no_traceback(down)) == 1
    assert len(lines(failed.path)) == 1

    with open(failed.path, encoding="utf-8") as f:      # the operator fixes the item by hand
        fixed = f.read().replace("NaN", "0.5")
    with open(failed.path, "w", encoding="utf-8") as f:
        f.write(fixed)
    assert retry_items(mysql_backend, failed.path).returncode == 0
    assert stored_titles(mysql_backend) == ["Title 1", "Title 2"]


# -- appending never fails on a value
def test_odd_values_reach_the_file_as_a_tagged_repr(failed_items_path):
    circular = {"name": "loop"}
    circular["self"] = circular
    deep = []
    for _ in range(3000):
        deep = [deep]
    item = {"ok": "kept as is", "nan": NAN, "odd": Odd(), "set": {1}, "broken": BrokenRepr(),
            "circular": circular, "deep": deep, (1, 2): "tuple key", "surrogate": "a\udc80b"}
    failed = FailedItemsFile(failed_items_path)
    failed.append([record(7, item)])
    with open(failed_items_path, encoding="utf-8") as f:
        _, table, _, row = FailedItemsFile.parse(f.readline())
    data = row.data
    assert (table, row.task_id, data["ok"], data["surrogate"]) == (DEFAULT_TABLE, 7, "kept as is", "a\udc80b")
    assert data["nan"] != data["nan"]
    assert data["odd"] == {"$batchd": "repr", "v": "Odd(42)"} and data["set"] == {"$batchd": "repr", "v": "{1}"}
    assert data["broken"] == {"$batchd": "repr", "v": "<BrokenRepr: repr failed>"}
    assert data["circular"]["self"]["$batchd"] == "repr" and data["(1, 2)"] == "tuple key"
