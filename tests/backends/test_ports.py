"""The ports' contracts (batchd/ports.py), one suite on every backend.

Each test states one guarantee a port's docstring gives and runs it on memory, MySQL + Redis and
SQLite (real MariaDB and Redis, no mocks), through the Backend that `batchd.backends.open_backend`
gives for settings naming that backend: the same door the Runtime goes through. Whatever must
happen in time (a lease or a lock running out, a snapshot's TTL) is waited for as a condition
(`wait_for`); whatever must never happen is asserted at the end of a wait for something else.
"""
import dataclasses
import inspect
import json
import multiprocessing
import os
import threading
import time
import typing
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from decimal import Decimal

import pytest

from batchd.backends import open_backend, open_supervisor_ports
from batchd.config import load_settings
from batchd.errors import BackendUnavailable
from batchd.backends.ports import Backend, HostBreakers, HostRates, MasterLock, SupervisorPorts
from batchd.backends.store import BatchStore
from backend_ports import LONG, SHORT, opener, ports, pushed, rows, shared_opener  # noqa: F401  (fixtures)
from harness import wait_for

FORK = multiprocessing.get_context("fork")
RACERS = 8           # threads started at once against one port


def as_foreign(lease, token="intruder:1"):
    """The same task under a token that does not hold it."""
    return dataclasses.replace(lease, token=token)


def at_once(action, count=RACERS) -> list:
    """Run `action(n)` in `count` threads released together; their results in thread order (a thread's
    exception is raised here)."""
    barrier = threading.Barrier(count)

    def run(n):
        barrier.wait(30)
        return action(n)

    with ThreadPoolExecutor(max_workers=count) as pool:
        futures = [pool.submit(run, n) for n in range(count)]
        return [future.result(timeout=60) for future in futures]


# -- LeaseQueue
def test_lease_takes_pending_tasks_in_push_order_with_their_rows(ports):
    queue = ports.leases
    assert (queue.pending_count(), queue.leased_count()) == (0, 0)
    assert queue.lease("w:0", LONG) is None
    first = {"id": 1, "url": "http://x.invalid/1", "seen": datetime(2024, 5, 6, 7, 8, 9), "price": Decimal("9.50")}
    queue.push(7, [first] + rows(2, 3), "id")
    queue.push(8, rows(4), "id")
    queue.push(8, [], "id")
    assert (queue.pending_count(), queue.leased_count()) == (4, 0)
    taken = [queue.lease(f"w:{n}", LONG) for n in range(4)]
    assert [lease.task_id for lease in taken] == [1, 2, 3, 4]
    assert [lease.batch_id for lease in taken] == [7, 7, 7, 8]
    assert [lease.token for lease in taken] == ["w:0", "w:1", "w:2", "w:3"]
    assert [lease.queue_left for lease in taken] == [3, 2, 1, 0]
    assert taken[0].task == first and taken[3].task == rows(4)[0]     # the row, its types kept
    assert queue.lease("w:4", LONG) is None
    assert (queue.pending_count(), queue.leased_count()) == (0, 4)


def test_queue_counts_a_task_moving_between_pending_and_leased_once(ports):
    """The master adds the two to the tally to see how much of the batch is left; read one after the
    other, a task leased (or handed back) in between was counted twice (or not at all), and the
    batch's total rose past its rows (a fresh-clone CI saw 42 of 40)."""
    queue = ports.leases
    queue.push(1, rows(*range(1, 9)), "id")
    stop = threading.Event()

    def lease_and_hand_back(n: int) -> None:
        while not stop.is_set():
            lease = queue.lease(f"w:{n}", LONG)
            if lease is not None:
                queue.hand_back([lease])

    movers = [threading.Thread(target=lease_and_hand_back, args=(n,)) for n in range(4)]
    for mover in movers:
        mover.start()
    seen: list = []
    try:
        wait_for(lambda: seen.append(queue.queue_counts()) or (len(seen) >= 300 and any(leased for _, leased in seen)),
                 interval=0, message="300 readings, some while tasks were leased")
    finally:
        stop.set()
        for mover in movers:
            mover.join(30)
    assert {pending + leased for pending, leased in seen} == {8}


