"""The supervisor on real MariaDB, Redis, processes and signals: a whole batch with three workers,
a worker killed or frozen mid-batch, warm stop, a killed supervisor, TTIN / TTOU, reload,
configuration failures (78 after a few attempts) and a database that is down at start."""
import os
import signal
import time

from batchd.task import TaskState
from harness import stays_true, wait_for
from servers import PrivateMariaDB, PrivateRedis
from supervised import (alive, children_of, lines_with, masters_of, slow_urls, start_batchd, status_snapshot,
                        title, workers_of)
from taskdb import MysqlBackend


def all_done(backend):
    states = backend.states()
    return states and set(states.values()) == {TaskState.DONE}


def assert_every_task_has_its_item(backend, urls):
    assert all_done(backend)
    assert sorted(item["url"] for item in backend.items()) == sorted(urls)   # once each: upserts


def finish_batch_and_stop(proc, backend, urls):
    wait_for(lambda: all_done(backend), timeout=60, message="every task done")
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert_every_task_has_its_item(backend, urls)


def holds_items(backend, pid) -> bool:
    """The supervisor's snapshot shows worker `pid` with items in memory (not flushed yet)."""
    return any(w["pid"] == pid and w["unflushed"] > 0 for w in status_snapshot(backend).get("workers", []))


def redis_client(backend):
    import redis
    return redis.Redis.from_url(backend.redis_url)


def test_run_with_three_workers_completes_a_batch_and_once_exits_0(mysql_backend, site, procs):
    urls = [site.url(f"/page/{n}") for n in range(1, 41)]
    mysql_backend.create_tasks(urls)
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "3", "--once")
    titles = wait_for(lambda: [title(pid) for pid in children_of(proc.pid)] if len(workers_of(proc.pid)) == 3
                      else None, message="three workers")
    assert proc.wait(60) == 0, proc.output()
    ns = mysql_backend.namespace
    assert f"batchd: master {ns}" in titles and {f"batchd: worker {n} {ns}" for n in (1, 2, 3)} <= set(titles)
    assert_every_task_has_its_item(mysql_backend, urls)
    assert lines_with(proc, "批次进度 40/40")
    assert lines_with(proc, "the ledger is at 0")
    assert mysql_backend.records()[-1]["is_done"]


def test_a_worker_killed_mid_batch_is_respawned_and_its_tasks_come_back(mysql_backend, site, procs):
    urls = slow_urls(site, 24, seconds=0.3)
    mysql_backend.create_tasks(urls)
    # Items wait 4 s for their flush: a worker killed before that loses them from memory.
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "2", ITEM_FLUSH_INTERVAL=4.0)
    # Any progress line of the batch: on a busy machine the first one may come after some tasks settled.
    wait_for(lambda: lines_with(proc, "/24  batch 1:"), timeout=60, message="the batch open")
    victim = workers_of(proc.pid)[0]
    wait_for(lambda: holds_items(mysql_backend, victim), message="the victim holding items in memory")
    os.kill(victim, signal.SIGKILL)
    death = wait_for(lambda: lines_with(proc, f"(pid {victim}) was killed by SIGKILL"), message="the death line")[0]
    assert "lost from memory" in death and "come back through their leases" in death
    lost_items = int(death.split("; ")[1].split(" items")[0])
    assert lost_items > 0, death
    wait_for(lambda: len(workers_of(proc.pid)) == 2 and victim not in workers_of(proc.pid), message="a new worker")
    finish_batch_and_stop(proc, mysql_backend, urls)
    assert lines_with(proc, "lease expired")       # the master reclaimed what the victim held


def test_a_frozen_worker_is_replaced_after_child_timeout(mysql_backend, site, procs):
    urls = slow_urls(site, 16, seconds=0.2)
    mysql_backend.create_tasks(urls)
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "2")
    wait_for(lambda: len(workers_of(proc.pid)) == 2, message="two workers")
    frozen = workers_of(proc.pid)[0]
    stopped_at = time.monotonic()
    os.kill(frozen, signal.SIGSTOP)
    wait_for(lambda: not alive(frozen), timeout=40, message="the frozen worker gone")
    silent = lines_with(proc, f"(pid {frozen}) silent for")
    assert silent and "SIGABRT" in silent[0], proc.output()
    # Not before CHILD_TIMEOUT (3 s) of silence; its last beat came at most a second before the stop.
    assert float(silent[0].split("silent for ")[1].split(" s")[0]) >= 3.0
    assert time.monotonic() - stopped_at >= 2.0
    wait_for(lambda: len(workers_of(proc.pid)) == 2, message="its replacement")
    finish_batch_and_stop(proc, mysql_backend, urls)


