"""Faults inside a worker, on real servers and processes: a callback that never returns (TASK_TIMEOUT:
interrupted, or the worker recycled), a thread that dies (the process ends and is replaced), a thread
that stops making progress (the heartbeat stops, the supervisor replaces the worker), a worker killed
with tasks in hand (replaced at once, its leases given back), outages under --once and during a stop,
and what STATUS= says meanwhile."""
import logging
import os
import re
import signal


from batchd.task import TaskState
from harness import InProcessBatch, wait_for
from spiders.faulty import RELEASE, BlockedCrawlTask, SpinningCrawlTask
from supervised import NotifySocket, gated_urls, lines_with, slow_urls, start_batchd, status_snapshot

D, F, P, R = TaskState.DONE, TaskState.FAILED, TaskState.PENDING, TaskState.PROCESSING
FAULTY = "spiders/faulty.py:{}"


def factory(backend, cls, **settings):
    return lambda: cls(batch_store=backend.store(), settings=backend.settings(**settings))


def pages(site, count):
    return [site.url(f"/page/{n}") for n in range(1, count + 1)]


# -- TASK_TIMEOUT, in-process on every store
def test_a_callback_that_spins_is_interrupted_at_task_timeout_and_its_thread_serves_on(backend, site, monkeypatch,
                                                                                        caplog):
    monkeypatch.setenv("TEST_FAULT_TASK", "2")
    backend.create_tasks(pages(site, 5))
    with caplog.at_level(logging.INFO, logger="batchd"):
        # One thread: tasks 3 to 5 are done only if the interrupted thread came back.
        with InProcessBatch(factory(backend, SpinningCrawlTask, TASK_TIMEOUT=1, SPIDER_THREAD_COUNT=1)) as batch:
            wait_for(lambda: set(backend.states().values()) <= {D, F}, timeout=30, message="every task settled")
    assert backend.states() == {1: D, 2: F, 3: D, 4: D, 5: D}
    assert len(backend.items()) == 4
    timed_out = [r.getMessage() for r in caplog.records if "TASK_TIMEOUT" in r.getMessage()]
    assert timed_out == ["task 2 failed: still being processed after TASK_TIMEOUT=1 s; its thread is interrupted"]
    assert not batch.errors and "Traceback" not in caplog.text


def test_a_callback_blocked_outside_python_code_recycles_its_worker(backend, site, monkeypatch, caplog):
    monkeypatch.setenv("TEST_FAULT_TASK", "1")
    backend.create_tasks(pages(site, 4))
    RELEASE.clear()
    try:
        with caplog.at_level(logging.INFO, logger="batchd"):
            with InProcessBatch(factory(backend, BlockedCrawlTask, TASK_TIMEOUT=1, SPIDER_THREAD_COUNT=2)) as batch:
                wait_for(lambda: batch.errors, timeout=30, message="the worker recycled")
    finally:
        RELEASE.set()
    (name, error), = batch.errors
    assert name == "worker 1" and error.exit_code == 70 and "TASK_TIMEOUT=1" in str(error)
    states = backend.states()
    assert states[1] == F and R not in states.values(), "a warm stop: the other thread finished its tasks"
    assert "the thread of task 1 has not come back 2 s after TASK_TIMEOUT=1 s" in caplog.text


# -- a supervised worker
def test_a_worker_recycled_by_task_timeout_is_replaced_at_once_and_the_batch_completes(mysql_backend, site, procs):
    mysql_backend.create_tasks(slow_urls(site, 20, seconds=0.3))
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "1", spider=FAULTY.format("BlockedCrawlTask"),
                        env={"TEST_FAULT_TASK": "3"}, TASK_TIMEOUT=1)
    recycled = wait_for(lambda: lines_with(proc, "exited with 70 (SOFTWARE)"), timeout=30, message="the recycle")
    assert recycled[0].endswith("a new worker now (it had served)")
    wait_for(lambda: set(mysql_backend.states().values()) <= {D, F}, timeout=60, message="every task settled")
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0
    states = mysql_backend.states()
    assert states.pop(3) == F and set(states.values()) == {D}
    assert not lines_with(proc, "SIGABRT"), "given up on, the stuck thread never silenced the heartbeat"
    assert len(mysql_backend.items()) == 19