def test_lease_many_takes_several_in_one_step_each_with_its_token(ports):
    queue = ports.leases
    pushed(queue, 1, 2, 3, 4, 5)
    taken = queue.lease_many(["w:a", "w:b", "w:c"], LONG)
    assert [(lease.task_id, lease.token, lease.queue_left) for lease in taken] == \
        [(1, "w:a", 4), (2, "w:b", 3), (3, "w:c", 2)]
    assert [lease.task_id for lease in queue.lease_many(["w:d", "w:e", "w:f"], LONG)] == [4, 5]
    assert queue.lease_many(["w:g"], LONG) == []
    assert queue.leased_count() == 5 and queue.release(taken[:1]) == taken[:1]
    assert queue.release([as_foreign(taken[1])]) == []             # each lease is its own token's


def test_threads_leasing_many_at_once_never_get_the_same_task(ports):
    pushed(ports.leases, *range(1, 21))
    taken = at_once(lambda n: ports.leases.lease_many([f"w:{n}:{k}" for k in range(3)], LONG))
    ids = [lease.task_id for leases in taken for lease in leases]
    assert sorted(ids) == list(range(1, 21))


def test_threads_leasing_at_once_never_get_the_same_task(ports):
    queue, count = ports.leases, 300
    pushed(queue, *range(1, count + 1))

    def lease_all(n):
        got = []
        while (lease := queue.lease(f"thread{n}:{len(got)}", LONG)) is not None:
            got.append(lease.task_id)
        return got

    taken = at_once(lease_all)
    everything = [task_id for got in taken for task_id in got]
    assert sorted(everything) == list(range(1, count + 1))
    assert (queue.pending_count(), queue.leased_count()) == (0, count)


def _lease_all_in_child(settings, namespace, barrier, out_path):
    """In a forked child: a backend of its own, leasing until the list is empty; what it got, to a file."""
    backend = open_backend(settings, namespace)
    barrier.wait(30)
    got = []
    while (lease := backend.leases.lease(f"{os.getpid()}:{len(got)}", LONG)) is not None:
        got.append(lease.task_id)
    backend.close()
    with open(out_path, "w") as f:
        json.dump(got, f)


def test_processes_leasing_at_once_never_get_the_same_task(shared_opener, tmp_path):
    queue, count, children = shared_opener.open().leases, 1000, 4
    pushed(queue, *range(1, count + 1))
    barrier = FORK.Barrier(children)
    outs = [str(tmp_path / f"leased-{n}.json") for n in range(children)]
    procs = [FORK.Process(target=_lease_all_in_child, args=(shared_opener.settings, shared_opener.namespace,
                                                              barrier, out)) for out in outs]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert [proc.exitcode for proc in procs] == [0] * children
    taken = []
    for out in outs:
        with open(out) as f:
            taken.append(json.load(f))
    assert sorted(task_id for got in taken for task_id in got) == list(range(1, count + 1))
    assert sum(1 for got in taken if got) > 1, "one child leased everything: no contention tested"
    assert (queue.pending_count(), queue.leased_count()) == (0, count)


def test_renew_returns_only_owned_leases_and_pushes_their_deadlines_back(ports):
    queue = ports.leases
    pushed(queue, 1, 2, 3)
    a, b = queue.lease("w:1", SHORT), queue.lease("w:1", SHORT)
    c = queue.lease("w:2", LONG)
    assert queue.renew([], LONG) == []
    assert queue.renew([a, as_foreign(b), c], LONG) == [a, c]
    # b's deadline, no earlier than a's first one, passes: b (renewed by a stranger only) is reclaimed, a is not.
    assert wait_for(lambda: queue.reclaim_expired(10), timeout=10, message="b's lease to expire") == [b.key]
    assert queue.renew([b], LONG) == []
    assert queue.release([a, c]) == [a, c]
    assert queue.renew([a, c], LONG) == []


def test_release_returns_only_the_leases_still_owned(ports):
    queue = ports.leases
    pushed(queue, 1, 2)
    old = queue.lease("old:1", SHORT)
    other = queue.lease("w:2", LONG)
    assert wait_for(lambda: queue.reclaim_expired(10), timeout=10, message="the old lease to expire") == [old.key]
    queue.push(1, [old.task], "id")                     # the master pushes the reclaimed task again
    new = queue.lease("new:1", LONG)
    assert new.task_id == old.task_id
    assert queue.release([as_foreign(other)]) == [] and queue.leased_count() == 2
    assert queue.release([old, new, other]) == [new, other]   # the old holder's write-back must not happen
    assert queue.release([new]) == [] and queue.release([]) == []
    assert queue.leased_count() == 0


