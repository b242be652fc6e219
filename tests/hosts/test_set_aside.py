"""Tasks set aside while their hosts' turns come (hosts/set_aside.py): a slow or polite host costs only
its own tasks, never the threads the other hosts' tasks need."""
import math
import threading
import time

from batchd.task import TaskState
from batchd.hosts.set_aside import INF_RECHECK, SetAside
from batchd.worker.worker import ROOM_EVERY
from harness import InProcessBatch, wait_for
from spiders.seed import CrawlTask

D = TaskState.DONE


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Run:
    """A stand-in for a TaskRun: SetAside only keeps it."""


def test_a_task_comes_back_when_its_wait_is_over_oldest_first():
    clock = Clock()
    aside = SetAside(10, clock=clock)
    late, early, also_early = Run(), Run(), Run()
    aside.put(late, "a", 2.0)
    aside.put(early, "b", 1.0)
    aside.put(also_early, "c", 1.0)
    assert aside.take() is None and len(aside) == 3 and aside.by_host() == {"a": 1, "b": 1, "c": 1}
    clock.now += 1.0
    assert [aside.take(), aside.take(), aside.take()] == [early, also_early, None]
    clock.now += 1.0
    assert aside.take() is late and len(aside) == 0 and aside.by_host() == {}


def test_a_task_waiting_for_a_place_is_woken_by_an_end_at_its_host_one_per_end():
    clock = Clock()
    aside = SetAside(10, clock=clock)
    first, second, elsewhere = Run(), Run(), Run()
    aside.put(first, "busy", math.inf)
    aside.put(second, "busy", math.inf)
    aside.put(elsewhere, "other", math.inf)
    aside.host_done("unrelated")
    assert aside.take() is None
    aside.host_done("busy")
    assert aside.take() is first and aside.take() is None       # one end, one place: one task
    clock.now += INF_RECHECK                                     # and a look now and then besides
    assert {aside.take(), aside.take()} == {second, elsewhere}


def test_the_bound_and_the_drain():
    aside = SetAside(2, clock=Clock())
    runs = [Run(), Run()]
    for run in runs:
        aside.put(run, "h", 5.0)
    assert aside.full()
    assert set(aside.drain()) == set(runs) and len(aside) == 0 and not aside.full()


def test_a_stop_lets_every_waiting_thread_go_at_once():
    aside = SetAside(2)
    aside.put(Run(), "h", 60.0)
    waiters = [threading.Thread(target=aside.wait, args=(60.0,)) for _ in range(3)]
    for waiter in waiters:
        waiter.start()
    aside.close()
    for waiter in waiters:
        waiter.join(5)
    assert not any(waiter.is_alive() for waiter in waiters)
    started = time.monotonic()
    aside.wait(60.0)                       # and a thread that comes to wait later does not wait either
    assert time.monotonic() - started < 5


class SlowAndFast(CrawlTask):
    pass


def test_a_slow_hosts_tasks_hold_no_thread_the_fast_hosts_tasks_need(backend, site):
    """Two threads, one place at a time per host: the 6 slow tasks come first in id order and each takes
    1 s, so today's worker would have both threads waiting for the slow host's turn for 6 s."""
    slow = [site.url(f"/slow?seconds=1&n={n}") for n in range(6)]
    fast = [site.url(f"/page/{n}").replace("127.0.0.1", "localhost") for n in range(30)]
    backend.create_tasks(slow + fast)
    fast_ids = range(len(slow) + 1, len(slow) + len(fast) + 1)
    settings = backend.settings(SPIDER_THREAD_COUNT=2, CONCURRENT_REQUESTS_PER_DOMAIN=1)
    with InProcessBatch(lambda: SlowAndFast(batch_store=backend.store(), settings=settings)) as batch:
        worker = next(loop for name, _, _, loop in batch.loops if name.startswith("worker"))
        wait_for(lambda: all(backend.states()[i] == D for i in fast_ids), timeout=30, message="the fast tasks done")
        states = backend.states()
        slow_done = sum(states[i] == D for i in range(1, len(slow) + 1))
        assert slow_done <= 3, f"the fast tasks waited for the slow host: {slow_done} slow tasks done before them"
        wait_for(lambda: set(backend.states().values()) == {D}, timeout=30, message="every task done")
        assert len(worker.set_aside) == 0
    assert site.most_in_flight == 1      # (of /slow: the slow host kept to its one place)


def test_the_surplus_of_a_host_beyond_the_oldest_kept_is_taken_out_if_movable():
    aside = SetAside(20, clock=Clock())
    runs = [Run() for _ in range(6)]
    for run in runs:
        aside.put(run, "busy", math.inf)
    other, pinned = Run(), runs[4]
    aside.put(other, "quiet", math.inf)
    taken = aside.surplus(2, lambda run: run is not pinned)
    assert taken == [(runs[2], "busy"), (runs[3], "busy"), (runs[5], "busy")]
    assert len(aside) == 4 and aside.by_host() == {"busy": 3, "quiet": 1}
    aside.host_done("busy")
    aside.clock.now += 0      # due at once: the oldest one waiting goes first
    assert aside.take() is runs[0]