def test_sigterm_mid_batch_is_a_warm_stop_that_leaves_nothing_held(mysql_backend, site, procs):
    urls = slow_urls(site, 60, seconds=0.3)
    mysql_backend.create_tasks(urls)
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "2", BATCH_PUSH_LIMIT=20)
    wait_for(lambda: 0 < sum(s == TaskState.DONE for s in mysql_backend.states().values()) < 40,
             message="a batch under way")
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()
    assert lines_with(proc, "SIGTERM: warm stop")
    assert lines_with(proc, "the ledger is at 0")
    keys = redis_client(mysql_backend)
    ns = mysql_backend.namespace
    assert keys.zcard(f"{ns}:leases") == 0 and keys.hlen(f"{ns}:lease_owner") == 0   # no lease held by this host
    queued = {member.decode() for member in keys.smembers(f"{ns}:queued")}
    states = mysql_backend.states()
    # Processing now means "claimed and waiting in the queue", never "held by a worker that left".
    assert {str(i) for i, s in states.items() if s == TaskState.PROCESSING} == queued
    done = {i for i, s in states.items() if s == TaskState.DONE}
    assert 0 < len(done) < len(urls)
    assert len(mysql_backend.items()) == len(done)


def test_a_warm_stop_past_stop_timeout_logs_what_is_left(mysql_backend, site, procs):
    mysql_backend.create_tasks(slow_urls(site, 4, seconds=20))
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "1", STOP_TIMEOUT=1.0)
    wait_for(lambda: site.hits("/slow") == 4, message="four requests under way")
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0
    left = lines_with(proc, "lost from memory")
    assert len(left) == 1 and "0 items of 4 tasks" in left[0]
    assert sorted(left[0].split("(tasks ")[1].split(")")[0].split(", ")) == ["1", "2", "3", "4"]
    assert lines_with(proc, "0 items of 4 tasks were left in memory (their leases bring them back)")
    assert set(mysql_backend.states().values()) == {TaskState.PROCESSING}


def test_children_die_with_a_killed_supervisor(mysql_backend, site, procs):
    mysql_backend.create_tasks(slow_urls(site, 10))
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "2")
    wait_for(lambda: len(children_of(proc.pid)) == 3, message="master and two workers")
    children = children_of(proc.pid)
    proc.send(signal.SIGKILL)
    proc.wait(10)
    wait_for(lambda: not any(alive(pid) for pid in children), timeout=30, message="no orphan left")


def test_ttin_and_ttou_change_the_worker_count(mysql_backend, site, procs):
    mysql_backend.create_tasks([site.url("/page/1")])
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "2")
    wait_for(lambda: len(workers_of(proc.pid)) == 2, message="two workers")
    proc.send(signal.SIGTTIN)
    wait_for(lambda: len(workers_of(proc.pid)) == 3, message="three workers after TTIN")
    assert lines_with(proc, "SIGTTIN: workers 2 -> 3")
    for count in (2, 1):    # one signal at a time: two of a kind sent at once may arrive as one
        proc.send(signal.SIGTTOU)
        wait_for(lambda: len(workers_of(proc.pid)) == count, message=f"{count} workers after TTOU")
    proc.send(signal.SIGTTOU)
    wait_for(lambda: lines_with(proc, "staying at 1 workers"), message="TTOU keeps the last worker")
    assert len(workers_of(proc.pid)) == 1
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0


def test_hup_reloads_the_config_and_replaces_the_children(mysql_backend, site, procs, tmp_path):
    mysql_backend.create_tasks([site.url("/page/1")])
    config = tmp_path / "batchd.toml"
    config.write_text("WORKERS = 1\n")
    proc = start_batchd(procs, mysql_backend, "run", env={"BATCHD_CONFIG": str(config)})
    wait_for(lambda: len(workers_of(proc.pid)) == 1 and masters_of(proc.pid), message="master and one worker")
    before = set(children_of(proc.pid))
    config.write_text("WORKERS = 2\n")
    proc.send(signal.SIGHUP)
    wait_for(lambda: len(workers_of(proc.pid)) == 2 and masters_of(proc.pid)
             and not before & set(children_of(proc.pid)), timeout=30, message="two new workers and a new master")
    assert lines_with(proc, "reloaded: 2 children replaced")
    config.write_text("WORKERS = 'many'\n")
    proc.send(signal.SIGHUP)
    wait_for(lambda: lines_with(proc, "reload failed, the running children carry on"), message="a bad reload")
    assert len(workers_of(proc.pid)) == 2
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0


