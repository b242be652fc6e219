"""The chaos suite's faults of the site and the network (`pytest -m chaos`; common ground in
tests/chaos.py): a batch of 1,000 tasks, 2+ workers run by real `batchd` processes, and the same
verdict at the end: 0 tasks lost, 0 done without their items, 0 duplicate item rows, the batch closed.

- A flapping site (/flap/<n> of tests/httpserver.py): 30 % of the hits are dropped connections, 503s,
  stalls past REQUEST_TIMEOUT or resets mid-body. Most tasks are done after retries; those whose every
  attempt met a fault fail, each with a line naming its URL and the reason.
- A dead host and a flapping one beside a fast one: the dead host (a socket that accepts and never
  answers) opens its breaker and is spared, its tasks failing at once with one reason once
  HOST_DOWN_GIVE_UP has passed; the flapping host's tasks are done after retries or fail; the fast
  host's are all done.
- A network partition (tests/netns.py): one worker in a network namespace is cut off, silently, for
  longer than its lease while it holds tasks; the master reclaims them and the host's worker does them;
  after the heal, the cut-off worker's late write-backs are refused (its leases were reclaimed).
"""
import os
import re
import signal
import time
from collections import Counter

import pytest

from batchd.task import TaskState
from batchd.worker.prefetch import worker_token_prefix
from chaos import ChaosBatch
from harness import wait_for
from httpserver import FLAP_FAULTS, DeadHost, TestSite, flap_fault
from netns import Partition
from servers import PrivateMariaDB, PrivateRedis
from supervised import DAEMON_SETTINGS, SEED, batchd_command, lines_with, workers_of
from taskdb import MysqlBackend

pytestmark = pytest.mark.chaos

TASKS = 1000
LEASE_LINES = re.compile(r"reclaimed|gave back|killed|exited|replaced|lease")
FLAP_SEED = "chaos-network"
FLAP_RETRIES = 3                 # SPIDER_MAX_RETRY_TIMES: a task fails when all 4 attempts meet a fault
PARTITION_LEASE = 3.0            # BATCH_LOST_TASK_STALE: the cut outlasts it
REFUSED = "its lease was reclaimed before the write-back; the new holder owns it"


def test_a_flapping_site(mysql_backend, site, procs):
    """Every hit's fault is known in advance (flap_fault), so the tasks that must fail are known too:
    those whose 1 + SPIDER_MAX_RETRY_TIMES attempts all met one. A success that came too slowly for
    REQUEST_TIMEOUT on a busy machine is one more attempt, never a wrong state: a task fails only once
    its attempts are spent."""
    # Retries alone, counted exactly: a breaker would spare some attempts (test_a_dead_and_a_flapping_host...).
    batch = ChaosBatch(procs, mysql_backend, site, tasks=TASKS, path=f"/flap/{{n}}?seed={FLAP_SEED}",
                       REQUEST_TIMEOUT=1.0, DOWNLOAD_TIMEOUT=2.0, SPIDER_MAX_RETRY_TIMES=FLAP_RETRIES,
                       SPIDER_THREAD_COUNT=8, HOST_BREAKER_FAILURES=0)
    run = batch.start("run", "--workers", "2", "--once")
    assert run.wait(240) == 1, run.output()[-3000:]       # the doomed tasks failed: --once ends 1
    batch.wait_closed()

    urls = dict(mysql_backend.sql("SELECT `id`, `url` FROM `crawl_task`"))
    hits = {task: site.hits(f"/flap/{task}") for task in urls}
    answers = {task: [flap_fault(FLAP_SEED, task, hit) for hit in range(1, count + 1)] for task, count in hits.items()}
    faults = Counter(fault for got in answers.values() for fault in got if fault is not None)
    attempts = FLAP_RETRIES + 1
    doomed = {task for task in urls if all(flap_fault(FLAP_SEED, task, hit) for hit in range(1, attempts + 1))}
    spent = {task for task, got in answers.items() if len(got) == attempts}
    failed = {task for task, state in mysql_backend.states().items() if state == TaskState.FAILED}
    verdict = batch.verdict("a flapping site", hits=sum(hits.values()), faulty_hits=sum(faults.values()),
                            dropped=faults["drop"], http_503=faults["503"], stalled=faults["stall"],
                            reset_mid_body=faults["reset"], retries=sum(hits.values()) - len(hits),
                            retries_exhausted=len(failed))
    verdict.assert_sound(failed=len(spent))
    assert all(faults[kind] for kind in FLAP_FAULTS), faults
    over = {task: count for task, count in hits.items() if count > attempts}
    assert min(hits.values()) >= 1 and not over, (
        f"each task leased once, retried within bounds; over: {over}; what the run said of them: "
        f"{[line for line in run.output().splitlines() if any(f'task {t} ' in line for t in over)]}; "
        f"its leases and children: {[line for line in run.output().splitlines() if LEASE_LINES.search(line)]}")
    assert doomed, "the seed gives some tasks no good answer"
    assert doomed <= failed, "a task whose every attempt met a fault cannot be done"
    assert failed <= spent, "a task fails only with its retries spent"
    for task in failed:
        line = lines_with(run, f"task {task} failed: GET {urls[task]}: ")
        assert len(line) == 1 and f"after {attempts} attempts" in line[0], (task, line)


