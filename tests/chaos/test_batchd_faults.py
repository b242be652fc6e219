"""The chaos suite (`pytest -m chaos`): a batch of at least 1,000 tasks, 2+ workers, one fault in the
middle, and the same verdict at the end (tests/chaos.py): 0 tasks lost, 0 done without their items
stored or dumped, the batch closed, duplicate item rows counted (0: the item table has its unique key).
Each scenario prints one `CHAOS ...` line of figures; docs/reliability.md's table quotes them.

Scenarios here break batchd's own processes and the spider; tests/chaos/test_servers.py breaks the
servers (on private instances) and tests/chaos/test_network.py the site and the network."""
import json
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


def kill_a_worker(run) -> bool:
    """SIGKILL one of the run's workers, at random; False when it has none now (one is being replaced)."""
    workers = workers_of(run.pid)
    if not workers:
        return False
    os.kill(random.choice(workers), signal.SIGKILL)
    return True


def closed(batch) -> bool:
    records = batch.backend.records()
    return bool(records) and records[0]["is_done"]


def test_sigkill_a_random_worker_every_2_s(mysql_backend, site, procs, tmp_path):
    """With the archive on (ARCHIVE = "warc"): no task done without its records either."""
    archive = str(tmp_path / "archive")
    batch = ChaosBatch(procs, mysql_backend, site, tasks=3000, path="/slow?seconds=0.1&task={n}", ARCHIVE="warc",
                       ARCHIVE_PATH=archive)
    run = batch.start("run", "--workers", "3")
    batch.wait_for_progress(50)

    kills = every(2.0, lambda: closed(batch), lambda: kill_a_worker(run))
    batch.wait_closed()
    replaced_at_once = len(lines_with(run, "a new worker now (it had served)"))
    given_back = sum(int(line.split("gave back the ")[1].split()[0]) for line in lines_with(run, "gave back the"))
    run.send(signal.SIGTERM)
    assert run.wait(60) == 0
    without_records = batch.done_without_records(archive)
    verdict = batch.verdict("SIGKILL a worker every 2 s", kills=kills, replaced_at_once=replaced_at_once,
                            leases_given_back=given_back, done_without_records=without_records)
    verdict.assert_sound()
    assert kills >= 8 and replaced_at_once >= kills - 1 and without_records == 0


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
    assert run.wait(180) == 1, run.output()[-3000:]       # its three tasks failed: --once ends 1
    batch.wait_closed()
    verdict = batch.verdict("a bad item, a blocked and a spinning callback",
                            recycled=len(lines_with(run, "exited with 70 (SOFTWARE)")))
    verdict.assert_sound(failed=3)
    states = mysql_backend.states()
    assert [states[100], states[400], states[700]] == [-1, -1, -1]
    assert lines_with(run, "task 100 failed: item key 'tags' holds a set")
    assert lines_with(run, "task 400 failed: still being processed after TASK_TIMEOUT=3 s")
    assert lines_with(run, "task 700 failed: still being processed after TASK_TIMEOUT=3 s")


def test_a_recrawl_batch_under_the_kill_loop(mysql_backend, site, procs):
    """A re-crawl (REVALIDATE) of 1,000 pages, a tenth of them changed, while a worker is SIGKILLed every
    second: besides the verdict, no page is remembered as seen in this batch without its items (a page
    kept as changed here whose task has no item of this batch), and every changed page's task is done
    with the new version's item. A validator written before its items landed would have made the
    killed task's next attempt find the page unchanged and leave its new items unwritten."""
    batch = ChaosBatch(procs, mysql_backend, site, tasks=1000, path="/versioned/{n}?seconds=0.1")
    run = batch.start("run", "--workers", "3", REVALIDATE="true")
    batch.wait_closed(1)
    changed = set(random.Random(21).sample(range(1, 1001), 100))
    for n in changed:
        site.versions[n] = 1
    assert batch.start("open-batch", REVALIDATE="true").wait(60) == 0
    wait_for(lambda: len(batch.backend.records()) == 2, message="batch 2 opened")

    kills = every(1.0, lambda: batch.backend.records()[1]["is_done"], lambda: kill_a_worker(run))
    batch.wait_closed(2)
    run.send(signal.SIGTERM)
    assert run.wait(60) == 0
    table = batch.backend.table
    kept_without_items = batch.backend.sql(
        f"SELECT COUNT(*) FROM `{table}_page` p WHERE p.`changed_in` = 2 AND NOT EXISTS (SELECT 1 FROM "
        f"`{table}_item` i WHERE i.`batch_id` = 2 AND i.`task_id` = p.`task_id`)")[0][0]
    new_items = {row[0] for row in batch.backend.sql(
        f"SELECT `task_id` FROM `{table}_item` WHERE `batch_id` = 2 AND JSON_VALUE(`item`, '$.title') LIKE %s", ("% v1",))}
    counters = json.loads(batch.backend.records()[1]["stats"])
    verdict = batch.verdict("a re-crawl batch, a worker SIGKILLed every second", kills=kills,
                            changed_pages=len(changed), changed_with_new_items=len(changed & new_items),
                            kept_without_items=kept_without_items, http_304=site.status_counts(304),
                            found_changed=counters.get("recrawl/changed", 0),
                            found_unchanged=counters.get("recrawl/unchanged", 0))
    verdict.assert_sound()
    assert kills >= 3 and kept_without_items == 0 and new_items == changed
