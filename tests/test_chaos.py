"""The chaos suite (`pytest -m chaos`): a batch of at least 1,000 tasks, 2+ workers, one fault in the
middle, and the same verdict at the end (tests/chaos.py): 0 tasks lost, 0 done without their items
stored or dumped, the batch closed, duplicate item rows counted (0: the item table has its unique key).
Each scenario prints one `CHAOS ...` line of figures; docs/reliability.md's table quotes them.

Scenarios here break batchd's own processes and the spider; tests/test_chaos_servers.py breaks the
servers (on private instances) and tests/test_chaos_network.py the site and the network."""
import os
import random
import signal
import threading

import pytest

from chaos import ChaosBatch
from harness import wait_for
from spiders.faulty import RELEASE
from supervised import lines_with, status_snapshot, workers_of

pytestmark = pytest.mark.chaos
FAULTY = "spiders/faulty.py:{}"


def every(seconds: float, until, action) -> int:
    """Run `action` every `seconds` (a fault's rhythm) until `until()`; return how many times it ran."""
    ticks, pause = 0, threading.Event()
    while not until():
        pause.wait(seconds)
        if not until() and action():
            ticks += 1
    return ticks


def closed(batch) -> bool:
    records = batch.backend.records()
    return bool(records) and records[0]["is_done"]


def test_sigkill_a_random_worker_every_2_s(mysql_backend, site, procs):
    batch = ChaosBatch(procs, mysql_backend, site, tasks=3000, path="/slow?seconds=0.1&task={n}")
    run = batch.start("run", "--workers", "3")
    batch.wait_for_progress(50)

    def kill_one() -> bool:
        workers = workers_of(run.pid)
        if not workers:
            return False
        os.kill(random.choice(workers), signal.SIGKILL)
        return True

    kills = every(2.0, lambda: closed(batch), kill_one)
    batch.wait_closed()
    replaced_at_once = len(lines_with(run, "a new worker now (it had served)"))
    given_back = sum(int(line.split("gave back the ")[1].split()[0]) for line in lines_with(run, "gave back the"))
    run.send(signal.SIGTERM)
    assert run.wait(60) == 0
    verdict = batch.verdict("SIGKILL a worker every 2 s", kills=kills, replaced_at_once=replaced_at_once,
                            leases_given_back=given_back)
    verdict.assert_sound()
    assert kills >= 8 and replaced_at_once >= kills - 1


def test_sigterm_with_thousands_of_items_buffered(mysql_backend, site, procs):
    """Flushes held back (huge size, an hour's interval): a warm stop lands every buffered item before
    it writes its task back, and what it could not finish comes back in the next run."""
    batch = ChaosBatch(procs, mysql_backend, site, tasks=1000, ITEM_FLUSH_SIZE=100000, ITEM_FLUSH_INTERVAL=3600,
                       SPIDER_THREAD_COUNT=16)
    env = {"TEST_ITEMS_PER_TASK": "20"}
    run = batch.start("run", "--workers", "2", spider=FAULTY.format("ManyItemsCrawlTask"), env=env)
    wait_for(lambda: unflushed(mysql_backend) >= 2000, timeout=60, message="2,000 items buffered")
    buffered = unflushed(mysql_backend)
    run.send(signal.SIGTERM)
    assert run.wait(60) == 0, run.output()[-3000:]
    stored_at_stop = mysql_backend.sql("SELECT COUNT(*) FROM `crawl_task_item`")[0][0]
    rerun = batch.start("run", "--workers", "2", "--once", spider=FAULTY.format("ManyItemsCrawlTask"), env=env,
                        ITEM_FLUSH_SIZE=500, ITEM_FLUSH_INTERVAL=0.2)
    assert rerun.wait(120) == 0, rerun.output()[-3000:]
    batch.wait_closed()
    verdict = batch.verdict("SIGTERM with items buffered", items_buffered_at_stop=buffered,
                            items_stored_by_the_stop=stored_at_stop)
    verdict.assert_sound()
    assert mysql_backend.sql("SELECT COUNT(*) FROM `crawl_task_item`")[0][0] == 20 * 1000


def unflushed(backend) -> int:
    """Items in the workers' memory, as the supervisor's snapshot says."""
    return int(status_snapshot(backend).get("unflushed", 0))


def test_a_bad_item_and_hung_callbacks_among_good_tasks(mysql_backend, site, procs):
    batch = ChaosBatch(procs, mysql_backend, site, tasks=1000, TASK_TIMEOUT=3)
    env = {"TEST_BAD_ITEM_TASK": "100", "TEST_BLOCKED_TASK": "400", "TEST_SPINNING_TASK": "700"}
    RELEASE.clear()
    run = batch.start("run", "--workers", "2", "--once", spider=FAULTY.format("MixedFaultsCrawlTask"), env=env)
    assert run.wait(180) == 0, run.output()[-3000:]
    batch.wait_closed()
    verdict = batch.verdict("a bad item, a blocked and a spinning callback",
                            recycled=len(lines_with(run, "exited with 70 (SOFTWARE)")))
    verdict.assert_sound(failed=3)
    states = mysql_backend.states()
    assert [states[100], states[400], states[700]] == [-1, -1, -1]
    assert lines_with(run, "task 100 failed: item key 'tags' holds a set")
    assert lines_with(run, "task 400 failed: still being processed after TASK_TIMEOUT=3 s")
    assert lines_with(run, "task 700 failed: still being processed after TASK_TIMEOUT=3 s")