BREAKER_THREADS, BREAKER_FAILURES, BREAKER_PROBE, DOWN_GIVE_UP = 8, 5, 0.2, 4.0


def test_a_dead_and_a_flapping_host_beside_a_fast_one(mysql_backend, site, procs):
    """Every tenth task is the dead host's, every tenth but one the flapping host's (/flap/<n> on the site
    under the name localhost), the rest the fast host's. Without breakers the dead host would take 4
    attempts of REQUEST_TIMEOUT from each of its 100 tasks; with them it sees the failures that open its
    breaker in each worker, and the probes."""
    with DeadHost() as dead:
        batch = ChaosBatch(procs, mysql_backend, site, tasks=0, REQUEST_TIMEOUT=0.5, DOWNLOAD_TIMEOUT=1.0,
                           SPIDER_MAX_RETRY_TIMES=FLAP_RETRIES, SPIDER_THREAD_COUNT=BREAKER_THREADS,
                           HOST_BREAKER_FAILURES=BREAKER_FAILURES, HOST_BREAKER_PROBE=BREAKER_PROBE,
                           HOST_BREAKER_PROBE_MAX=1.0, HOST_DOWN_GIVE_UP=DOWN_GIVE_UP)
        kinds = {}
        for n in range(1, TASKS + 1):
            kinds[n] = "dead" if n % 10 == 1 else "flap" if n % 10 == 2 else "fast"
            mysql_backend.add_task({"dead": dead.url(f"/item/{n}"),
                                    "flap": site.url(f"/flap/{n}?seed={FLAP_SEED}").replace("127.0.0.1", "localhost"),
                                    "fast": site.url(f"/page/{n}")}[kinds[n]])
        run = batch.start("run", "--workers", "2", "--once")
        assert run.wait(240) == 1, run.output()[-3000:]   # the dead host's tasks failed: --once ends 1
        batch.wait_closed()
        accepted = dead.accepted

    states = mysql_backend.states()
    of = {kind: {task for task, k in kinds.items() if k == kind} for kind in ("dead", "flap", "fast")}
    failed = {task for task, state in states.items() if state == TaskState.FAILED}
    reasons = {row["reason"] for (_, task), row in mysql_backend.failures().items() if task in of["dead"]}
    alerts = lines_with(run, "ALERT host_down")
    probes_most = int(DOWN_GIVE_UP / BREAKER_PROBE) + 2
    verdict = batch.verdict("a dead and a flapping host beside a fast one", dead_host_connections=accepted,
                            dead_failed=len(failed & of["dead"]), flap_failed=len(failed & of["flap"]),
                            flap_hits=sum(site.hits(f"/flap/{task}") for task in of["flap"]),
                            fast_done=len(of["fast"] - failed), host_down_alerts=len(alerts))
    verdict.assert_sound(failed=len(of["dead"]) + len(of["flap"]))
    assert not failed & of["fast"], "the fast host's tasks are all done"
    assert of["dead"] <= failed and len(reasons) == 1, reasons
    reason, = reasons
    assert reason.startswith("host 127.0.0.1:") and reason.endswith(f"(HOST_DOWN_GIVE_UP={DOWN_GIVE_UP:g} s)")
    assert len(alerts) == 1 and reason in alerts[0], alerts
    assert accepted <= 2 * (BREAKER_FAILURES + BREAKER_THREADS) + probes_most, accepted


