"""Figures that are true now: the rate and the ETA of `batchd status` and STATUS= come from the batch's tally
over the last RATE_WINDOW (reporting/snapshots.py), not from the master's last patrol. A real batch on
MySQL + Redis and on SQLite, with patrols 30 s apart, measured against the task table's own counts."""
import json
import re
import signal
import time

import pytest

from batchd.reporting.snapshots import (LIFE_POINTS, MAX_SAMPLES, RATE_WINDOW, SettledSamples, rate_text, samples_of, status_line,
                                      window_rate)
from batchd.task import TaskState
from harness import wait_for
from supervised import SEED, NotifySocket, batchd, gated_urls, slow_urls, start_batchd

TASKS = 1200
GATED = 16                  # tasks at the end that wait at the site's gate: the batch cannot end before it is measured
STALE_PATROLS = 30.0        # BATCH_MONITOR_INTERVAL: the master's own figures are half a minute old
BATCH_LINE = re.compile(r"batch 1 (\d+)/(\d+) \((\d+\.\d) tasks/s over the last (\d+) s, ETA (\S+)\)")


class TableCounts:
    """The task table's settled rows, counted at each look: (Unix time, count) pairs to measure any window by."""

    def __init__(self, backend):
        self.backend, self.samples = backend, [(time.time(), 0)]

    def look(self) -> int:
        (count,), = self.backend.sql("SELECT COUNT(*) FROM crawl_task WHERE batch_status IN (%d, %d)"
                                     % (TaskState.DONE, TaskState.FAILED))
        self.samples.append((time.time(), count))
        return count

    def rate(self, start: float, end: float) -> float:
        """Tasks per second from the last count before `start` to the first after `end`."""
        before = max((s for s in self.samples if s[0] <= start), default=self.samples[0])
        after = min((s for s in self.samples if s[0] >= end), default=self.samples[-1])
        return (after[1] - before[1]) / (after[0] - before[0])