def done_by(worker) -> int:
    return worker.ledger.totals()["done"]


def test_a_worker_that_leased_a_busy_hosts_tasks_first_shares_them_with_a_later_one(backend, site):
    """Worker 1 starts alone on 16 tasks of a host it may fetch one at a time (0.3 s each); worker 2 comes
    once worker 1 holds more of them than it can start soon. Leasing all it could, worker 1 would take the
    16 in milliseconds, worker 2 would have nothing to do and the host would see one request at a time."""
    backend.create_tasks([site.url(f"/slow?seconds=0.3&n={n}") for n in range(16)])
    settings = backend.settings(SPIDER_THREAD_COUNT=4, CONCURRENT_REQUESTS_PER_DOMAIN=1)
    with InProcessBatch(lambda: SlowAndFast(batch_store=backend.store(), settings=settings), workers=0) as batch:
        first = batch.start_worker("worker 1")
        wait_for(lambda: len(first.set_aside) >= 3, timeout=30, message="worker 1 holding a surplus of the host")
        later = batch.start_worker("worker 2")
        # a worker counts a task in its ledger just after the row moved: wait for the counts, not the rows
        wait_for(lambda: sum(done_by(worker) for worker in (first, later)) == 16, timeout=30,
                 message="every task done and counted")
        shares = [done_by(worker) for worker in (first, later)]
    assert set(backend.states().values()) == {D} and shares[1] >= 4, f"worker 2 did {shares[1]} of 16"
    assert site.most_in_flight == 2      # one place per host in each worker


def test_a_worker_full_of_a_slow_hosts_tasks_hands_back_its_surplus_and_leases_the_other_hosts(backend, site):
    """HOST_SET_ASIDE_MAX=10 and 16 tasks of a host fetched one at a time (0.3 s each) ahead of 150 fast ones
    (a long queue: no worker leaves the slow host's tasks to others): holding 10, a worker that only waited
    for room would start the fast tasks once 5 more slow ones had passed through its hands; it hands back the
    surplus to the queue's tail and does them now."""
    slow = [site.url(f"/slow?seconds=0.3&n={n}") for n in range(16)]
    fast = [site.url(f"/page/{n}").replace("127.0.0.1", "localhost") for n in range(150)]
    backend.create_tasks(slow + fast)
    fast_ids = range(len(slow) + 1, len(slow) + len(fast) + 1)
    settings = backend.settings(SPIDER_THREAD_COUNT=2, CONCURRENT_REQUESTS_PER_DOMAIN=1, HOST_SET_ASIDE_MAX=10)
    with InProcessBatch(lambda: SlowAndFast(batch_store=backend.store(), settings=settings)):
        wait_for(lambda: any(backend.states()[i] == D for i in fast_ids), timeout=30, message="a fast task done")
        slow_done = sum(state == D for i, state in backend.states().items() if i <= len(slow))
        assert slow_done <= 2, f"the fast tasks waited for room: {slow_done} slow tasks done before the first"
        wait_for(lambda: set(backend.states().values()) == {D}, timeout=30, message="every task done")


def test_a_worker_full_of_the_only_hosts_tasks_hands_them_back_at_most_every_room_every(mysql_backend, site):
    """A queue of one busy host's tasks only: what a full worker hands back comes back to it. It hands back at
    most once every ROOM_EVERY (less and less often while most of what it leases is set aside again), never
    in a loop of round trips."""
    mysql_backend.create_tasks([site.url(f"/slow?seconds=0.03&n={n}") for n in range(140)])     # (a long queue)
    settings = mysql_backend.settings(SPIDER_THREAD_COUNT=2, CONCURRENT_REQUESTS_PER_DOMAIN=1, HOST_SET_ASIDE_MAX=4)
    with InProcessBatch(lambda: SlowAndFast(batch_store=mysql_backend.store(), settings=settings), workers=0) as batch:
        worker = batch.start_worker("worker 1")
        started = time.monotonic()
        hand_back, calls = worker.leases.hand_back, []
        worker.leases.hand_back = lambda leases: calls.append(len(leases)) or hand_back(leases)
        wait_for(lambda: set(mysql_backend.states().values()) == {D}, timeout=30, message="every task done")
        took = time.monotonic() - started
    print(f"hand-backs {calls} in {took:.1f} s: 140 tasks, 0.03 s each, one at a time")
    assert 1 <= len(calls) <= took / ROOM_EVERY + 1, calls