def test_a_thread_that_dies_ends_its_worker_which_is_replaced(mysql_backend, site, procs):
    """A queue error that is not an outage (a Redis WRONGTYPE) kills a fetch thread: the worker does not
    carry on half alive, it exits 70 at once, and the supervisor replaces it."""
    import redis
    client = redis.Redis.from_url(mysql_backend.redis_url)
    pending = f"{mysql_backend.namespace}:batch_pending"
    client.set(pending, "not a list")
    mysql_backend.create_tasks(pages(site, 3))
    proc = start_batchd(procs, mysql_backend, "worker", "--workers", "1")
    wait_for(lambda: lines_with(proc, "exited with 70 (SOFTWARE)"), message="the worker's end")
    died = lines_with(proc, "died: ResponseError")
    assert died and "CRITICAL" in died[0] and "WRONGTYPE" in died[0]
    client.delete(pending)
    wait_for(lambda: len(lines_with(proc, "worker 1 started")) >= 2, timeout=30, message="its replacement")
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0


def test_a_thread_that_stops_making_progress_silences_the_heartbeat(mysql_backend, site, procs, tmp_path):
    mysql_backend.create_tasks(pages(site, 10))
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "1", spider=FAULTY.format("WedgingCrawlTask"),
                        env={"TEST_FAULT_FLAG": str(tmp_path / "wedged")})
    wait_for(lambda: lines_with(proc, "was killed by SIGABRT") or lines_with(proc, "while dumping its stacks after SIGABRT"),
             timeout=30, message="the wedged worker replaced")
    silenced = lines_with(proc, "thread wedged has made no progress")
    assert silenced and "the heartbeat stops" in silenced[0]
    wait_for(lambda: set(mysql_backend.states().values()) == {D}, timeout=60, message="the batch done by the next one")
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0


def test_a_killed_worker_is_replaced_at_once_and_its_leases_given_back(mysql_backend, site, procs):
    """The lease (600 s here) never has to expire: the supervisor gives a dead worker's leases back. Killed
    mid-request, it had marked its requests seen in the batch's Bloom filter (REQUEST_FILTER = "bloom": a filter
    the exact one's way, through the same port, so one run stands for both): the tasks taken again are done all
    the same, their own requests never dropped."""
    urls = slow_urls(site, 12, seconds=1.0)
    mysql_backend.create_tasks(urls)
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "2", BATCH_LOST_TASK_STALE=600,
                        REQUEST_FILTER_ENABLE="true", REQUEST_FILTER="bloom")
    in_hand = wait_for(lambda: [w["pid"] for w in status_snapshot(mysql_backend).get("workers", []) if w["tasks"] > 0],
                       message="a worker with tasks in hand")
    victim = in_hand[0]
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: lines_with(proc, f"(pid {victim}) was killed by SIGKILL"), message="the reap")
    given = lines_with(proc, "gave back the")
    assert given and f"(pid {victim})" in given[0]
    assert lines_with(proc, f"(pid {victim}) was killed by SIGKILL")[0].endswith("a new worker now (it had served)")
    wait_for(lambda: set(mysql_backend.states().values()) == {D}, timeout=60, message="every task done")
    assert len(mysql_backend.items()) == len(urls)
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0


# -- outages of a private MariaDB
# Each batch ends with GATED pages held at the site's gate (supervised.gated_urls), let go once MySQL is down: on a
# busy machine the batch could otherwise end before the outage begins, and their write-backs meet it.
GATED = 2

def test_once_waits_out_a_short_outage_after_start(private_mysql, site, procs):
    db, backend = private_mysql
    backend.create_tasks(slow_urls(site, 30, seconds=0.3) + gated_urls(site, GATED))
    proc = start_batchd(procs, backend, "run", "--workers", "2", "--once")
    wait_for(lambda: list(backend.states().values()).count(D) >= 3, message="the batch under way")
    backend.conn.close()
    db.stop()
    site.gate.set()
    wait_for(lambda: lines_with(proc, "waiting for it"), message="the outage noticed")
    db.start()
    backend.reconnect()
    assert proc.wait(90) == 0, proc.output()[-3000:]
    assert set(backend.states().values()) == {D} and len(backend.items()) == 30 + GATED


