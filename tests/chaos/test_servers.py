"""The chaos suite (`pytest -m chaos`), part two: faults of the servers and of the master's host.

Each scenario runs a batch of at least 1,000 tasks with 2+ workers in real `batchd` processes,
breaks one thing in the middle, and ends with the suite's verdict (tests/chaos.py): 0 tasks lost,
0 done without their items, 0 duplicate item rows, the batch closed. A scenario that stops a
server stops one of its own (tests/servers.py), never the shared 127.0.0.1:3306 / :6379.

- the active master SIGKILLed with its supervisor, mid-batch, then mid-reset, while a standby
  master waits for the namespace's lock;
- a Redis without persistence restarted mid-batch: the queue, the leases and the lock gone;
- a MariaDB down for 30 s mid-batch, with ITEM_FLUSH_GIVE_UP shorter than the outage;
- a MariaDB in read-only mode while the failed-items disk is full or read-only.
"""
import json
import os
import re
import signal
import subprocess
import time
from contextlib import contextmanager

import pytest

from batchd.config import Settings
from batchd.task import TaskState
from chaos import ChaosBatch
from harness import stays_true, wait_for
from servers import PrivateMariaDB, PrivateRedis, fill_disk
from supervised import children_of, lines_with, status_snapshot
from taskdb import MysqlBackend

pytestmark = pytest.mark.chaos

D, P, R = TaskState.DONE, TaskState.PENDING, TaskState.PROCESSING


def sigkill_tree(proc) -> None:
    """SIGKILL a `batchd` supervisor and its children as a host that dies would: the supervisor is
    frozen first, so that it respawns nothing, and its children die before it, so that none of them
    gets the SIGTERM of PR_SET_PDEATHSIG and stops warm (a warm master gives its lock back)."""
    os.kill(proc.pid, signal.SIGSTOP)
    for child in children_of(proc.pid):
        os.kill(child, signal.SIGKILL)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


def count(backend, state) -> int:
    return backend.sql(f"SELECT COUNT(*) FROM `{backend.table}` WHERE `batch_status` = %s", (int(state),))[0][0]


@contextmanager
def row_locked(backend, task_id):
    """A transaction of the test's own holding task `task_id`'s row lock (FOR UPDATE) until exit."""
    import MySQLdb
    from batchd.backends.mysql_redis.mysql import parse_mysql_url
    conn = MySQLdb.connect(**parse_mysql_url(backend.mysql_url))
    try:
        conn.begin()
        conn.cursor().execute(f"SELECT * FROM `{backend.table}` WHERE `id` = %s FOR UPDATE", (task_id,))
        yield
        conn.rollback()
    finally:
        conn.close()


def batch_closed(backend, batch_id: int = 1) -> bool:
    records = backend.records()
    return len(records) >= batch_id and records[batch_id - 1]["is_done"]


def tasks_with_items_of(backend, batch_id: int) -> int:
    return backend.sql(f"SELECT COUNT(DISTINCT `task_id`) FROM `{backend.table}_item` WHERE `batch_id` = %s",
                       (batch_id,))[0][0]


# -- 1. the master's host dies, mid-batch and mid-reset
def became_master(proc) -> bool:
    """The master took the lock ("waiting: <holder> is master of namespace ..." is a standby's line)."""
    return bool(lines_with(proc, "] master of namespace"))