def test_a_worker_partitioned_past_its_lease(tmp_path, procs):
    """One worker in a network namespace, the master and another worker on the host, every server on
    the host side of the veth pair. The cut comes while the namespaced worker holds leases; the heal
    only once every task it held is done by the host's worker."""
    with Partition() as net, PrivateRedis(host=net.host_ip) as redis_server, \
            PrivateMariaDB(host=net.host_ip) as db, TestSite(host=net.host_ip) as site:
        backend = MysqlBackend(db.create_database(), redis_server.url(0), str(tmp_path / "failed_items.jsonl"))
        try:
            partitioned_run(net, backend, site, procs)
        finally:
            backend.close()


def partitioned_run(net, backend, site, procs) -> None:
    # A short queue: the reclaimed tasks are claimed again at once, not pushed behind the whole batch.
    batch = ChaosBatch(procs, backend, site, tasks=TASKS, path="/slow?seconds=0.1&task={n}",
                       BATCH_LOST_TASK_STALE=PARTITION_LEASE, BATCH_PUSH_LIMIT=100)
    host = batch.start("run", "--workers", "1")
    env = backend.env(**{**DAEMON_SETTINGS, **batch.settings})
    env["BATCHD_CONFIG"] = os.devnull
    inside = net.popen(batchd_command("worker", SEED, "--workers", "1"), env=env)
    wait_for(lambda: len(held_by(backend, inside)) >= 2 and batch.settled() >= 100, timeout=60,
             message="the namespaced worker holding tasks, 100 tasks settled")

    cut_at = time.monotonic()
    net.cut()
    held = held_by(backend, inside)       # it can change nothing in Redis any more
    assert held, "the namespaced worker held tasks at the cut"
    wait_for(lambda: all(state == TaskState.DONE for task, state in backend.states().items() if task in held),
             timeout=60, message="the cut-off worker's tasks reclaimed and done on the host")
    cut_seconds = time.monotonic() - cut_at
    net.heal()

    batch.wait_closed(timeout=120)
    refused = wait_for(lambda: held <= refused_tasks(inside) and refused_tasks(inside), timeout=60,
                       message="the cut-off worker's late write-backs refused")
    reclaimed = sum(int(n) for n in re.findall(r"reclaimed (\d+) tasks whose lease expired", host.output()))
    for proc in (host, inside):
        proc.send(signal.SIGTERM)
    assert host.wait(60) == 0, host.output()[-3000:]
    assert inside.wait(60) == 0, inside.output()[-3000:]
    verdict = batch.verdict("a worker partitioned past its lease", held_at_cut=len(held), leases_reclaimed=reclaimed,
                            late_write_backs_refused=len(refused), cut_s=round(cut_seconds, 1),
                            lease_s=PARTITION_LEASE)
    verdict.assert_sound()
    assert refused == held, "refused: exactly the write-backs of the tasks held at the cut"
    assert reclaimed >= len(held) and cut_seconds > PARTITION_LEASE


def held_by(backend, proc) -> set:
    """Ids of the tasks whose lease a worker of this supervisor holds, as Redis says."""
    import redis
    prefixes = tuple(worker_token_prefix(pid) for pid in workers_of(proc.pid))
    owners = redis.Redis.from_url(backend.redis_url).hgetall(f"{backend.namespace}:lease_owner")
    return {int(key) for key, token in owners.items() if prefixes and token.decode().startswith(prefixes)}


def refused_tasks(proc) -> set:
    return {int(line.split("task ")[1].split(":")[0]) for line in lines_with(proc, REFUSED)}