def test_give_back_makes_owned_leases_due_at_once_and_ignores_foreign_tokens(ports):
    queue = ports.leases
    pushed(queue, 1, 2, 3)
    a, b, c = queue.lease("w:1", LONG), queue.lease("w:1", LONG), queue.lease("w:2", LONG)
    assert queue.reclaim_expired(10) == []
    assert queue.give_back([]) == 0
    assert queue.give_back([a, b, as_foreign(c)]) == 2
    assert sorted(queue.reclaim_expired(10)) == sorted([a.key, b.key])     # at the very next call
    assert queue.give_back([a]) == 0                                        # no longer owned
    assert queue.reclaim_expired(10) == []
    assert queue.release([c]) == [c]


def test_hand_back_puts_owned_tasks_at_the_queues_tail_and_ends_their_leases(ports):
    queue = ports.leases
    pushed(queue, 1, 2, 3)
    a, b = queue.lease("w:1", LONG), queue.lease("w:1", LONG)
    c = queue.lease("w:2", LONG)
    pushed(queue, 4)
    assert queue.hand_back([]) == []
    assert queue.hand_back([b, a, as_foreign(c)]) == [b, a]
    assert queue.leased_count() == 1 and queue.pending_count() == 3
    assert sorted(queue.known([a.key, b.key, c.key])) == sorted([a.key, b.key, c.key])   # queued or leased
    again = [queue.lease("w:3", LONG) for _ in range(3)]
    assert [lease.task_id for lease in again] == [4, b.task_id, a.task_id]   # behind what was queued
    assert [lease.batch_id for lease in again] == [1, 1, 1] and again[2].task == a.task
    assert queue.hand_back([a]) == [] and queue.release([a]) == []        # a's old lease is over
    assert queue.reclaim_expired(10) == []


def test_expire_leases_of_matches_the_token_prefix_only(ports):
    queue = ports.leases
    tokens = ["web1:12:0", "web1:12:1", "web1:123:0", "web2:12:0", "web1_12:0", "x:web1:12:0"]
    pushed(queue, *range(1, len(tokens) + 2))
    held = [queue.lease(token, LONG) for token in tokens]
    # No wildcard, no substring: "_" and "%" are plain characters, and the prefix must lead the token.
    for stranger in ("web_:12:", "web1%", "%", ":12:", "web1:12:0:"):
        assert queue.expire_leases_of(stranger) == 0, stranger
    assert queue.reclaim_expired(10) == []
    assert queue.expire_leases_of("web1:12:") == 2
    assert sorted(queue.reclaim_expired(10)) == sorted([held[0].key, held[1].key])
    assert queue.pending_count() == 1                    # a waiting task holds no lease
    assert queue.release(held[2:]) == held[2:]


def test_reclaim_expired_respects_the_limit_and_never_touches_a_waiting_task(ports):
    queue = ports.leases
    pushed(queue, *range(1, 7))
    held = [queue.lease("w:1", LONG) for _ in range(3)]
    short = queue.lease("w:2", SHORT)                       # tasks 5 and 6 wait in the list
    assert queue.give_back(held) == 3
    reclaimed = queue.reclaim_expired(2)
    assert len(reclaimed) == 2
    wait_for(lambda: reclaimed.extend(queue.reclaim_expired(5)) or len(reclaimed) >= 4, timeout=10,
             message="the given-back lease and the short one to be reclaimed")
    assert sorted(reclaimed) == ["1", "2", "3", "4"] and short.key == "4"
    assert queue.reclaim_expired(10) == []
    # Tasks 5 and 6 waited longer than the short lease lasted: still waiting, still known, never reclaimed.
    assert queue.pending_count() == 2 and queue.known(["5", "6"]) == {"5", "6"}
    assert [queue.lease("w:3", LONG).task_id for _ in range(2)] == [5, 6]


def test_known_sees_pending_and_leased_keys_and_no_other(opener, ports):
    queue = ports.leases
    assert queue.known([]) == set()
    pushed(queue, 1, 2, 3)
    opener.other_namespace().leases.push(1, rows(9), "id")
    a = queue.lease("w:1", LONG)
    assert queue.known(["1", "2", "3", "4", "9"]) == {"1", "2", "3"}
    assert queue.release([a]) == [a]
    assert queue.known(["1", "2", "3"]) == {"2", "3"}
    b = queue.lease("w:1", LONG)
    assert queue.give_back([b]) == 1 and queue.reclaim_expired(10) == [b.key]
    assert queue.known(["1", "2", "3"]) == {"3"}