def test_rate_and_eta_follow_the_tally_mid_batch(shared_backend, site, procs):
    # The gated tasks come last (tests/httpserver.py /gated/<n>): however slowly the commands below run on a busy
    # machine, the batch is still open when they read it, and its rate is that of the last RATE_WINDOW.
    shared_backend.create_tasks(slow_urls(site, TASKS, seconds=0.1) + gated_urls(site, GATED))
    table = TableCounts(shared_backend)
    with NotifySocket() as notify:
        proc = start_batchd(procs, shared_backend, "run", "--workers", "2", BATCH_MONITOR_INTERVAL=STALE_PATROLS,
                            SPIDER_THREAD_COUNT=8, BATCH_PUSH_LIMIT=200, env=notify.env())
        wait_for(lambda: table.look() >= TASKS // 4, message="a quarter of the batch settled")
        status = json.loads(batchd("status", SEED, "--json", backend=shared_backend).stdout)
        (said_at, said), = notify.fields("STATUS=")[-1:]
        said_at += time.time() - time.monotonic()          # when it was sent, in Unix time like the table's counts
        table.look()                                        # a count after both windows measured
        text = batchd("status", SEED, backend=shared_backend).stdout
        table.look()
        site.gate.set()
        proc.send(signal.SIGTERM)
        assert proc.wait(30) == 0

    assert status["tasks"]["settled"] < TASKS + GATED
    end, seconds = status["rate_as_of"], status["rate_seconds"]
    assert 0 < seconds <= RATE_WINDOW + 1
    measured = table.rate(end - seconds, end)              # the table's own counts over the same window
    assert measured / 2 <= status["rate"] <= measured * 2, (status["rate"], measured)
    left = status["tasks"]["total"] - status["tasks"]["settled"]
    assert status["eta_seconds"] == pytest.approx(left / status["rate"])
    assert re.search(r"^rate     \d+\.\d tasks/s over the last \d+ s, ETA \d+(m\d\ds|s)$", text, re.M), text

    line = BATCH_LINE.search(said)                          # STATUS= says the same, from the same samples
    assert line, said
    settled, total, rate, over, eta = int(line[1]), int(line[2]), float(line[3]), int(line[4]), line[5]
    assert total == TASKS + GATED and 0 < settled < total and eta != "unknown" and 0 < over <= RATE_WINDOW + 1
    measured = table.rate(said_at - over, said_at)
    assert measured / 2 <= rate <= measured * 2, (said, measured)


def test_the_window_holds_the_last_30_seconds_and_says_when_nothing_settled():
    samples = SettledSamples()
    assert window_rate(list(samples.samples)) is None and samples.field() == "[]"
    for second in range(0, 61):                     # 10 tasks a second for a minute, a sample a second
        samples.add(7, 1000.0 + second, 10 * second)
    kept = samples_of({"batch_samples": samples.field()})
    assert kept[0][0] == 1000.0 + 60 - RATE_WINDOW and len(kept) == RATE_WINDOW + 1
    assert window_rate(kept) == (10.0, RATE_WINDOW)
    for second in range(61, 100):                   # paused: nothing settles any more
        samples.add(7, 1000.0 + second, 600)
    assert rate_text(window_rate(list(samples.samples))) == "0.0 tasks/s over the last 30 s"
    samples.add(8, 2000.0, 0)                       # a new batch starts its own window
    samples.add(8, 2004.0, 100)
    assert window_rate(list(samples.samples)) == (25.0, 4.0)


def test_samples_closer_than_the_window_allows_replace_each_other():
    samples = SettledSamples()
    for tenth in range(0, 1000):                    # STATUS_INTERVAL 0.1 for 100 s
        samples.add(1, tenth / 10, tenth)
    assert len(samples.samples) <= 2 * MAX_SAMPLES + 2
    rate, seconds = window_rate(list(samples.samples))
    assert rate == pytest.approx(10.0) and RATE_WINDOW <= seconds <= RATE_WINDOW + 1.1
    assert samples_of({"batch_samples": "not json"}) == [] and samples_of({}) == []


def test_a_batchs_life_is_kept_whole_thinned_to_a_bound_and_ends_at_its_close():
    """batch_life, the dashboard's chart: from the first sample to the last, at most LIFE_POINTS of them, however
    long the batch; its close adds the final count once; a new batch starts a new life."""
    samples = SettledSamples()
    for second in range(0, 36000):                  # ten hours at a sample a second
        samples.add(4, 1000.0 + second, second // 10)
    life = samples_of({"batch_life": samples.life_field()}, "batch_life")
    assert LIFE_POINTS // 2 <= len(life) <= LIFE_POINTS
    assert life[0] == (1000.0, 0) and life[-1] == (1000.0 + 35999, 3599)
    assert [t for t, _ in life] == sorted(t for t, _ in life)
    gaps = [b[0] - a[0] for a, b in zip(life, life[1:-1])]
    assert max(gaps) <= 2 * min(gaps), "evenly thinned, not one end kept dense"
    samples.close(40000.0, 3600)
    samples.close(40005.0, 3600)
    assert samples.life[-2:] == [(1000.0 + 35999, 3599), (40000.0, 3600)]
    samples.add(5, 50000.0, 0)
    assert samples.life == [(50000.0, 0)]


def test_status_line_takes_settled_rate_and_eta_from_the_samples_and_none_while_paused():
    samples = SettledSamples()
    samples.add(3, 1000.0, 100)
    samples.add(3, 1010.0, 300)                     # 20 tasks a second; the master's own figure says 50 settled
    batch = {"batch_id": 3, "batch_settled": 50, "batch_total": 900, "batch_samples": samples.field()}
    snapshot = {"role": "master", "workers_wanted": 0, "unflushed": 0}
    assert status_line("master", snapshot, batch) == \
        "master: batch 3 300/900 (20.0 tasks/s over the last 10 s, ETA 30s), 0 unflushed items"
    paused = status_line("master", snapshot, {**batch, "batch_paused_since": 1005.0})
    assert "(20.0 tasks/s over the last 10 s, ETA unknown)" in paused
    assert "(rate unknown yet, ETA unknown)" in status_line("master", snapshot, {**batch, "batch_samples": "[]"})
