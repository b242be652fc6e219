"""Running the master and workers inside the test process, on any backend.

`InProcessBatch` starts a resident master and workers as threads (each with its own
StopFlag, exactly the loops the supervisor runs in children) and stops them warm on
exit. `wait_for` polls a condition read straight from the backend; `stays_true` is its other
half, for a window in which something must not happen; `patrol_until` patrols as a resident
master would until a patrol has done what the test waits for; `work_off` does a worker's
write-backs (tally included) without crawling.
"""
import threading
import time

from dataclasses import asdict

import batchd
from batchd.errors import BackendUnavailable, BatchdError
from batchd.download.downloader import Downloader
from batchd.service.lifecycle import StopFlag
from batchd.download.middlewares.retry import RetryMiddleware
from batchd.http import Request
from batchd.quality.measures import HostMeasures
from batchd.quality.record_json import kept_quality
from batchd.task import TaskState, settling_move


def batch_done(backend) -> bool:
    """The last batch record says is_done (read from the backend, not through batchd)."""
    records = backend.records()
    return bool(records) and records[-1]["is_done"]


def wait_for(predicate, timeout=30.0, interval=0.05, message="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {message}")


def stays_true(predicate, seconds, interval=0.05, message="condition", explain=None):
    """Poll `predicate` for `seconds` and fail as soon as it is false: the window a test needs to
    show that something does NOT happen (no SIGABRT, no second WARNING, the process still there),
    named instead of a bare sleep, with the invariant checked all through it, first and last at
    its two ends. `explain()` adds to the failure (a process's output, say)."""
    started = time.monotonic()
    deadline = started + seconds
    while True:
        if not predicate():
            extra = f":\n{explain()}" if explain else ""
            raise AssertionError(f"{message}: no longer so after {time.monotonic() - started:.1f} s "
                                 f"of a {seconds} s window{extra}")
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(interval, left))


class RefusingMemoryStore(batchd.MemoryBatchStore):
    """The memory store with an outage of its own: while `down` is set it stores nothing and answers no
    ping, as a database that went away would (the memory store has no server to stop)."""

    def __init__(self, rows):
        super().__init__(rows)
        self.down = threading.Event()

    def _check_up(self):
        if self.down.is_set():
            raise BackendUnavailable("memory store down (the test's outage)", self.backend_name)

    def ping(self):
        self._check_up()

    def save_items(self, table, kind, rows):
        self._check_up()
        super().save_items(table, kind, rows)


def make_master(backend, **settings):
    """A master of the seed spider on `backend` (its store open), and the spider."""
    from spiders.seed import CrawlTask
    spider = CrawlTask(batch_store=backend.store(), settings=backend.settings(**settings))
    spider.runtime.store.open(spider.runtime.layout)
    return spider.runtime.master(), spider


def create_old_record_table(backend) -> None:
    """The seed's batch record table as an older batchd made it (none of batchd's own columns), with one
    finished batch in it: a MySQL or SQLite backend."""
    q = '"' if backend.kind == "sqlite" else "`"
    backend.sql(f"CREATE TABLE {q}crawl_task_batch_record{q} (id INTEGER PRIMARY KEY, batch_date DATETIME, "
                "total_count INT, done_count INT, fail_count INT, {q}interval{q} INT, interval_unit TEXT, "
                "is_done INT, create_time DATETIME, update_time DATETIME)".replace("{q}", q))
    backend.sql(f"INSERT INTO {q}crawl_task_batch_record{q} VALUES (1, '2026-01-01 00:00:00', 1, 1, 0, 1, "
                "'day', 1, '2026-01-01 00:00:00', '2026-01-01 00:00:00')")


def work_off(runtime, outcomes: dict) -> None:
    """What workers do with every task in the queue, without crawling: lease it, end the lease, write its
    outcome back (outcomes: task id -> TaskState.DONE or FAILED; any other task goes back to pending) and
    count what moved in the batch's tally, as the pipeline does."""
    leases, store, tally = runtime.backend.leases, runtime.backend.store, runtime.backend.tally
    while (lease := leases.lease("test-worker", 60)) is not None:
        assert leases.release([lease]) == [lease]
        outcome = outcomes.get(lease.task_id, TaskState.PENDING)
        moved = store.move(settling_move(outcome), [lease.task_id])
        tally.add_settled(lease.batch_id, moved * (outcome == TaskState.DONE), moved * (outcome == TaskState.FAILED))


def patrol_until(master, condition, timeout=10.0, message="condition"):
    """One patrol after another (a resident master's rhythm, without its wait) until `condition()`
    holds after one: for what takes time to become due, such as a lease's expiry."""
    def patrolled():
        master.patrol(StopFlag())
        return condition()
    return wait_for(patrolled, timeout=timeout, message=message)


