"""What the supervisor tells systemd, captured on a real AF_UNIX datagram NOTIFY_SOCKET with the
sender's pid (SO_PASSCRED) and when it sent each (the kernel's stamp, SO_TIMESTAMPNS: the watchdog's rhythm
is measured at the sender, not at a reading thread a busy machine delays), as systemd receives it: READY,
WATCHDOG at half of WATCHDOG_USEC, STATUS, STOPPING with EXTEND_TIMEOUT_USEC, RELOADING then READY; and only ever from the supervisor."""
import multiprocessing
import os
import re
import signal
import statistics
import time

from batchd.supervisor.child import ChildSpec
from batchd.config import Settings
from batchd.settle.ledger import LedgerBlock
from batchd.supervisor.loader import SpiderSource
from batchd.supervisor.supervisor import KILL_GRACE, Child, Plan, Supervisor
from batchd.service.systemd import Notifier, watchdog_usec
from harness import wait_for
from supervised import NotifySocket, children_of, lines_with, slow_urls, start_batchd, workers_of

WATCHDOG_USEC = 1_000_000          # WatchdogSec=1: a WATCHDOG=1 every 0.5 s


def intervals(stamps: list) -> list:
    return [later - earlier for earlier, later in zip(stamps, stamps[1:])]


def test_ready_watchdog_status_and_stopping_come_from_the_supervisor_alone(mysql_backend, site, procs):
    mysql_backend.create_tasks(slow_urls(site, 40, seconds=0.2))
    with NotifySocket() as notify:
        proc = start_batchd(procs, mysql_backend, "run", "--workers", "2", BATCH_PUSH_LIMIT=10,
                            env=notify.env(WATCHDOG_USEC=WATCHDOG_USEC))
        (ready_at, _), = notify.wait_for("READY=1")
        assert len(children_of(proc.pid)) == 3          # READY=1 once the master and both workers run
        ready_status = [f for t, f in notify.fields("STATUS=") if t == ready_at]
        assert ready_status and "workers 2/2 alive" in ready_status[0]

        # A worker frozen mid-batch is replaced; the watchdog goes on meanwhile (it is being replaced).
        frozen = workers_of(proc.pid)[0]
        os.kill(frozen, signal.SIGSTOP)
        wait_for(lambda: lines_with(proc, f"(pid {frozen}) was killed by SIGABRT") or
                 lines_with(proc, f"(pid {frozen}) was killed by SIGSEGV while dumping its stacks after SIGABRT"), timeout=40,
                 message="the frozen worker replaced")
        wait_for(lambda: len(workers_of(proc.pid)) == 2, message="its replacement")
        replaced_at = time.monotonic()
        wait_for(lambda: len([t for t, _ in notify.fields("WATCHDOG=1") if t > replaced_at]) >= 2,
                 message="the watchdog going on after the replacement")
        watchdogs = [t for t, _ in notify.fields("WATCHDOG=1")]
        gaps = intervals(watchdogs)
        assert len(watchdogs) >= 8
        assert 0.45 <= statistics.median(gaps) <= 0.7, gaps
        assert max(gaps) < WATCHDOG_USEC / 1e6, gaps           # systemd never saw a second without one

        statuses = [field for _, field in notify.fields("STATUS=")]
        assert len(statuses) >= 6                              # every STATUS_INTERVAL (0.5 s)
        # Until the master's first patrol is in its ledger row the batch is "?".
        # Once the batch is over, its result and when the next is due.
        line = re.compile(rf"STATUS=run {mysql_backend.namespace}: batch (\?|"
                          r"\d+ \d+/40 \((rate unknown yet|\d+\.\d tasks/s over the last \d+ s), ETA \S+\)|"
                          r"1 finished: 40 done, 0 failed of 40; next due \d{4}-\d\d-\d\d \d\d:\d\d), "
                          r"workers \d/2 alive, \d+ done \d+ failed here \(\d+\.\d/s\), \d+ unflushed items$")
        assert all(line.match(status) for status in statuses), [s for s in statuses if not line.match(s)]
        assert "batch ?" not in statuses[-1], statuses

        proc.send(signal.SIGTERM)
        assert proc.wait(30) == 0
        stopping, = notify.wait_for("STOPPING=1")
        extends = notify.wait_for("EXTEND_TIMEOUT_USEC=")
        assert int(extends[0][1].split("=")[1]) >= 5_000_000 and extends[0][0] >= stopping[0]
        assert notify.senders() == {proc.pid}                 # children never notify
    assert lines_with(proc, "WatchdogSec=1s is below 2 x (CHILD_TIMEOUT 3 s + kill grace 5 s)")


