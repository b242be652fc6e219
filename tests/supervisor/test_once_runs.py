"""`batchd run --once` runs in a row (issue 34): each ends at once, a worker started as the master exits
included; the next says nothing is due and what opens a batch now; a batch whose tasks all failed does not
exit 0; and the supervisor's loop does not spin while a child's exit status is on its way."""
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest

from batchd.service.lifecycle import StopFlag
from batchd.supervisor.child import Child, ChildSpec, Plan, enter_child, start_child
from batchd.supervisor.loader import SpiderSource
from batchd.supervisor.signal_inbox import SignalInbox
from batchd.supervisor.supervisor import Supervisor
from batchd.config import Settings
from batchd.settle.ledger import LedgerBlock
from batchd.task import TaskState
from supervised import lines_with, start_batchd
from taskdb import SqliteBackend

STOP_TIMEOUT = 10.0     # a worker that missed the stop would end at its cold stop, 15 s after
ENDS_WITHIN = 8.0       # a run --once of a tiny batch on a busy 2-core machine: well under that


@pytest.fixture
def sqlite_backend(tmp_path, failed_items_path):
    backend = SqliteBackend(tmp_path / "batchd.db", failed_items_path)
    yield backend
    backend.close()


def _child_started_late(inbox: SignalInbox, supervisor_pid: int) -> None:
    """A child the scheduler runs only after its stop was sent (a loaded machine): 0 if it sees the stop."""
    time.sleep(0.3)
    stop = enter_child(supervisor_pid, inbox.close)
    sys.exit(0 if stop.wait(5.0) else 1)


def test_a_child_sent_its_stop_before_it_has_its_handlers_still_stops():
    """The 95 s `run --once`: a SIGTERM that reached a child before enter_child reached the supervisor's
    handler copied into it (recorded in the child's copy of the inbox, and nothing else): the worker never
    stopped. Forked with the signals blocked, the child acts on it once its own handlers are in place."""
    inbox = SignalInbox()
    inbox.install()          # the supervisor's handlers and wake-up fd, which a fork copies
    try:
        process = multiprocessing.get_context("fork").Process(target=_child_started_late,
                                                              args=(inbox, os.getpid()))
        start_child(process)
        os.kill(process.pid, signal.SIGTERM)         # the warm stop, at once
        started = time.monotonic()
        process.join(10)
        assert process.exitcode == 0, f"the child missed its stop (exit {process.exitcode})"
        assert time.monotonic() - started < 3
        assert list(inbox.take()) == [], "the child's signal is not the supervisor's"
    finally:
        inbox.restore()


def test_runs_in_a_row_each_end_at_once(sqlite_backend, site, procs):
    """12 `run --once` with 3 workers each (4 s on a quiet machine): a tiny batch every sixth run, nothing due in the others,
    whose master exits as soon as it starts, while its workers are still starting (the moment of the 95 s runs):
    none waits for a cold stop. (Before the fix, 2 runs in about 16 hung; the test above forces the moment.)"""
    sqlite_backend.create_tasks([site.url("/page/1"), site.url("/page/2")])
    slowest = 0.0
    for run in range(12):
        if run % 6 == 0 and run:
            sqlite_backend.age_last_batch(days=7)
        started = time.monotonic()
        proc = start_batchd(procs, sqlite_backend, "run", "--once", "--workers", "3", STOP_TIMEOUT=STOP_TIMEOUT)
        code = proc.wait(STOP_TIMEOUT + 20)
        took = time.monotonic() - started
        slowest = max(slowest, took)
        assert code == 0, f"run {run + 1}: exit {code}\n{proc.output()[-3000:]}"
        assert took < ENDS_WITHIN and "cold stop" not in proc.output(), \
            f"run {run + 1} took {took:.1f} s\n{proc.output()[-3000:]}"
        proc.stop()
    assert len(sqlite_backend.records()) == 2 and sqlite_backend.records()[-1]["is_done"], slowest


def test_a_second_run_once_says_nothing_is_due_and_what_opens_a_batch_now(sqlite_backend, site, procs):
    sqlite_backend.create_tasks([site.url("/page/1")])
    assert start_batchd(procs, sqlite_backend, "run", "--once", "--workers", "1").wait(60) == 0
    started = time.monotonic()
    second = start_batchd(procs, sqlite_backend, "run", "--once", "--workers", "1")
    assert second.wait(60) == 0, second.output()
    assert time.monotonic() - started < ENDS_WITHIN
    said = lines_with(second, "no batch due")
    assert len(said) == 1 and "batch 1 has finished" in said[0] and "batchd open-batch opens one now" in said[0]

    opened = start_batchd(procs, sqlite_backend, "open-batch")      # what it names: no master runs, it opens
    assert opened.wait(30) == 0 and "batch 2 opened at" in opened.output(), opened.output()
    assert start_batchd(procs, sqlite_backend, "run", "--once", "--workers", "1").wait(60) == 0
    assert [r["is_done"] for r in sqlite_backend.records()] == [True, True]
    assert site.hits("/page/1") == 2


def test_a_run_once_whose_tasks_all_failed_exits_1(sqlite_backend, site, procs):
    sqlite_backend.create_tasks([site.url("/status/404"), site.url("/status/410")])
    proc = start_batchd(procs, sqlite_backend, "run", "--once", "--workers", "1")
    assert proc.wait(60) == 1, proc.output()
    assert lines_with(proc, "0 tasks done, 2 failed")
    assert set(sqlite_backend.states().values()) == {TaskState.FAILED}


class _Exiting:
    """A child's process whose sentinel has fired (a pipe whose write end is shut) and whose exit status is
    not there yet; its pid a sleeper of the test's own, should anything be sent to it."""

    def __init__(self):
        self.sentinel, write = os.pipe()
        os.close(write)
        self.sleeper = subprocess.Popen(["sleep", "30"])
        self.pid, self.exitcode = self.sleeper.pid, None

    def close(self):
        os.close(self.sentinel)
        self.sleeper.kill()
        self.sleeper.wait()


def test_the_loop_does_not_spin_while_a_childs_exit_status_is_on_its_way():
    """The end of a --once run: ~100 turns within 5 ms, each woken at once by the sentinel of a child whose
    exit status was not there yet. Such a child is polled, from EXIT_POLL up to TICK apart."""
    supervisor = Supervisor(Plan("worker"), SpiderSource("spiders/seed.py:CrawlTask"))
    supervisor.settings = Settings()
    supervisor.block = LedgerBlock(0, 2, 8)
    supervisor.block.prepare(0)          # a fresh heartbeat: no escalation in the test's 0.3 s
    supervisor.stopping = True
    process = _Exiting()
    spec = ChildSpec(role="worker", number=1, row=0, once=True, keep_alive=True, name="worker 1", title="t")
    supervisor.children = [Child(spec=spec, process=process, spawned_at=time.monotonic(),  # type: ignore[arg-type]
                                 retiring_since=time.monotonic())]
    try:
        turns, started = 0, time.monotonic()
        while time.monotonic() - started < 0.3:
            supervisor._turn()
            turns += 1
        assert turns < 20, f"{turns} turns in 0.3 s"
        assert supervisor.children, "not reaped before its exit status is there"
    finally:
        process.close()