def test_the_master_sigkilled_mid_batch_and_mid_reset_while_a_standby_waits(mysql_backend, site, procs):
    """One master per namespace: the standby takes the lock once the dead master's TTL has run out
    (MASTER_LOCK_TIMEOUT=5 s) and carries the batch on. Killed mid-reset (BATCH_RESET_CHUNK=1: a
    first chunk of one row), the master leaves a half-reset table, its cursor in the batch record: the
    next master finishes the reset from there before it claims anything, so every task of batch 2 is
    crawled again and no row is reset twice (the rows already claimed are not set back)."""
    batch = ChaosBatch(procs, mysql_backend, site, tasks=1000, path="/slow?seconds=0.05&task={n}",
                       BATCH_PUSH_LIMIT=100, BATCH_RESET_CHUNK=1)
    first = batch.start("master")
    wait_for(lambda: became_master(first), timeout=60, message="the first master")
    standby = batch.start("master")
    wait_for(lambda: lines_with(standby, "waiting: "), timeout=60, message="the standby waiting for the lock")
    workers = batch.start("worker", "--workers", "2")
    batch.wait_for_progress(300)

    sigkill_tree(first)
    killed = time.monotonic()
    settled_at_kill = batch.settled()
    wait_for(lambda: became_master(standby), timeout=60, message="the standby's takeover")
    takeover_mid_batch = time.monotonic() - killed
    batch.wait_closed()
    assert tasks_with_items_of(mysql_backend, 1) == 1000

    # Batch 2 is due; a new standby waits; the master is killed while it resets the table. The
    # test holds a row lock on task 500, so the reset stops at the chunk that holds it (the claims
    # feed the workers from the rows before it meanwhile): the kill lands mid-reset whatever the
    # machine's speed.
    second_standby = batch.start("master")
    wait_for(lambda: lines_with(second_standby, "waiting: "), timeout=60, message="a new standby")
    with row_locked(mysql_backend, 500):
        mysql_backend.age_last_batch(days=8)
        wait_for(lambda: lines_with(standby, "opening a new batch"), timeout=60, message="the reset started")
        reset_by_the_killed = wait_for(steady_for(lambda: reset_walked(mysql_backend, 2), 1.0), timeout=60,
                                       message="the reset held at the chunk of row 500")
        assert 0 < reset_by_the_killed < 500
        sigkill_tree(standby)
        killed = time.monotonic()
    wait_for(lambda: became_master(second_standby), timeout=60, message="the second takeover")
    takeover_mid_reset = time.monotonic() - killed
    resumed = wait_for(lambda: lines_with(second_standby, "batch 2 reset: "), timeout=60, message="batch 2 reset")
    going_on = lines_with(second_standby, "going on with its reset after id")
    reset_by_the_next = int(re.search(r"batch 2 reset: (\d+) rows walked", resumed[0]).group(1))
    batch.wait_closed(batch=2)
    workers.send(signal.SIGTERM)
    second_standby.send(signal.SIGTERM)
    assert workers.wait(60) == 0 and second_standby.wait(60) == 0

    verdict = batch.verdict("the master SIGKILLed mid-batch and mid-reset", settled_at_kill=settled_at_kill,
                            takeover_mid_batch=f"{takeover_mid_batch:.1f} s",
                            takeover_mid_reset=f"{takeover_mid_reset:.1f} s",
                            rows_reset_by_the_killed_master=reset_by_the_killed,
                            rows_reset_by_the_next=reset_by_the_next)
    verdict.assert_sound()
    assert f"after id {reset_by_the_killed} ({reset_by_the_killed} rows walked" in going_on[0], \
        "the next master went on from where the killed one stopped"
    assert reset_by_the_killed + reset_by_the_next == 1000, "no row reset twice, none left out"
    assert tasks_with_items_of(mysql_backend, 2) == 1000, "every task crawled again in batch 2"


def steady_for(read, seconds: float):
    """A condition for wait_for: `read()` has given the same true value for `seconds` (that value)."""
    seen = {"value": None, "since": time.monotonic()}

    def steady():
        value, now = read(), time.monotonic()
        if value != seen["value"]:
            seen.update(value=value, since=now)
            return None
        return value if value and now - seen["since"] >= seconds else None
    return steady


def reset_walked(backend, batch_id: int) -> int:
    """Rows the reset of a batch has walked, as its record keeps them (0 before it has a record)."""
    rows = backend.sql("SELECT `reset_cursor` FROM `crawl_task_batch_record` WHERE `id` = %s", (batch_id,))
    return json.loads(rows[0][0])[1] if rows and rows[0][0] else 0


# -- helpers for the outages
def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process and its children have used so far."""
    total = 0.0
    for each in [pid] + children_of(pid):
        try:
            with open(f"/proc/{each}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


LOG_LINE = re.compile(r"\S+ \S+ [A-Z]+ .+?\[(\d+)\] ")     # date time LEVEL role[pid] message


def lines_per_process(text: str, needle: str) -> dict:
    """pid -> how many lines of `text` containing `needle` that process logged (any of its threads)."""
    counts: dict = {}
    for line in text.splitlines():
        found = LOG_LINE.match(line)
        if found and needle in line:
            pid = int(found.group(1))
            counts[pid] = counts.get(pid, 0) + 1
    return counts


def in_workers_hands(backend) -> int:
    """Tasks the workers hold (leased, not yet written back), as the supervisor's snapshot says."""
    return int(status_snapshot(backend).get("in_flight", 0))


