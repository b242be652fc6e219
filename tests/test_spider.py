"""Master and workers as separate processes on a shared store: the seed example as written, one
master per namespace, keep_alive both ways, and the seed's failure reproduced and prevented."""
import os
import re
import signal
import sys
import time


from batchd.task import TaskState
from harness import batch_done, stays_true, wait_for
from procs import HERE, Proc

D, R = TaskState.DONE, TaskState.PROCESSING
SEED = os.path.join(HERE, "spiders", "seed.py")


def test_the_seed_example_runs_unchanged(shared_backend, site, procs):
    urls = [site.url(f"/page/{i}") for i in range(1, 41)]
    shared_backend.create_tasks(urls)
    env = shared_backend.env()
    master = procs.add(Proc([sys.executable, SEED, "monitor"], env=env))
    workers = [procs.add(Proc([sys.executable, SEED], env=env)) for _ in range(2)]
    for worker in workers:     # a SIGTERM before its handler is in kills a process still importing (-15)
        worker.wait_output(" started: ", timeout=30)
    wait_for(lambda: batch_done(shared_backend), timeout=60, message="the batch to finish")
    for proc in [master] + workers:
        proc.send(signal.SIGTERM)
    assert [proc.wait(30) for proc in [master] + workers] == [0, 0, 0]
    assert set(shared_backend.states().values()) == {D}
    assert sorted(i["title"] for i in shared_backend.items()) == sorted(f"Title {i}" for i in range(1, 41))
    assert "批次进度 40/40" in master.output()


def test_a_second_master_waits_or_in_once_mode_exits_75(shared_backend, procs):
    shared_backend.create_tasks(["http://x.invalid/1"])
    env = shared_backend.env()
    first = procs.add(Proc.spider("spiders.seed:CrawlTask", "master", env))
    first.wait_output(f"master of namespace '{shared_backend.namespace}'")
    second = procs.add(Proc.spider("spiders.seed:CrawlTask", "master-once", env))
    assert second.wait(30) == 75
    assert f"another master holds namespace '{shared_backend.namespace}'" in second.output()
    waiting = procs.add(Proc.spider("spiders.seed:CrawlTask", "master", env))
    waiting.wait_output(f"is master of namespace '{shared_backend.namespace}'")
    became_master = f"master of namespace '{shared_backend.namespace}' ("
    stays_true(lambda: waiting.alive() and became_master not in waiting.output(), 1.0,
               message="the standby master waiting while the first holds the lock", explain=waiting.output)
    first.send(signal.SIGTERM)                     # a clean exit releases the lock at once
    assert first.wait(30) == 0
    waiting.wait_output(became_master, timeout=10)


def test_a_dead_masters_lock_is_taken_over_once_it_expires(shared_backend, site, procs):
    shared_backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 6)])
    env = shared_backend.env(MASTER_LOCK_TIMEOUT=2)
    first = procs.add(Proc.spider("spiders.seed:CrawlTask", "master", env))
    first.wait_output("批次进度 0/5")
    successor = procs.add(Proc.spider("spiders.seed:CrawlTask", "master", env))
    successor.wait_output("is master of namespace")
    first.send(signal.SIGKILL)
    killed_at = time.monotonic()
    successor.wait_output(f"master of namespace '{shared_backend.namespace}' (", timeout=15)
    assert time.monotonic() - killed_at < 10
    procs.add(Proc.spider("spiders.seed:CrawlTask", "worker-once", env)).wait(60)
    wait_for(lambda: batch_done(shared_backend), timeout=30, message="the successor to close the batch")
    assert set(shared_backend.states().values()) == {D}