def test_known_sees_a_task_moving_from_the_list_to_a_lease(ports):
    queue, count = ports.leases, 500
    pushed(queue, *range(1, count + 1))
    keys = [str(i) for i in range(1, count + 1)]
    leasing = threading.Thread(target=lambda: [queue.lease("mover:1", LONG) for _ in range(count)])
    leasing.start()
    looks = []
    while leasing.is_alive() or not looks:
        looks.append(len(queue.known(keys)))
    leasing.join()
    assert set(looks) == {count}, f"a key held pending or leased went unseen in {sum(n != count for n in looks)} looks"
    assert queue.leased_count() == count


def test_count_attempts_adds_one_per_task_and_namespace(opener, ports):
    queue = ports.leases
    assert queue.count_attempts([]) == []
    assert queue.count_attempts([1, 2]) == [1, 1]
    assert queue.count_attempts([1]) == [2]
    assert queue.count_attempts([2, 3, 1]) == [2, 1, 3]
    assert opener.other_namespace().leases.count_attempts([1]) == [1]


def test_clear_batch_forgets_the_batch_of_its_namespace_only(opener, ports):
    queue, other = ports.leases, opener.other_namespace()
    for backend in (ports, other):
        pushed(backend.leases, 1, 2, 3)
        backend.leases.count_attempts([1])
        backend.leases.set_done(1)
        assert backend.seen.first_seen(1, "fp")
    held = queue.lease("w:1", LONG)
    queue.clear_batch()
    assert (queue.pending_count(), queue.leased_count(), queue.is_done()) == (0, 0, False)
    assert queue.known(["1", "2", "3"]) == set()
    assert queue.release([held]) == [] and queue.reclaim_expired(10) == []
    assert queue.lease("w:2", LONG) is None
    assert queue.count_attempts([1]) == [1]
    assert ports.seen.first_seen(1, "fp")
    assert (other.leases.pending_count(), other.leases.is_done()) == (3, True)
    assert other.leases.count_attempts([1]) == [2] and not other.seen.first_seen(1, "fp")


def test_the_done_flag_is_set_and_read(opener, ports):
    queue = ports.leases
    assert not queue.is_done()
    queue.set_done(3)
    assert queue.is_done() and opener.open().leases.is_done()
    assert not opener.other_namespace().leases.is_done()


def test_describe_names_the_queue_and_ping_answers(opener, ports):
    queue = ports.leases
    assert isinstance(queue.describe(), str) and queue.describe()
    assert isinstance(queue.backend_name, str) and queue.backend_name
    assert queue.namespace == opener.namespace
    assert queue.ping() is None
    assert ports.store.describe()


def test_describe_and_an_outage_never_show_a_password(mysql_url):
    secret = "s3cret-pw"
    host_part = mysql_url.split("@", 1)[1]
    for redis_url in (f"redis://:{secret}@127.0.0.1:6379/9", f"redis://batchd:{secret}@127.0.0.1:6379/9"):
        settings = load_settings({"MYSQL_URL": f"mysql://root:{secret}@{host_part}", "REDIS_URL": redis_url})
        backend = open_backend(settings, "tp-password")
        try:
            assert secret not in backend.leases.describe() and "127.0.0.1:6379" in backend.leases.describe()
            assert secret not in backend.store.describe()
        finally:
            backend.close()
    # A Redis that is down: ping raises BackendUnavailable, and its message hides the password too.
    down = load_settings({"MYSQL_URL": mysql_url, "REDIS_URL": f"redis://:{secret}@127.0.0.1:1/9"})
    backend = open_backend(down, "tp-password")
    try:
        with pytest.raises(BackendUnavailable) as raised:
            backend.leases.ping()
        assert secret not in str(raised.value) and "127.0.0.1:1" in str(raised.value)
    finally:
        backend.close()


# -- MasterLocks
def test_one_master_holds_the_lock_at_a_time_and_only_the_owner_releases_it(ports):
    locks = ports.locks
    first, second = locks.master_lock("host1:10", LONG), locks.master_lock("host2:20", LONG)
    assert locks.lock_holder() is None                      # nothing is taken until acquire()
    assert first.acquire() and not second.acquire()
    assert locks.lock_holder() == "host1:10"
    assert first.renew() and not second.renew()
    second.release()                                        # not the owner: nothing happens
    assert locks.lock_holder() == "host1:10" and first.renew()
    first.release()
    assert locks.lock_holder() is None and not first.renew()
    assert second.acquire() and locks.lock_holder() == "host2:20"
    second.release()


