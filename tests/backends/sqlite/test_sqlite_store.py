"""What is particular to the SQLite backend: WAL, bad tables, UTC text times, upserts, several
processes on one file (leases, claims, the master lock), and a batch run by a master and two
workers in processes of their own, one of them killed with SIGKILL."""
import json
import logging
import multiprocessing
import os
import re
import signal
import sqlite3
import time
from datetime import datetime

import pytest

import batchd
from batchd.errors import ConfigError
from batchd.backends import open_backend
from batchd.model import COLUMNS_ITEM_KIND, DEFAULT_ITEM_KIND, ItemRow, TaskLayout
from batchd.task import Move, TaskState
from harness import batch_done, wait_for
from procs import Proc
from taskdb import SqliteBackend

FORK = multiprocessing.get_context("fork")
NAMESPACE = SqliteBackend.namespace


@pytest.fixture
def sqlite(tmp_path, failed_items_path):
    return SqliteBackend(tmp_path / "batchd.db", failed_items_path)


def opened_store(sqlite, count=0, **layout):
    store = sqlite.create_tasks([f"http://127.0.0.1:9/{i}" for i in range(1, count + 1)])
    store.open(TaskLayout("crawl_task", **layout))
    return store


def queued(sqlite, count):
    """A store and its ports with `count` tasks claimed and pushed for batch 1."""
    store = opened_store(sqlite, count)
    ports = open_backend(None, NAMESPACE, store)
    ports.leases.push(1, store.claim(count), "id")
    return store, ports


# -- one process
def test_the_file_is_in_wal_mode_and_holds_the_queue(sqlite):
    store = opened_store(sqlite, 1)
    open_backend(None, NAMESPACE, store)
    fresh = sqlite3.connect(sqlite.path)      # an older connection reports the mode it started with
    assert fresh.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    fresh.close()
    tables = {row[0] for row in sqlite.sql("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"crawl_task", "crawl_task_batch_record", "crawl_task_item", "batchd_queue", "batchd_lease",
            "batchd_lock", "batchd_attempts", "batchd_seen", "batchd_flag"} <= tables
    assert store.runs_in_process is False and store.describe() == f"SQLite {sqlite.path}"


def test_a_missing_table_or_column_is_a_config_error_naming_it(sqlite):
    store = batchd.SqliteBatchStore(sqlite.path)
    with pytest.raises(ConfigError, match=r'task table "crawl_task" not found .*\(__task_table__\)'):
        store.open(TaskLayout("crawl_task"))
    sqlite.create_tasks([])
    with pytest.raises(ConfigError, match=r'no column "done_at" \(BATCH_TASK_TIME_FIELD\)'):
        store.open(TaskLayout("crawl_task", time_field="done_at"))
    with pytest.raises(ConfigError, match=r'item table "crawl_item" not found .*\(__item_table__\)'):
        store.open(TaskLayout("crawl_task", item_table="crawl_item"))
    sqlite.sql('ALTER TABLE "crawl_task" ADD COLUMN "seen_at" INTEGER')
    with pytest.raises(ConfigError, match=r'"seen_at" is INTEGER.*DATETIME or TEXT \(BATCH_TASK_TIME_FIELD\)'):
        store.open(TaskLayout("crawl_task", time_field="seen_at"))
    with pytest.raises(ConfigError, match="give the path of a file"):
        batchd.SqliteBatchStore(":memory:")


def test_a_state_column_without_index_warns_with_the_statement_to_run(sqlite, caplog, monkeypatch):
    monkeypatch.setattr(logging.getLogger("batchd"), "propagate", True)
    sqlite.create_tasks([], index=False)
    with caplog.at_level(logging.WARNING, logger="batchd.store"):
        sqlite.store().open(TaskLayout("crawl_task"))
    statement = 'CREATE INDEX "idx_crawl_task_batch_status" ON "crawl_task" ("batch_status")'
    assert statement in caplog.text
    sqlite.sql(statement)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="batchd.store"):
        sqlite.store().open(TaskLayout("crawl_task"))
    assert "CREATE INDEX" not in caplog.text


def test_times_are_utc_text_comparable_with_current_timestamp(sqlite):
    store = opened_store(sqlite, 3)
    sqlite_now = datetime.fromisoformat(sqlite.sql("SELECT datetime('now')")[0][0])
    assert abs((store.now() - sqlite_now).total_seconds()) <= 2
    store.claim(3)
    written = sqlite.sql('SELECT "update_time" FROM "crawl_task"')
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", t) for t, in written)
    sqlite.sql('UPDATE "crawl_task" SET "update_time" = CURRENT_TIMESTAMP WHERE "id" = 1')
    sqlite.sql('''UPDATE "crawl_task" SET "update_time" = strftime('%Y-%m-%dT%H:%M:%f', 'now', '-100 seconds')
                  WHERE "id" = 2''')
    sqlite.set_state(3, int(TaskState.PROCESSING), age_seconds=100)
    assert sorted(store.stale_processing(50, 10)) == [2, 3]
    assert store.move(Move.REQUEUE, [1, 2, 3], older_than=50) == 2
    assert sqlite.states() == {1: TaskState.PROCESSING, 2: TaskState.PENDING, 3: TaskState.PENDING}