def failed_items_left(backend) -> list:
    """The lines left in FAILED_ITEMS_PATH and in the files a replay claimed or set aside beside it."""
    folder, name = os.path.split(backend.failed_items_path)
    left = []
    for entry in sorted(os.listdir(folder)):
        if entry.startswith(name):
            with open(os.path.join(folder, entry), encoding="utf-8") as f:
                left += [f"{entry}: {line}" for line in f if line.strip()]
    return left


# -- 2. Redis restarted with its data gone
def test_redis_restarted_empty_mid_batch(mysql_url, site, procs, failed_items_path):
    """A Redis without persistence comes back empty: the queue, the leases, the attempts and the
    master's lock are gone. The master takes its lock again and, at its first patrol on a server it has not
    seen (backends' forget_if_memory_changed), sets every task in processing back to pending from the task
    table, at the default BATCH_LOST_TASK_STALE: nothing waits for a lease or the stale sweep. Write-backs of
    leases that vanished are not written (no lease, no write): those tasks are crawled again."""
    with PrivateRedis() as redis_server:
        backend = MysqlBackend(mysql_url, redis_server.url(0), failed_items_path)
        try:
            batch = ChaosBatch(procs, backend, site, tasks=1000, path="/slow?seconds=0.05&task={n}",
                               BATCH_LOST_TASK_STALE=Settings.BATCH_LOST_TASK_STALE,
                               BATCH_MONITOR_INTERVAL=Settings.BATCH_MONITOR_INTERVAL)
            run = batch.start("run", "--workers", "2")
            batch.wait_for_progress(300)
            redis_server.stop()
            down = time.monotonic()
            settled_at_stop = batch.settled()
            wait_for(lambda: len(lines_per_process(run.output(), "; waiting for it")) >= 3, timeout=30,
                     message="the master and both workers waiting for Redis")
            redis_server.start()
            back = time.monotonic()
            batch.wait_closed(timeout=120)
            closed = time.monotonic()
            run.send(signal.SIGTERM)
            assert run.wait(60) == 0, run.output()[-3000:]
            reset = sum(int(re.search(r"(\d+) tasks in processing set back", line).group(1))
                        for line in lines_with(run, "rebuilt from the task table"))
            verdict = batch.verdict("Redis restarted empty mid-batch", settled_at_stop=settled_at_stop,
                                    outage=f"{back - down:.1f} s", closed_after_redis_back=f"{closed - back:.1f} s",
                                    orphans_reset=reset,
                                    lock_taken_again=len(lines_with(run, "] master of namespace")) - 1,
                                    write_backs_skipped=len(lines_with(run, "its lease was reclaimed")))
            verdict.assert_sound()
            assert reset > 0, "tasks no queue held were reset"
            assert closed - back < Settings.BATCH_MONITOR_INTERVAL + 15, "one patrol and a few seconds"
            assert tasks_with_items_of(backend, 1) == 1000
        finally:
            backend.close()


# -- 3. MariaDB down for 30 s
OUTAGE = 30.0
LEASE = 600.0        # longer than the rest of the run: no lease may have to expire