def test_masters_racing_for_the_lock_one_wins(ports):
    locks = ports.locks
    won = at_once(lambda n: locks.master_lock(f"host{n}:1", LONG).acquire())
    assert won.count(True) == 1
    assert locks.lock_holder() == f"host{won.index(True)}:1"


def test_an_expired_lock_is_taken_over_and_its_stalled_holder_can_neither_renew_nor_release_it(ports):
    locks = ports.locks
    lapsed = locks.master_lock("lapsed:1", SHORT)
    assert lapsed.acquire()
    wait_for(lambda: locks.lock_holder() is None, timeout=10, message="the lock to lapse")
    assert not lapsed.renew()                               # it ran out: no longer its holder's
    stalled, successor = locks.master_lock("stalled:2", SHORT), locks.master_lock("successor:3", LONG)
    assert stalled.acquire()
    wait_for(successor.acquire, timeout=10, message="the stalled master's lock to be taken over")
    assert locks.lock_holder() == "successor:3"
    assert not stalled.renew()
    stalled.release()
    assert locks.lock_holder() == "successor:3" and successor.renew()
    successor.release()


# -- WakeChannel
def test_wake_ups_pile_up_as_one_and_each_is_consumed(ports):
    wake = ports.wake
    for _ in range(3):
        wake.wake_master()
    assert wake.wait_for_wake(5)
    assert not wake.wait_for_wake(0.2)


def test_wait_for_wake_times_out_with_false(ports):
    started = time.monotonic()
    assert ports.wake.wait_for_wake(0.3) is False
    assert 0.25 <= time.monotonic() - started < 3


def test_a_waiting_master_is_woken_by_another_thread_of_its_namespace_only(opener, ports):
    wake, woken = ports.wake, {}
    opener.other_namespace().wake.wake_master()
    assert not wake.wait_for_wake(0.2)
    waiter = threading.Thread(target=lambda: woken.update(result=wake.wait_for_wake(30)))
    waiter.start()
    opener.open().wake.wake_master()                        # another client of the same namespace
    waiter.join(10)
    assert not waiter.is_alive() and woken["result"] is True


# -- StatusBoard
def test_snapshots_are_written_replaced_read_and_deleted(opener, ports):
    board = ports.board
    assert board.read_statuses() == []
    board.write_status("host1:1", {"role": "worker", "pid": "12", "done": "3"}, LONG)
    board.write_status("host2:1", {"role": "master", "pid": "20"}, LONG)

    def by_pid():
        return sorted(board.read_statuses(), key=lambda s: s["pid"])

    assert by_pid() == [{"role": "worker", "pid": "12", "done": "3"}, {"role": "master", "pid": "20"}]
    board.write_status("host1:1", {"role": "worker", "pid": "13"}, LONG)    # replaced, not merged
    assert by_pid() == [{"role": "worker", "pid": "13"}, {"role": "master", "pid": "20"}]
    assert sorted(s["pid"] for s in opener.open().board.read_statuses()) == ["13", "20"]
    board.delete_status("host1:1")
    board.delete_status("host9:1")                          # not there: nothing to do
    assert board.read_statuses() == [{"role": "master", "pid": "20"}]


def test_a_snapshot_disappears_after_its_ttl(ports):
    board = ports.board
    board.write_status("host1:1", {"role": "worker"}, 0.8)
    board.write_status("host2:1", {"role": "master"}, LONG)
    assert sorted(s["role"] for s in board.read_statuses()) == ["master", "worker"]   # there until its ttl
    wait_for(lambda: [s["role"] for s in board.read_statuses()] == ["master"], timeout=10,
             message="the short-lived snapshot to disappear")


def test_namespaces_do_not_see_each_others_snapshots(opener, ports):
    board, other = ports.board, opener.other_namespace().board
    board.write_status("host1:1", {"role": "worker", "ns": "mine"}, LONG)
    other.write_status("host1:1", {"role": "worker", "ns": "theirs"}, LONG)
    assert board.read_statuses() == [{"role": "worker", "ns": "mine"}]
    assert other.read_statuses() == [{"role": "worker", "ns": "theirs"}]
    other.delete_status("host1:1")
    assert board.read_statuses() == [{"role": "worker", "ns": "mine"}] and other.read_statuses() == []