def spider_factory(backend, cls, **settings):
    """What InProcessBatch makes its spiders with: `cls` on the backend's store, with these settings."""
    return lambda: cls(batch_store=backend.store(), settings=backend.settings(**settings))


def next_batch(backend, factory, **master_options) -> dict:
    """One batch, opened (the last one aged a week) and run to its close in-process by spiders `factory()`
    makes; its record, as the backend reads it. `master_options`: more arguments of Runtime.master
    (refetch=True, say)."""
    before = len(backend.records())
    if before:
        backend.age_last_batch(days=7)
    with InProcessBatch(factory, master_options=master_options):
        wait_for(lambda: len(backend.records()) == before + 1 and backend.records()[-1]["is_done"],
                 message=f"batch {before + 1} closed")
    return dict(backend.records()[-1])


def quality_in_full(record: dict):
    """The quality JSON a batch record (a row of backend.records()) keeps, every host's figures in full (the
    record leaves out those at their default); None when it keeps none."""
    kept = kept_quality(record["quality"])
    if kept is not None:
        kept["hosts"] = {host: asdict(HostMeasures.from_json(data)) for host, data in kept.get("hosts", {}).items()}
    return kept


def settle(backend, spider_cls, timeout=30, **settings):
    """Run a master and a worker of `spider_cls` until every task is done or failed; the states by id."""
    with InProcessBatch(spider_factory(backend, spider_cls, **settings)):
        wait_for(lambda: set(backend.states().values()) <= {TaskState.DONE, TaskState.FAILED}, timeout=timeout,
                 message="every task settled")
    return backend.states()


class InProcessBatch:
    def __init__(self, spider_factory, workers=1, master=True, master_options=None, **worker_options):
        """`worker_options`: more arguments of Runtime.worker (count=, say); `master_options`: of Runtime.master."""
        self.spider_factory = spider_factory
        self.worker_count, self.with_master = workers, master
        self.master_options, self.worker_options = master_options or {}, worker_options
        self.loops = []       # (name, StopFlag, thread, loop object)
        self.errors = []      # (name, BatchdError) of a loop that ended on one (its run() raised it)

    def __enter__(self):
        if self.with_master:
            self.start_master()
        for n in range(self.worker_count):
            self.start_worker(f"worker {n + 1}")
        return self

    def start_master(self):
        master = self.spider_factory().runtime.master(**self.master_options)
        return self._start("master", master, lambda stop: master.run(stop))

    def start_worker(self, name="worker"):
        worker = self.spider_factory().runtime.worker(name=name, keep_alive=True, **self.worker_options)
        return self._start(name, worker, lambda stop: worker.run(stop))

    def _start(self, name, loop, body):
        stop = StopFlag()

        def run(stop):
            try:
                body(stop)
            except BatchdError as e:
                self.errors.append((name, e))

        thread = threading.Thread(target=run, args=(stop,), name=f"test-{name}", daemon=True)
        thread.start()
        self.loops.append((name, stop, thread, loop))
        return loop

    def stop(self, name_prefix="", timeout=30.0):
        for name, stop, thread, _ in self.loops:
            if name.startswith(name_prefix):
                stop.request()
        for name, stop, thread, _ in self.loops:
            if name.startswith(name_prefix):
                thread.join(timeout)
                assert not thread.is_alive(), f"{name} did not stop within {timeout} s"

    def __exit__(self, *exc):
        self.stop("worker")
        self.stop("master")


class Counter:
    """The Counts a ChainContext's middlewares count into, kept for a test to read."""

    def __init__(self):
        self.counts, self.lock = {}, threading.Lock()

    def inc(self, name, count=1):
        with self.lock:
            self.counts[name] = self.counts.get(name, 0) + count


RETRY_OPTIONS = ("max_retry_times", "backoff_base", "backoff_max", "clock")


def retrying_downloader(middlewares=(), **options):
    """A Downloader whose retries wait little unless told otherwise; `middlewares` go inside the retries."""
    retry = {"backoff_base": 0.001, "backoff_max": 0.01,
             **{name: options.pop(name) for name in RETRY_OPTIONS if name in options}}
    return Downloader(**{"timeout": 5.0, **options}, middlewares=[RetryMiddleware(**retry), *middlewares])


def fetch_all(downloader, urls):
    """Every URL fetched at once, a thread each, as a worker's threads would."""
    threads = [threading.Thread(target=downloader.fetch, args=(Request(url),)) for url in urls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