def test_mariadb_down_30_s_mid_batch(private_mysql, site, procs):
    """The outage is waited out quietly (one WARNING per process when it starts, one INFO with its
    length when it ends) and cheaply; flushes give up after ITEM_FLUSH_GIVE_UP=3 s and dump their
    items to FAILED_ITEMS_PATH; once MariaDB is back the postponed write-backs land at once (no lease
    expires: BATCH_LOST_TASK_STALE is 600 s) and the worker replays the dumped items by itself."""
    db, backend = private_mysql
    batch = ChaosBatch(procs, backend, site, tasks=1000, path="/slow?seconds=0.05&task={n}",
                       BATCH_LOST_TASK_STALE=LEASE, ITEM_FLUSH_GIVE_UP=3)
    run = batch.start("run", "--workers", "2")
    batch.wait_for_progress(300)
    children = children_of(run.pid)
    backend.conn.close()
    db.stop()
    down = time.monotonic()
    logged_before, cpu_before = len(run.output()), cpu_seconds(run.pid)
    # The fault itself, watched all through: the same children wait it out, one WARNING each at most.
    stays_true(lambda: children_of(run.pid) == children
               and set(lines_per_process(run.output(), "; waiting for it").values()) <= {1},
               OUTAGE, interval=0.5, message="the outage waited out by the same children, quietly",
               explain=lambda: run.output()[-3000:])
    wait_for(lambda: lines_with(run, "instead ("), timeout=30, message="items dumped to FAILED_ITEMS_PATH")
    cpu_down = cpu_seconds(run.pid) - cpu_before
    during = run.output()[logged_before:]
    db.start()
    back = time.monotonic()
    backend.reconnect()
    done_at_back = count(backend, D)
    first_done = wait_for(lambda: count(backend, D) > done_at_back and time.monotonic(), timeout=60,
                          interval=0.1, message="the postponed write-backs landing")
    batch.wait_closed(timeout=LEASE / 4)
    closed = time.monotonic()
    wait_for(lambda: not failed_items_left(backend), timeout=60, message="the dumped items replayed")
    run.send(signal.SIGTERM)
    assert run.wait(60) == 0, run.output()[-3000:]
    output = run.output()
    warnings = lines_per_process(output, "; waiting for it")
    back_lines = lines_per_process(output, "MySQL is back after")
    dumped = sum(int(line.split(" items of ")[0].rsplit(" ", 1)[1]) for line in lines_with(run, "instead ("))
    verdict = batch.verdict("MariaDB down 30 s mid-batch", outage=f"{back - down:.1f} s",
                            warnings=sum(warnings.values()), back_lines=sum(back_lines.values()),
                            lines_logged_during_outage=len(during.splitlines()),
                            cpu_during_outage=f"{cpu_down:.2f} s", items_dumped=dumped,
                            first_write_back_after=f"{first_done - back:.1f} s",
                            closed_after_back=f"{closed - back:.1f} s")
    verdict.assert_sound()
    assert sorted(warnings) == children and set(warnings.values()) == {1}, f"one WARNING per process: {warnings}"
    assert sorted(back_lines) == children and set(back_lines.values()) == {1}, f"one INFO per process: {back_lines}"
    assert cpu_down < 0.1 * OUTAGE, "waiting out an outage costs next to no CPU"
    assert dumped > 0 and tasks_with_items_of(backend, 1) == 1000
    assert first_done - back < 15, "the postponed write-backs land once MariaDB is back, not after a long backoff"
    assert not lines_with(run, "whose lease expired") and not lines_with(run, "that no queue holds")


# -- 4. the failed-items disk refusing while MariaDB is read-only
def break_disk(disk, how: str) -> None:
    if how == "full":
        fill_disk(disk)
    else:
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)


def heal_disk(disk, how: str) -> None:
    if how == "full":
        os.unlink(disk / "filler")
    else:
        subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)


def set_read_only(db, on: bool) -> None:
    conn = db.connect()
    try:
        conn.cursor().execute(f"SET GLOBAL read_only = {'ON' if on else 'OFF'}")
    finally:
        conn.close()


def user_without_super(db) -> str:
    """A database and a user with every privilege on it, but none global: read_only applies to it
    (root's READ_ONLY ADMIN would let it write on)."""
    name = db.create_database().rsplit("/", 1)[1]
    conn = db.connect()
    try:
        cur = conn.cursor()
        cur.execute("CREATE USER 'batchd'@'%' IDENTIFIED BY 'chaos'")
        cur.execute(f"GRANT ALL PRIVILEGES ON `{name}`.* TO 'batchd'@'%'")
    finally:
        conn.close()
    return f"mysql://batchd:chaos@{db.host}:{db.port}/{name}"


def eventually(predicate, timeout: float, message: str) -> bool:
    """wait_for, as a finding instead of a failure: the scenario goes on to its verdict either way."""
    try:
        wait_for(predicate, timeout=timeout, interval=0.2, message=message)
        return True
    except AssertionError:
        return False


# (how the disk refuses, what is healed first)
DISK_AND_SERVER = [("full", "server"), ("read-only", "disk")]