def test_keep_alive_worker_waits_for_work_and_stops_on_sigterm(shared_backend, site, procs):
    shared_backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 4)])
    env = shared_backend.env()
    resident = procs.add(Proc.spider("spiders.seed:CrawlTask", "worker", env))
    once = procs.add(Proc.spider("spiders.seed:CrawlTask", "worker-once", env))
    resident.wait_output("worker started")
    once.wait_output("worker started")
    stays_true(lambda: resident.alive() and once.alive(), 1.5,
               message="workers must wait for a master to hand out work")
    master = procs.add(Proc.spider("spiders.seed:CrawlTask", "master-once", env))
    assert master.wait(60) == 0, master.output()
    assert once.wait(30) == 0                      # keep_alive=False: the batch is done, it returns
    stays_true(resident.alive, 1.0, message="keep_alive=True: the worker waiting for the next batch",
               explain=resident.output)
    resident.send(signal.SIGTERM)
    assert resident.wait(30) == 0
    assert set(shared_backend.states().values()) == {D}


def test_the_seeds_failure_is_reproduced_and_prevented(shared_backend, site, procs, tmp_path):
    """SIGKILL a worker after parse() returned and called update_task(ok=True), before its items
    were flushed: the tasks stay in processing with zero items (a framework that wrote done at once
    would now show done with no data), and after the reclaim they end done with their items."""
    # Task 6 keeps one of the victim's threads busy: a worker with nothing in hand flushes at once.
    shared_backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 6)] + [site.url("/slow?seconds=4")])
    marks = tmp_path / "marks"
    marks.mkdir()
    held = shared_backend.env(ITEM_FLUSH_INTERVAL=60, ITEM_FLUSH_SIZE=10000, BATCH_LOST_TASK_STALE=2)
    held["TEST_MARK_DIR"] = str(marks)
    master = procs.add(Proc.spider("spiders.seed:CrawlTask", "master", shared_backend.env(BATCH_LOST_TASK_STALE=2)))
    victim = procs.add(Proc.spider("spiders.marking:MarkingCrawlTask", "worker", held))
    wait_for(lambda: len(os.listdir(marks)) == 5, timeout=30, message="parse() to return for every task")
    stays_true(lambda: set(shared_backend.states().values()) == {R} and shared_backend.items() == [], 0.5,
               message="every task in processing and no item stored while the items sit in the victim's memory")
    victim.send(signal.SIGKILL)
    victim.wait(10)
    assert set(shared_backend.states().values()) == {R}
    assert shared_backend.items() == []
    rescuer = procs.add(Proc.spider("spiders.seed:CrawlTask", "worker", shared_backend.env(BATCH_LOST_TASK_STALE=2)))
    wait_for(lambda: batch_done(shared_backend), timeout=60, message="the reclaimed tasks to finish")
    assert set(shared_backend.states().values()) == {D}
    assert sorted(i["title"] for i in shared_backend.items() if i["title"]) == [f"Title {i}" for i in range(1, 6)]
    reclaimed = re.findall(r"reclaimed (\d+) tasks whose lease expired", master.output())
    assert sum(map(int, reclaimed)) == 6                          # the 5 and the busy one
    for proc in (master, rescuer):
        proc.send(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_a_once_worker_waits_for_a_due_batch_the_master_has_not_opened(shared_backend, site, procs):
    shared_backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 4)])
    env = shared_backend.env()
    procs.add(Proc.spider("spiders.seed:CrawlTask", "worker-once", env))
    assert procs.add(Proc.spider("spiders.seed:CrawlTask", "master-once", env)).wait(60) == 0
    shared_backend.age_last_batch(days=7)          # batch 1 is done, batch 2 is due but not open yet
    early = procs.add(Proc.spider("spiders.seed:CrawlTask", "worker-once", env))
    early.wait_output("worker started")
    stays_true(early.alive, 2.0, explain=early.output,
               message="the last batch's done flag must not send a worker home while a batch is due")
    assert procs.add(Proc.spider("spiders.seed:CrawlTask", "master-once", env)).wait(60) == 0
    assert early.wait(30) == 0
    assert len(shared_backend.records()) == 2 and set(shared_backend.states().values()) == {D}
