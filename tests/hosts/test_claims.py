"""Claims across hosts (issue 20, BATCH_TASK_HOST_FIELD), on every store: a task table sorted by host still
feeds the queue with every host's tasks, each task claimed once; unset, claims stay in id order."""
import math
import os
import re
import subprocess
import sys
from collections import Counter

import pytest

from batchd import MemoryBatchStore, TaskLayout
from batchd.hosts.claims import host_of
from batchd.config import Settings, validate
from batchd.errors import ConfigError
from batchd.task import TaskState
from conftest import MYSQL_URL, _admin_args
from harness import batch_done, make_master, patrol_until, work_off
from procs import ROOT
from supervised import SEED, batchd

BIG, OTHERS = "big.example", ("b.example", "c.example", "d.example", "e.example")


def tasks(form: str = "url", others: str = "mixed") -> list:
    """The first 600 tasks on one host, then 400 on 4 others: `mixed` (taking turns) or `grouped` (100 each,
    a table sorted by host). `form`: full URLs, or bare hosts as someone typed them (mixed case)."""
    if others == "mixed":
        hosts = [BIG] * 600 + [OTHERS[n % 4] for n in range(400)]
    else:
        hosts = [BIG] * 600 + [host for host in OTHERS for _ in range(100)]
    if form == "url":
        return [f"https://{host}/page/{n}" for n, host in enumerate(hosts)]
    return [host.capitalize() for host in hosts]


def host_counts(rows) -> Counter:
    return Counter(host_of(row["url"]) for row in rows)


@pytest.mark.parametrize("form", ["url", "bare"])
def test_a_claim_takes_tasks_of_every_host_even_when_one_holds_the_first_ids(backend, form):
    backend.create_tasks(tasks(form))
    _, spider = make_master(backend, BATCH_TASK_HOST_FIELD="url")
    rows = spider.runtime.store.claim(50)
    counts = host_counts(rows)
    assert set(counts) == {BIG, *OTHERS}
    assert max(counts.values()) <= math.ceil(50 / 5) and len(rows) == 50
    assert len({host_of(row["url"]) for row in rows[:5]}) == 5          # in the order picked: round robin
    states = backend.states()
    assert all(row["batch_status"] == TaskState.PROCESSING == states[row["id"]] for row in rows)
    assert Counter(states.values())[TaskState.PROCESSING] == 50          # exactly those ids moved


@pytest.mark.parametrize("others", ["mixed", "grouped"])
def test_hosts_deep_in_the_table_are_claimed_at_once(backend, others):
    """Grouped (a table sorted by host), the last two hosts hold ids 801 to 1000: past the head the claim reads
    (ids 1 to 200), but inside the stretches it spreads up to the last pending id."""
    backend.create_tasks(tasks(others=others))
    _, spider = make_master(backend, BATCH_TASK_HOST_FIELD="url")
    counts = host_counts(spider.runtime.store.claim(50))
    assert set(counts) == {BIG, *OTHERS} and max(counts.values()) <= math.ceil(50 / 5)


def test_every_task_is_claimed_once_until_none_is_left(backend):
    backend.create_tasks(tasks(others="grouped"))
    _, spider = make_master(backend, BATCH_TASK_HOST_FIELD="url")
    claimed: list = []
    while rows := spider.runtime.store.claim(50):
        assert max(host_counts(rows).values()) <= math.ceil(50 / len(host_counts(rows)))
        claimed += [row["id"] for row in rows]
    assert sorted(claimed) == list(range(1, 1001))
    assert set(backend.states().values()) == {TaskState.PROCESSING}


def test_no_task_past_upto_is_claimed_across_hosts(backend):
    backend.create_tasks(tasks(others="grouped"))
    _, spider = make_master(backend, BATCH_TASK_HOST_FIELD="url")
    rows = spider.runtime.store.claim(100, upto=650)
    assert max(row["id"] for row in rows) <= 650 and set(host_counts(rows)) == {BIG, "b.example"}


def test_without_the_setting_claims_stay_in_id_order(backend):
    backend.create_tasks(tasks(others="grouped"))
    _, spider = make_master(backend)
    assert [row["id"] for row in spider.runtime.store.claim(50)] == list(range(1, 51))


def test_a_host_column_the_table_lacks_is_a_one_line_error(backend):
    backend.create_tasks(tasks(others="grouped"))
    with pytest.raises(ConfigError) as raised:
        make_master(backend, BATCH_TASK_HOST_FIELD="site")
    message = str(raised.value)
    assert "\n" not in message and "BATCH_TASK_HOST_FIELD" in message and "crawl_task" in message
    assert "site" in message