@pytest.mark.parametrize("disk_fault, healed_first", DISK_AND_SERVER, ids=["full-server-healed-first",
                                                                           "read-only-disk-healed-first"])
def test_failed_items_disk_refusing_while_mariadb_is_read_only(disk_fault, healed_first, redis_url, site, procs,
                                                               small_disk):
    """A read-only MariaDB (MySQL error 1290 for a user without READ_ONLY ADMIN) is an outage: flushes
    wait ITEM_FLUSH_GIVE_UP=2 s, then dump to FAILED_ITEMS_PATH, on a tmpfs that is full or read-only:
    the items stay in memory, and nothing is marked done (the write-backs meet the read-only server
    too). Healed, the items land and the batch closes sound; both orders of healing:
    - the server first: the database takes the items the disk would not, while the disk still refuses;
    - the disk first: the items go to the file, nothing is marked done until the server is back, then
      the write-backs land and the worker replays the file by itself.
    The outage is waited out as quietly as any other (at most one WARNING and one INFO a process)."""
    with PrivateMariaDB() as db:
        backend = MysqlBackend(user_without_super(db), redis_url, str(small_disk / "failed_items.jsonl"))
        try:
            batch = ChaosBatch(procs, backend, site, tasks=1000, path="/slow?seconds=0.05&task={n}",
                               BATCH_LOST_TASK_STALE=LEASE, ITEM_FLUSH_GIVE_UP=2)
            run = batch.start("run", "--workers", "2")
            batch.wait_for_progress(300)
            children = children_of(run.pid)
            break_disk(small_disk, disk_fault)
            set_read_only(db, True)
            started, logged_before = time.monotonic(), len(run.output())
            done_at_fault = count(backend, D)
            wait_for(lambda: len(lines_per_process(run.output(), "cannot append")) >= 2, timeout=60,
                     message="both workers' dumps refused by the disk")
            processing, in_hand = count(backend, R), in_workers_hands(backend)
            landed_while_the_disk_refused = None
            if healed_first == "server":
                done_during = count(backend, D) - done_at_fault
                set_read_only(db, False)
                landed_while_the_disk_refused = eventually(lambda: count(backend, D) > done_at_fault, timeout=30,
                                                           message="items and write-backs landing in the database")
                heal_disk(small_disk, disk_fault)
            else:
                heal_disk(small_disk, disk_fault)
                wait_for(lambda: len(lines_per_process(run.output(), "instead (")) >= 2, timeout=60,
                         message="both workers' items dumped once the disk takes them")
                done_during = count(backend, D) - done_at_fault      # items dumped, write-backs refused
                set_read_only(db, False)
            healed = time.monotonic()
            during = run.output()[logged_before:]
            closed = eventually(lambda: batch_closed(backend), timeout=120, message="the batch closed")
            closed_after = time.monotonic() - healed
            replayed = eventually(lambda: not failed_items_left(backend), timeout=30, message="the file replayed")
            run.send(signal.SIGTERM)
            assert run.wait(60) == 0, run.output()[-3000:]
            warnings = lines_per_process(run.output(), "; waiting for it")
            verdict = batch.verdict(f"failed-items disk {disk_fault} while MariaDB is read-only, "
                                    f"{healed_first} healed first",
                                    fault=f"{healed - started:.1f} s", processing_during_fault=processing,
                                    in_the_workers_hands=in_hand,
                                    done_during_fault=done_during, closed_after_heal=f"{closed_after:.1f} s",
                                    items_landed_while_the_disk_refused=landed_while_the_disk_refused,
                                    lines_logged_during_fault=len(during.splitlines()),
                                    outage_warnings=sum(warnings.values()),
                                    items_left_in_the_file=len(failed_items_left(backend)))
            assert closed, "the batch closed"
            verdict.assert_sound()
            assert done_during == 0, "nothing marked done while the server is read-only"
            assert landed_while_the_disk_refused in (None, True), \
                "the database, back, takes the items the disk refused (the worker does not wait for the disk)"
            assert replayed, f"the worker replays the dumped items by itself: {failed_items_left(backend)[:3]}"
            assert tasks_with_items_of(backend, 1) == 1000
            assert set(warnings) <= set(children) and max(warnings.values()) == 1, \
                f"one WARNING per process for the outage: {warnings}"
        finally:
            backend.close()