def test_items_are_upserts_in_both_kinds_of_table(sqlite):
    store = opened_store(sqlite, 1)
    row = ItemRow(batch_id=1, task_id=1, request_seq=0, item_seq=0, data={"title": "old"})
    store.save_items("crawl_task_item", DEFAULT_ITEM_KIND, [row])
    store.save_items("crawl_task_item", DEFAULT_ITEM_KIND, [ItemRow(1, 1, 0, 0, {"title": "new"}),
                                                            ItemRow(1, 1, 0, 1, {"title": "second"})])
    assert sqlite.items() == [{"title": "new"}, {"title": "second"}]
    sqlite.sql('CREATE TABLE "crawl_item" ("url" TEXT PRIMARY KEY, "title" TEXT, "tags" TEXT, "seen" DATETIME)')
    store.open(TaskLayout("crawl_task", item_table="crawl_item"))
    assert store.item_columns("crawl_item") == {"url", "title", "tags", "seen"}
    store.save_items("crawl_item", COLUMNS_ITEM_KIND, [ItemRow(1, 1, 0, 0, {"url": "u", "title": "old"})])
    store.save_items("crawl_item", COLUMNS_ITEM_KIND, [ItemRow(1, 1, 0, 0, {
        "url": "u", "title": "new", "tags": ["a", "b"], "seen": datetime(2024, 5, 6, 7, 8, 9)})])
    assert sqlite.sql('SELECT * FROM "crawl_item"') == [("u", "new", '["a","b"]', "2024-05-06 07:08:09")]


def test_a_lease_is_renewed_and_released_only_by_its_token(sqlite):
    store, ports = queued(sqlite, 2)
    queue = ports.leases
    first = queue.lease("w:1", 0.3)
    assert (first.task_id, first.batch_id, first.task["url"], first.queue_left) == (1, 1, "http://127.0.0.1:9/1", 1)
    assert queue.known(["1", "2", "3"]) == {"1", "2"}
    assert queue.renew([first], 0.3) == [first]
    assert wait_for(lambda: queue.reclaim_expired(10), timeout=10, message="the renewed 0.3 s lease expired") == ["1"]
    assert queue.renew([first], 60) == [] and queue.release([first]) == []
    assert queue.known(["1"]) == set()
    queue.push(1, [first.task], "id")
    queue.lease("w:2", 60)                      # task 2, then task 1 again under a new token
    again = queue.lease("w:3", 60)
    assert again.task_id == 1 and queue.release([first, again]) == [again]
    assert queue.count_attempts([1, 2]) == [1, 1] and queue.count_attempts([1]) == [2]
    seen = ports.seen
    assert seen.first_seen(1, "fp") and not seen.first_seen(1, "fp") and seen.first_seen(2, "fp")


def test_flags_wake_ups_and_a_new_batch(sqlite):
    store, ports = queued(sqlite, 3)
    queue = ports.leases
    queue.lease("w:1", 60)
    queue.set_done(1)
    ports.wake.wake_master()
    assert queue.is_done() and ports.wake.wait_for_wake(1.0) and not ports.wake.wait_for_wake(0.1)
    other = open_backend(None, "another", store).leases
    other.push(1, [{"id": 9}], "id")
    queue.clear_batch()
    assert (queue.pending_count(), queue.leased_count(), queue.is_done()) == (0, 0, False)
    assert ports.seen.first_seen(1, "fp") and queue.count_attempts([1]) == [1]
    assert other.pending_count() == 1


# -- several processes on one file
def _take_all(store, queue, what, barrier, out_path):
    """In a forked child: lease (or claim) until nothing is left; write what it got."""
    barrier.wait()
    got = []
    while True:
        if what == "lease":
            lease = queue.lease(f"{os.getpid()}:{len(got)}", 60)
            taken = [lease.task_id] if lease else []
        else:
            taken = [row["id"] for row in store.claim(7)]
        if not taken:
            break
        got += taken
        time.sleep(0.001)     # a moment's work: SQLite's busy wait favours whoever just held the lock
    with open(out_path, "w") as f:
        json.dump(got, f)