def test_the_host_field_is_checked_as_an_identifier():
    with pytest.raises(ConfigError, match="BATCH_TASK_HOST_FIELD"):
        validate(Settings(BATCH_TASK_HOST_FIELD="url; DROP TABLE t"))
    validate(Settings())        # unset: off


@pytest.mark.parametrize("value, host", [
    ("https://Shop.Example/a?b=1", "shop.example"), ("http://user:pw@shop.example:8080/x", "shop.example"),
    ("Shop.Example", "shop.example"), ("shop.example/path", "shop.example"), ("  SHOP.example ", "shop.example"),
    ("http://[2001:DB8::1]:8080/x", "2001:db8::1"), ("http://[::1/x", "::1"), ("", ""), (None, "")])
def test_the_host_of_a_value(value, host):
    assert host_of(value) == host


def test_ids_that_are_not_integers_are_read_in_one_stretch_past_the_head():
    """Nothing to spread between text ids: one stretch of 8 x limit rows follows the head (ids 1 to 200 here,
    the stretch 201 to 600), and every task is still claimed once."""
    rows = [{"id": f"t{n:04d}", "url": url} for n, url in enumerate(tasks(others="grouped"), start=1)]
    store = MemoryBatchStore(rows)
    store.open(TaskLayout(table="crawl_task", host_field="url"))
    first = store.claim(50)
    assert set(host_counts(first)) == {BIG}
    claimed = [row["id"] for row in first]
    while picked := store.claim(50):
        claimed += [row["id"] for row in picked]
    assert sorted(claimed) == [row["id"] for row in rows]


def test_batchd_check_names_the_host_field_or_the_missing_column(tmp_path):
    store = f"sqlite:///{tmp_path}/crawl.db"
    assert batchd("tasks", "add", "http://x.invalid/1", "--spider", SEED, "--store", store).returncode == 0
    good = batchd("check", SEED, "--store", store, env={"BATCHD_BATCH_TASK_HOST_FIELD": "url"})
    assert good.returncode == 0, good.stdout
    assert "hosts from `url` (BATCH_TASK_HOST_FIELD)" in good.stdout
    assert "claims across hosts need no index on `url`" in good.stdout
    missing = batchd("check", SEED, "--store", store, env={"BATCHD_BATCH_TASK_HOST_FIELD": "site"})
    assert missing.returncode == 78
    assert 'FAIL  task table  task table "crawl_task" has no column "site" (BATCH_TASK_HOST_FIELD)' in missing.stdout


def test_the_host_claim_benchmark_runs_and_drops_its_database():
    """bench/host_claim.py on a small table (the figures of a million rows go in docs/architecture.md)."""
    import MySQLdb
    answer = subprocess.run([sys.executable, "-m", "bench.host_claim", "--rows", "20000", "--limit", "500",
                             "--claims", "2"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "BENCH_MYSQL_URL": MYSQL_URL})
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert re.search(r"^claim of 500, id order: \d+ ms .* 1 hosts", answer.stdout, re.M), answer.stdout
    hosts = re.search(r"^claim of 500, across hosts: \d+ ms \(median of 2\); the first took (\d+) hosts", answer.stdout,
                      re.M)
    assert hosts and int(hosts.group(1)) > 1, answer.stdout
    name = re.search(r"in the database (batchd_bench_\w+)", answer.stdout).group(1)
    admin = MySQLdb.connect(**_admin_args())
    cur = admin.cursor()
    cur.execute("SHOW DATABASES LIKE %s", (name,))
    left = cur.fetchall()
    admin.close()
    assert not left


def test_a_master_feeds_the_queue_across_hosts_and_closes_the_batch(backend):
    """Through the master's refill: the first 50 tasks queued come from every host, and the batch still closes."""
    backend.create_tasks(tasks(others="grouped"))
    master, spider = make_master(backend, BATCH_TASK_HOST_FIELD="url", BATCH_PUSH_LIMIT=50)
    runtime = spider.runtime
    patrol_until(master, lambda: runtime.backend.leases.pending_count() > 0, message="the first refill")
    leased = [runtime.backend.leases.lease("test-worker", 60) for _ in range(5)]
    assert len({host_of(lease.task["url"]) for lease in leased}) == 5          # queued in the order picked
    runtime.backend.leases.give_back(leased)
    patrol_until(master, lambda: (work_off(runtime, {n: TaskState.DONE for n in range(1, 1001)}) or
                                  batch_done(backend)), timeout=60, message="the batch closed")
    assert set(backend.states().values()) == {TaskState.DONE}