# -- SeenFilter
def test_a_fingerprint_is_seen_first_once_per_batch_and_namespace(opener, ports):
    seen = ports.seen
    assert seen.first_seen(1, "fp-a") and not seen.first_seen(1, "fp-a")
    assert seen.first_seen(1, "fp-b")
    assert seen.first_seen(2, "fp-a") and not seen.first_seen(2, "fp-a")
    assert not seen.first_seen(1, "fp-a")                  # batch 1 still remembers it
    assert opener.other_namespace().seen.first_seen(1, "fp-a")


def test_threads_seeing_a_fingerprint_at_once_one_is_first(ports):
    firsts = at_once(lambda n: ports.seen.first_seen(1, "fp-race"))
    assert firsts.count(True) == 1


# -- NamespaceRecord
def test_the_first_claim_of_a_namespace_wins_and_looking_records_nothing(opener, ports):
    record = ports.namespaces
    assert record.claim_namespace("MySQL db1:3306/a table t", record=False) is None   # unclaimed; only looked
    assert record.claim_namespace("MySQL db2:3306/b table t") is None                 # the first claim
    assert record.claim_namespace("MySQL db2:3306/b table t") is None                 # ours
    assert record.claim_namespace("MySQL db1:3306/a table t") == "MySQL db2:3306/b table t"
    assert record.claim_namespace("MySQL db1:3306/a table t", record=False) == "MySQL db2:3306/b table t"
    assert opener.open().namespaces.claim_namespace("MySQL db1:3306/a table t") == "MySQL db2:3306/b table t"
    assert opener.other_namespace().namespaces.claim_namespace("MySQL db1:3306/a table t") is None


def test_stores_claiming_a_namespace_at_once_one_wins(ports):
    answers = at_once(lambda n: ports.namespaces.claim_namespace(f"store {n}"))
    assert answers.count(None) == 1
    winner = f"store {answers.index(None)}"
    assert set(answers) == {None, winner}


# -- BatchTally
def test_a_tally_is_held_from_its_setting_and_adds_what_write_backs_moved(opener, ports):
    tally = ports.tally
    tally.set_settled(5, 0, 0)
    assert tally.settled(5) == (0, 0)
    tally.add_settled(5, 3, 1)
    tally.add_settled(5, 2, 0)
    assert tally.settled(5) == (5, 1)
    assert tally.settled(6) is None                              # a batch never set is not held
    assert opener.other_namespace().tally.settled(5) is None     # nor another namespace's
    tally.set_settled(5, 40, 2)                                  # a reconciliation overwrites
    assert tally.settled(5) == (40, 2)