@pytest.mark.parametrize("what", ["lease", "claim"])
def test_processes_taking_at_once_never_get_the_same_task(sqlite, tmp_path, what):
    count, children = 600, 4
    if what == "lease":
        store, ports = queued(sqlite, count)    # used here first: the children must open their own connections
        queue = ports.leases
    else:
        store, queue = opened_store(sqlite, count), None
        store.progress()
    barrier = FORK.Barrier(children)
    outs = [str(tmp_path / f"taken-{n}.json") for n in range(children)]
    procs = [FORK.Process(target=_take_all, args=(store, queue, what, barrier, out)) for out in outs]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * children
    taken = [task_id for out in outs for task_id in json.load(open(out))]
    assert sorted(taken) == list(range(1, count + 1))
    assert sum(1 for out in outs if json.load(open(out))) > 1, "one child took everything: no contention tested"
    if what == "lease":
        assert (queue.pending_count(), queue.leased_count()) == (0, count)
    else:
        assert set(sqlite.states().values()) == {TaskState.PROCESSING}


def _hold_lock(path, held):
    lock = open_backend(None, NAMESPACE, batchd.SqliteBatchStore(path)).locks.master_lock("doomed:1", 3.0)
    assert lock.acquire()
    held.set()
    time.sleep(3600)


def test_the_master_lock_is_taken_over_only_after_it_expires(sqlite):
    queue = open_backend(None, NAMESPACE, opened_store(sqlite)).locks
    held = FORK.Event()
    holder = FORK.Process(target=_hold_lock, args=(sqlite.path, held))
    holder.start()
    try:
        assert held.wait(30)
        successor = queue.master_lock("successor:2", 3.0)
        assert not successor.acquire() and queue.lock_holder() == "doomed:1"
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.join()
    assert not successor.acquire(), "a dead master's lock lasts until its TTL runs out"
    wait_for(successor.acquire, timeout=30, interval=0.1, message="the expired lock taken over")
    assert queue.lock_holder() == "successor:2"
    # A holder that stalled past its TTL cannot renew, nor release its successor's lock.
    stalled = queue.master_lock("stalled:3", 0.2)
    successor.release()
    assert stalled.acquire()
    wait_for(successor.acquire, timeout=10, message="the stalled holder's 0.2 s lock expired and taken over")
    assert not stalled.renew()
    stalled.release()
    assert queue.lock_holder() == "successor:2" and successor.renew()


# -- the seed's spider: a master and workers in processes of their own
SPIDER = "spiders.stalling:StallingCrawlTask"


def test_a_sigkilled_workers_task_comes_back_through_its_lease(sqlite, site, procs):
    sqlite.create_tasks([site.url(f"/page/{i}") for i in range(1, 11)])
    # The stalled task's item lands while its callback hangs: with QUALITY_BLOCK_HOLD a page's items wait for the
    # callback's end (the page is judged first), so it is off here.
    env = sqlite.env(BATCH_LOST_TASK_STALE=2, QUALITY_BLOCK_HOLD="false")
    master = procs.add(Proc.spider(SPIDER, "master", env))
    doomed = procs.add(Proc.spider(SPIDER, "worker", dict(env, TEST_STALL_TASK="3")))

    def only_task_3_held_with_its_item_landed():
        if not (made(sqlite, "batchd_lease") and made(sqlite, "crawl_task_item")):
            return False
        states = sqlite.states()
        others_done = all(s == TaskState.DONE for i, s in states.items() if i != 3)
        held = sqlite.sql("SELECT COUNT(*) FROM batchd_lease WHERE task_key = '3'")[0][0] == 1
        landed = sqlite.sql('SELECT COUNT(*) FROM "crawl_task_item" WHERE "task_id" = 3')[0][0] == 1
        return others_done and held and landed and states[3] == TaskState.PROCESSING

    wait_for(only_task_3_held_with_its_item_landed, timeout=60, message="task 3 held by the doomed worker")
    doomed.send(signal.SIGKILL)
    assert doomed.wait(10) == -signal.SIGKILL
    rescuer = procs.add(Proc.spider(SPIDER, "worker", env))
    wait_for(lambda: batch_done(sqlite), timeout=60, message="the reclaimed task to finish")
    for proc in (rescuer, master):
        proc.send(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert set(sqlite.states().values()) == {TaskState.DONE}
    assert sorted(item["title"] for item in sqlite.items()) == sorted(f"Title {i}" for i in range(1, 11))
    assert "reclaimed 1 tasks whose lease expired" in master.output()
    assert sqlite.sql("SELECT attempts FROM batchd_attempts WHERE task_key = '3'") == [(2,)]


def made(sqlite, table):
    """The processes create their tables as they start: a test looks only once they are there."""
    return bool(sqlite.sql("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)))
