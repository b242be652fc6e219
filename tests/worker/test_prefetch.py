"""A worker's leases taken several per round trip (batchd/prefetch.py), on the in-process queue."""
import itertools
import threading

import pytest

from batchd.errors import BackendUnavailable

from batchd.backends.memory.local_queue import LocalQueue
from batchd.worker.prefetch import PREFETCH_MOST, LeasePrefetch
from harness import wait_for


class CountingQueue(LocalQueue):
    """The in-process queue, counting its round trips (lease_many calls)."""

    def __init__(self):
        super().__init__("prefetch")
        self.round_trips = 0

    def lease_many(self, tokens, lease_seconds):
        self.round_trips += 1
        return super().lease_many(tokens, lease_seconds)


class HeldQueue(CountingQueue):
    """A queue whose round trips wait for `answer` to be set once `holding` is (or fail, with `failing`)."""

    def __init__(self):
        super().__init__()
        self.holding, self.answer, self.on_trip = False, threading.Event(), threading.Event()
        self.failing = False

    def lease_many(self, tokens, lease_seconds):
        if self.holding:
            self.on_trip.set()
            assert self.answer.wait(10)
            if self.failing:
                raise BackendUnavailable("Redis down", "Redis")
        return super().lease_many(tokens, lease_seconds)


def queue_of(tasks: int, queue_class=CountingQueue) -> CountingQueue:
    queue = queue_class()
    queue.push(1, [{"id": n} for n in range(1, tasks + 1)], "id")
    return queue


def prefetch_on(queue, free_slots=lambda: 100) -> LeasePrefetch:
    numbers = itertools.count(1)
    return LeasePrefetch(queue, 60, lambda: f"w:{next(numbers)}", free_slots)


def test_a_long_queue_is_leased_several_tasks_per_round_trip_in_order():
    queue = queue_of(1000)
    prefetch = prefetch_on(queue)
    taken = [prefetch.take().task_id for _ in range(400)]
    assert taken == list(range(1, 401))
    assert queue.round_trips <= 400 / PREFETCH_MOST + 2
    assert queue.leased_count() == 400 + len(prefetch.waiting())


def test_the_tail_of_the_queue_is_leased_one_at_a_time():
    queue = queue_of(12)
    prefetch = prefetch_on(queue)
    assert [prefetch.take().task_id for _ in range(12)] == list(range(1, 13))
    assert queue.round_trips == 12 and prefetch.take() is None


def test_no_more_are_leased_than_the_ledger_has_free_slots_for():
    queue = queue_of(1000)
    prefetch = prefetch_on(queue, free_slots=lambda: 0)
    for _ in range(20):
        prefetch.take()
    assert queue.round_trips == 20 and prefetch.waiting() == []
    few = prefetch_on(queue, free_slots=lambda: 10)      # the leases waiting count against the free slots
    for _ in range(30):
        few.take()
        assert len(few.waiting()) <= 10


def test_leases_waiting_are_renewable_and_drained_at_a_stop():
    queue = queue_of(1000)
    prefetch = prefetch_on(queue)
    prefetch.take()
    prefetch.take()
    waiting = prefetch.waiting()
    assert waiting and queue.renew(waiting, 60) == waiting
    assert prefetch.drain() == waiting and prefetch.waiting() == []
    assert queue.give_back(waiting) == len(waiting)


def test_idle_threads_share_one_look_at_an_empty_queue():
    queue = queue_of(0)
    prefetch = prefetch_on(queue)
    assert [prefetch.take() for _ in range(50)] == [None] * 50
    assert queue.round_trips == 1
    queue.push(1, [{"id": 1}], "id")
    wait_for(lambda: prefetch.take() is not None, timeout=2, message="the task seen after the next look")
    assert queue.round_trips >= 2


def test_one_thread_fetches_the_next_leases_while_the_others_take_what_is_left():
    queue = queue_of(1000, HeldQueue)
    prefetch = prefetch_on(queue)
    for _ in range(3):
        prefetch.take()                         # the queue is long: from now on PREFETCH_MOST per round trip
    while len(prefetch.waiting()) > PREFETCH_MOST // 2:     # down to the last few: the next take goes for more
        prefetch.take()
    queue.holding = True
    ahead = threading.Thread(target=prefetch.take)   # takes one of the last few, and goes for more
    ahead.start()
    assert queue.on_trip.wait(10)
    left = len(prefetch.waiting())
    assert left and [prefetch.take() is not None for _ in range(left)] == [True] * left    # not held up
    queue.answer.set()
    ahead.join(10)
    assert len(prefetch.waiting()) == PREFETCH_MOST and queue.round_trips == 3


def test_a_round_trip_ahead_that_fails_loses_no_lease():
    queue = queue_of(1000, HeldQueue)
    prefetch = prefetch_on(queue)
    for _ in range(3):
        prefetch.take()
    while len(prefetch.waiting()) > PREFETCH_MOST // 2:     # down to the last few: the next take goes for more
        prefetch.take()
    waiting = [lease.task_id for lease in prefetch.waiting()]
    queue.holding = queue.failing = True
    queue.answer.set()
    with pytest.raises(BackendUnavailable):
        prefetch.take()
    assert [lease.task_id for lease in prefetch.waiting()] == waiting     # the one it took is back, first
    queue.holding = False
    assert prefetch.take().task_id == waiting[0]