def test_worker_once_serves_the_batch_to_its_end_then_exits_0(mysql_backend, site, procs):
    urls = [site.url(f"/page/{n}") for n in range(1, 21)]
    mysql_backend.create_tasks(urls)
    master = start_batchd(procs, mysql_backend, "master")
    workers = start_batchd(procs, mysql_backend, "worker", "--once", "--workers", "2")
    assert workers.wait(60) == 0, workers.output()
    assert lines_with(workers, "every worker is done (--once)")
    assert_every_task_has_its_item(mysql_backend, urls)
    master.send(signal.SIGTERM)
    assert master.wait(30) == 0


def test_once_ends_with_the_masters_word_75_lock_held_69_unreachable(mysql_backend, site, procs):
    mysql_backend.create_tasks([site.url("/page/1")])
    lock = f"{mysql_backend.namespace}:master_lock"
    redis_client(mysql_backend).set(lock, "someone-else:1", ex=30)
    held = start_batchd(procs, mysql_backend, "run", "--once", "--workers", "1")
    assert held.wait(30) == 75
    assert lines_with(held, "another master holds namespace")
    redis_client(mysql_backend).delete(lock)
    down = start_batchd(procs, mysql_backend, "master", "--once", MYSQL_URL="mysql://root@127.0.0.1:1/x")
    assert down.wait(30) == 69
    assert mysql_backend.states() == {1: TaskState.PENDING}


def test_a_bad_spider_path_exits_78_at_once(mysql_backend, procs):
    proc = start_batchd(procs, mysql_backend, "run", spider="spiders/no_such_file.py:CrawlTask")
    assert proc.wait(30) == 78
    config, error = proc.output().splitlines()        # which config, then the one error: no retry mends it
    assert "config /dev/null (BATCHD_CONFIG)" in config
    assert "no_such_file.py not found" in error and "attempt" not in error


def test_children_failing_on_their_configuration_stop_the_supervisor_with_78(mysql_backend, procs):
    # The spider imports, but its task table does not exist: each child exits 78 at start.
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "2")
    assert proc.wait(60) == 78, proc.output()
    assert len(lines_with(proc, "configuration error 1 of 3")) >= 1
    assert lines_with(proc, "failed on its configuration 3 times in a row")
    assert "Traceback" not in proc.output()


def test_the_master_keeps_beating_while_it_waits_for_the_lock(mysql_backend, site, procs):
    mysql_backend.create_tasks([site.url("/page/1")])
    lock = f"{mysql_backend.namespace}:master_lock"
    redis_client(mysql_backend).set(lock, "someone-else:1", ex=30)
    proc = start_batchd(procs, mysql_backend, "master")
    wait_for(lambda: lines_with(proc, "waiting: someone-else:1 is master"), message="the master waiting")
    waiting = masters_of(proc.pid)
    assert len(waiting) == 1
    stays_true(lambda: not lines_with(proc, "silent for") and masters_of(proc.pid) == waiting,
               5.0, message="the waiting master beating, never replaced",      # longer than CHILD_TIMEOUT (3 s)
               explain=proc.output)
    redis_client(mysql_backend).delete(lock)
    wait_for(lambda: lines_with(proc, "批次进度 0/1"), timeout=30, message="the master at work")
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0


def run_through_an_outage_at_start(server, backend, site, procs, on_restart=lambda: None):
    """Tasks in place, `server` stopped, batchd started: it waits (retrying, children alive), then
    does the whole batch once the server is back."""
    urls = [site.url(f"/page/{n}") for n in range(1, 11)]
    backend.create_tasks(urls)
    server.stop()
    proc = start_batchd(procs, backend, "run", "--workers", "2")
    wait_for(lambda: lines_with(proc, "; waiting for it, trying again every few seconds"), message="the retries")
    wait_for(lambda: len(children_of(proc.pid)) == 3, message="master and two workers")
    stays_true(lambda: proc.alive() and len(children_of(proc.pid)) == 3, 1.0,
               message="the supervisor and its three children waiting", explain=proc.output)
    server.start()
    on_restart()
    finish_batch_and_stop(proc, backend, urls)
    return proc


def test_mariadb_down_at_start_is_waited_for(site, procs, failed_items_path, redis_url):
    with PrivateMariaDB() as db:
        backend = MysqlBackend(db.create_database(), redis_url, failed_items_path)
        try:
            def reconnect():
                backend.conn = db.connect(backend.mysql_url.rsplit("/", 1)[1])
            run_through_an_outage_at_start(db, backend, site, procs, on_restart=reconnect)
        finally:
            backend.close()


def test_redis_down_at_start_is_waited_for(mysql_url, site, procs, failed_items_path):
    with PrivateRedis() as server:
        backend = MysqlBackend(mysql_url, server.url(), failed_items_path)
        try:
            proc = run_through_an_outage_at_start(server, backend, site, procs)
            cannot = lines_with(proc, "cannot publish the status snapshot")
            assert len(cannot) == 1 and lines_with(proc, "status snapshots resume")
        finally:
            backend.close()