def test_once_gives_up_on_an_outage_longer_than_outage_timeout(private_mysql, site, procs):
    db, backend = private_mysql
    backend.create_tasks(slow_urls(site, 30, seconds=0.3) + gated_urls(site, GATED))
    proc = start_batchd(procs, backend, "run", "--workers", "1", "--once", OUTAGE_TIMEOUT=3)
    wait_for(lambda: D in backend.states().values(), message="the batch under way")
    backend.conn.close()
    db.stop()
    site.gate.set()
    assert proc.wait(60) == 69, proc.output()[-3000:]
    gave_up = lines_with(proc, "down for more than OUTAGE_TIMEOUT=3 s")
    assert gave_up and "Traceback" not in proc.output()


def test_status_says_what_the_children_wait_for(private_mysql, site, procs):
    db, backend = private_mysql
    backend.create_tasks(slow_urls(site, 30, seconds=0.3) + gated_urls(site, GATED))
    with NotifySocket() as notify:
        proc = start_batchd(procs, backend, "run", "--workers", "1", env=notify.env())
        notify.wait_for("READY=1")
        wait_for(lambda: D in backend.states().values(), message="the batch under way")
        backend.conn.close()
        db.stop()
        site.gate.set()
        waiting = re.compile(r"STATUS=run \S+: waiting for MySQL since \d\d:\d\d:\d\d \(MySQL root@127\.0\.0\.1:\d+/\S+ "
                             r"unreachable: .+\), batch 1 ")
        wait_for(lambda: any(waiting.match(f) for _, f in notify.fields("STATUS=")), timeout=30,
                 message="STATUS naming the outage")
        db.start()
        count = len(notify.fields("STATUS="))
        wait_for(lambda: len(notify.fields("STATUS=")) > count + 2 and "waiting for" not in notify.fields("STATUS=")[-1][1],
                 timeout=30, message="STATUS without the outage once it is over")
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0


def test_a_warm_stop_during_an_outage_is_quick_and_gives_back_the_leases(private_mysql, site, procs):
    db, backend = private_mysql
    urls = slow_urls(site, 20, seconds=0.5) + gated_urls(site, GATED)
    backend.create_tasks(urls)
    proc = start_batchd(procs, backend, "run", "--workers", "2", STOP_TIMEOUT=60, BATCH_LOST_TASK_STALE=600)
    wait_for(lambda: D in backend.states().values(), message="the batch under way")
    backend.conn.close()
    db.stop()
    site.gate.set()
    wait_for(lambda: lines_with(proc, "waiting for it"), message="the outage noticed")
    proc.send(signal.SIGTERM)
    assert proc.wait(20) == 0, "a stop does not wait out an outage (STOP_TIMEOUT is 60 s here)"
    assert lines_with(proc, "leases: the master requeues their tasks")
    db.start()
    backend.reconnect()
    assert R in backend.states().values(), "the tasks in hand stayed in processing: never marked done"
    rerun = start_batchd(procs, backend, "run", "--workers", "2", "--once", BATCH_LOST_TASK_STALE=600)
    assert rerun.wait(60) == 0, rerun.output()[-3000:]
    assert set(backend.states().values()) == {D}
    assert sorted(item["url"] for item in backend.items()) == sorted(urls)


def test_a_once_worker_that_gives_up_on_an_outage_ends_the_run_with_69(private_mysql, site, procs):
    """`batchd worker --once`: a worker child that exits 69 (its backend down past OUTAGE_TIMEOUT) ends the
    supervisor with 69, as the master's 69 ends `batchd run --once`; it is not respawned for ever."""
    db, backend = private_mysql
    backend.create_tasks(slow_urls(site, 30, seconds=0.3) + gated_urls(site, GATED))
    master = start_batchd(procs, backend, "master")
    proc = start_batchd(procs, backend, "worker", "--workers", "1", "--once", OUTAGE_TIMEOUT=2)
    wait_for(lambda: D in backend.states().values(), message="the batch under way")
    backend.conn.close()
    db.stop()
    site.gate.set()
    assert proc.wait(60) == 69, proc.output()[-3000:]
    assert lines_with(proc, "--once ends with 69")
    master.send(signal.SIGTERM)
    assert master.wait(30) == 0
