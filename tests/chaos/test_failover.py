"""Redis fails over mid-batch: a primary, a replica and three Sentinels of the test's own (tests/servers.py
SentinelGroup), a `batchd run` with a master and two workers on REDIS_URL=redis+sentinel://..., a standby
`batchd master`, and the primary SIGKILLed halfway through 3,000 tasks, with the replica cut off for the last
LAG seconds before: replication is asynchronous, so the promoted replica lacks the last writes (leases, queue
entries, tally increments, stats, lock renewals). The batch must end with the chaos verdict at the default
BATCH_LOST_TASK_STALE (no lost lease waited out), the workers leasing again soon after the Sentinels promote
the replica, and never two masters patrolling at once."""
import datetime
import json
import re
import time

import pytest

from chaos import CHAOS_SETTINGS, ChaosBatch
from harness import wait_for
from servers import SentinelGroup
from supervised import batchd, lines_with
from taskdb import MysqlBackend
from dashboards import Web

pytestmark = pytest.mark.chaos

TASKS = 3000
LAG = 0.8                      # seconds of writes the promoted replica never got (below the Sentinels' 1 s)
DEFAULT_STALE = 600.0          # BATCH_LOST_TASK_STALE's default: nothing may wait for it
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ master\[(\d+)\] (.*)$")
TOOK, STOPPED = "master of namespace", "patrols stop"       # (a line of its own; "waiting: X is master of...")


def master_spans(*procs) -> list:
    """(from, to, pid) of each time a master held the lock, from its log lines (to: None while it holds it)."""
    spans, holding = [], {}
    events = sorted((datetime.datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f"), int(m[2]), m[3])
                    for proc in procs for m in map(STAMP.match, proc.output().splitlines()) if m)
    for when, pid, text in events:
        if text.startswith(TOOK):
            holding[pid] = when
        elif STOPPED in text and pid in holding:
            spans.append((holding.pop(pid), when, pid))
    return sorted(spans + [(start, None, pid) for pid, start in holding.items()], key=lambda span: span[0])


def overlaps(spans: list) -> list:
    return [(a, b) for a, b in zip(spans, spans[1:]) if a[1] is None or a[1] > b[0]]


def test_a_failover_mid_batch_loses_nothing(mysql_url, site, procs, failed_items_path):
    with SentinelGroup() as group:
        backend = MysqlBackend(mysql_url, group.url(0), failed_items_path, group.sentinel_password)
        try:
            batch = ChaosBatch(procs, backend, site, tasks=TASKS, path="/slow?seconds=0.01&task={n}",
                               BATCH_LOST_TASK_STALE=DEFAULT_STALE)
            run = batch.start("run", "--workers", "2")
            web = Web(procs, backend, spider="spiders/seed.py:CrawlTask", **CHAOS_SETTINGS)
            wait_for(lambda: lines_with(run, f"] {TOOK}"), timeout=60, message="the master")
            standby = batch.start("master")
            wait_for(lambda: lines_with(standby, "waiting: "), timeout=60, message="the standby waiting")
            batch.wait_for_progress(TASKS // 2, timeout=180)
            old_port, settled_at_kill = group.primary_port(), batch.settled()
            killed = time.monotonic()
            group.kill_primary(lag=LAG)
            failover = group.wait_for_failover(old_port)
            batch.wait_for_progress(settled_at_kill + 50, timeout=failover + 60)
            leasing_again = time.monotonic() - killed
            batch.wait_closed(timeout=240)
            closed = time.monotonic() - killed
            # The supervisors' snapshots, the command and the dashboard all read the promoted replica.
            status = json.loads(batchd("status", "spiders/seed.py:CrawlTask", "--json", backend=backend).stdout)
            assert status["batch"]["is_done"] and status["hosts"] and not status["unreachable"], status
            wait_for(lambda: (web.api("status")["batch"] or {}).get("is_done"), timeout=15,
                     message="the dashboard following the failover")
            spans = master_spans(run, standby)
            verdict = batch.verdict(
                "Redis failover mid-batch (Sentinel)", failover=f"{failover:.1f} s",
                leasing_again_after=f"{leasing_again:.1f} s", closed_after_kill=f"{closed:.1f} s",
                settled_at_kill=settled_at_kill, lag=f"{LAG} s",
                rebuilt=len(lines_with(run, "rebuilt from the task table") + lines_with(standby, "rebuilt from")),
                done_twice=len(lines_with(run, "its lease was reclaimed")), master_spans=len(spans),
                warnings=len(lines_with(run, "WARNING")), tracebacks=len(lines_with(run, "Traceback")))
            verdict.assert_sound()
            assert leasing_again <= failover + 5, verdict.line()
            assert closed < DEFAULT_STALE / 4, "nothing waited for the stale sweep"
            assert not overlaps(spans), spans
            assert not lines_with(run, "Traceback") and not lines_with(standby, "Traceback"), run.output()[-3000:]
        finally:
            backend.close()