def test_a_reload_is_announced_reloading_then_ready(mysql_backend, site, procs):
    mysql_backend.create_tasks([site.url("/page/1")])
    with NotifySocket() as notify:
        proc = start_batchd(procs, mysql_backend, "worker", "--workers", "1", env=notify.env())
        notify.wait_for("READY=1")
        old_worker = workers_of(proc.pid)
        proc.send(signal.SIGHUP)
        reloading, = notify.wait_for("RELOADING=1")
        ready = notify.wait_for("READY=1", count=2)
        assert ready[1][0] > reloading[0]
        assert workers_of(proc.pid) and workers_of(proc.pid) != old_worker
        assert any(f.startswith("MONOTONIC_USEC=") for t, f in notify.fields("") if t == reloading[0])
        proc.send(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert notify.senders() == {proc.pid}


def test_the_watchdog_rule_fresh_or_being_replaced(tmp_path):
    """The rule behind WATCHDOG=1, on a real ledger row and a real child process."""
    supervisor = Supervisor(Plan("worker"), SpiderSource(str(tmp_path / "spider.py:Spider")), Notifier())
    supervisor.settings = Settings(CHILD_TIMEOUT=3.0)
    supervisor.block = LedgerBlock(0, 1, 1)
    process = multiprocessing.get_context("fork").Process(target=time.sleep, args=(30,))
    process.start()
    try:
        spec = ChildSpec(role="worker", number=1, row=0, once=False, keep_alive=True, name="worker 1", title="t")
        child = Child(spec=spec, process=process, spawned_at=time.monotonic())
        supervisor.children = [child]
        supervisor.block.prepare(0)
        now = time.monotonic()
        assert supervisor.healthy(now)                              # fresh
        supervisor.block.row(0).heartbeat = now - 4.0
        assert not supervisor.healthy(now)                          # silent and nobody acting on it
        child.aborted_since = now
        assert supervisor.healthy(now)                              # being replaced (SIGABRT sent)
        child.killed_since = now - 1.0
        assert supervisor.healthy(now)                              # SIGKILL sent, within the grace
        child.killed_since = now - KILL_GRACE - 1.0
        assert not supervisor.healthy(now)                          # SIGKILL did not end it: stuck
    finally:
        process.kill()
        process.join()
        supervisor.signals.close()


def test_the_notifier_is_silent_without_notify_socket(monkeypatch):
    with NotifySocket() as notify:
        monkeypatch.setenv("WATCHDOG_USEC", "2000000")
        silent = Notifier()                                          # no NOTIFY_SOCKET: nothing sent
        silent.ready("up")
        silent.watchdog()
        assert not silent.enabled and silent.watchdog_interval == 1.0
        monkeypatch.setenv("NOTIFY_SOCKET", notify.path)
        Notifier().ready("up")
        notify.barrier()                                             # all that was sent has come
        assert [fields for _, _, fields in notify.messages] == [["READY=1", "STATUS=up"]]


def test_the_watchdog_is_only_ours_when_watchdog_pid_says_so():
    assert watchdog_usec({"WATCHDOG_USEC": "4000000"}) == 4_000_000
    assert watchdog_usec({"WATCHDOG_USEC": "4000000", "WATCHDOG_PID": str(os.getpid())}) == 4_000_000
    assert watchdog_usec({"WATCHDOG_USEC": "4000000", "WATCHDOG_PID": "1"}) == 0
    assert watchdog_usec({}) == 0