def test_tallies_added_to_from_many_threads_at_once_lose_nothing(ports):
    ports.tally.set_settled(1, 0, 0)
    at_once(lambda n: [ports.tally.add_settled(1, 1, n % 2) for _ in range(25)])
    assert ports.tally.settled(1) == (RACERS * 25, RACERS // 2 * 25)


def test_restoring_a_tally_adds_the_records_figures_to_what_came_since_unless_held(ports):
    tally = ports.tally
    tally.add_settled(9, 2, 1)             # write-backs after the tally was lost (Redis restarted empty)
    assert tally.settled(9) is None
    tally.restore_settled(9, 100, 10)
    assert tally.settled(9) == (102, 11)
    tally.restore_settled(9, 100, 10)      # held now: nothing is added twice
    assert tally.settled(9) == (102, 11)


# -- the bundles
def protocol_fields(bundle) -> dict:
    """The fields of a bundle dataclass typed by a Protocol, with that Protocol."""
    hints = typing.get_type_hints(bundle)
    return {f.name: hints[f.name] for f in dataclasses.fields(bundle) if getattr(hints[f.name], "_is_protocol", False)}


def assert_fulfils(port, protocol) -> None:
    """`port` has every method of `protocol`, callable with the Protocol's arguments (by position and by
    name, its defaults optional) and asking for no other; and every attribute it declares, of its type."""
    name = f"{type(port).__name__} as {protocol.__name__}"
    for attribute, kind in vars(protocol).get("__annotations__", {}).items():
        assert isinstance(getattr(port, attribute, None), kind), f"{name}: attribute {attribute} missing"
    methods = {k: v for k, v in vars(protocol).items() if inspect.isfunction(v) and not k.startswith("_")}
    assert methods, protocol
    for method, declared in methods.items():
        implemented = getattr(port, method, None)
        assert callable(implemented), f"{name}: no method {method}()"
        wanted = list(inspect.signature(declared).parameters.values())[1:]          # without self
        given = inspect.signature(implemented).parameters                           # bound: no self
        positional = [p.name for p in given.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        assert positional[:len(wanted)] == [p.name for p in wanted], f"{name}.{method}: arguments differ"
        for p in wanted:
            if p.default is not p.empty:
                assert given[p.name].default is not p.empty, f"{name}.{method}: {p.name} is not optional"
        extra = [p.name for p in given.values() if p.name not in {w.name for w in wanted}
                 and p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        assert not extra, f"{name}.{method}: asks for {extra} too"


def test_every_port_of_the_backend_fulfils_its_protocol(ports):
    fields = protocol_fields(Backend)
    assert set(fields) == {f.name for f in dataclasses.fields(Backend)} - {"store", "closers", "rates", "breakers"}
    for field, protocol in fields.items():
        assert_fulfils(getattr(ports, field), protocol)
    assert_fulfils(ports.host_rates("ns"), HostRates)      # the backend's, or this process's
    assert_fulfils(ports.host_breakers("ns"), HostBreakers)
    assert_fulfils(ports.locks.master_lock("host1:1", LONG), MasterLock)
    assert isinstance(ports.store, BatchStore)
    assert all(callable(close) for close in ports.closers)


def test_supervisor_ports_reach_the_namespaces_board_leases_and_wake(shared_opener):
    ports = shared_opener.open()
    supervisor = open_supervisor_ports(shared_opener.settings, shared_opener.namespace, 1.0)
    try:
        for field, protocol in protocol_fields(SupervisorPorts).items():
            assert_fulfils(getattr(supervisor, field), protocol)
        supervisor.leases.ping()
        # A worker process died: its supervisor gives its leases back, and the master reclaims them at once.
        pushed(ports.leases, 1, 2, 3)
        dead = [ports.leases.lease(f"web1:99:{n}", LONG) for n in range(2)]
        alive = ports.leases.lease("web1:100:0", LONG)
        assert supervisor.leases.expire_leases_of("web1:99:") == 2
        assert sorted(ports.leases.reclaim_expired(10)) == sorted(lease.key for lease in dead)
        assert ports.leases.release([alive]) == [alive]
        # ... and wakes the master; a wait shorter than its timeout works on its own ports too.
        supervisor.wake.wake_master()
        assert ports.wake.wait_for_wake(5)
        assert not supervisor.wake.wait_for_wake(0.2)
        supervisor.board.write_status("web1:1", {"role": "worker"}, LONG)
        assert ports.board.read_statuses() == [{"role": "worker"}]
        assert supervisor.board.read_statuses() == [{"role": "worker"}]
        supervisor.board.delete_status("web1:1")
        assert ports.board.read_statuses() == []
    finally:
        supervisor.close()


def test_a_memory_backend_has_no_supervisor_ports():
    assert open_supervisor_ports(load_settings({}), "tp-memory", 1.0) is None


def test_the_queue_is_forgotten_when_the_server_holding_it_is_another(opener):
    """forget_if_memory_changed: Redis says True on a namespace's first ask and whenever the server's run_id
    differs from the one the last ask recorded (a restart, a promoted replica), dropping the pending list and
    the leases (the attempts stay); the stores that keep the queue with the tasks never lose it apart."""
    queue = opener.open().leases
    first = queue.forget_if_memory_changed()
    pushed(queue, 1, 2, 3)
    assert queue.count_attempts([1]) == [1]
    held = queue.lease("w:1:a:", LONG)
    assert queue.forget_if_memory_changed() is False and queue.queue_counts() == (2, 1)
    if opener.kind != "mysql_redis":
        assert first is False
        return
    assert first is True
    import redis
    client = redis.Redis.from_url(opener.redis_url)
    client.set(f"{opener.namespace}:memory", "the run_id of a server gone")      # as a failover leaves it
    assert queue.forget_if_memory_changed() is True
    assert queue.queue_counts() == (0, 0) and queue.known([held.key, "2", "3"]) == set()
    assert queue.count_attempts([1]) == [2], "the attempts stay: BATCH_TASK_MAX_ATTEMPTS still counts them"
    assert queue.forget_if_memory_changed() is False
    client.close()
