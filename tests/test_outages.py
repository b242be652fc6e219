"""Outages of the database and of Redis in the middle of a batch, on servers of the test's own:
write-backs wait for the database and are never dropped, quietly (one line when the outage starts,
one when it ends) and cheaply (no CPU spent waiting); a Redis that comes back empty loses no task
(the master resets what no queue knows once it is stale)."""
import logging
import os
import resource
import time
import threading


from batchd.task import TaskState
from harness import InProcessBatch, wait_for
from servers import PrivateRedis
from spiders.seed import CrawlTask
from taskdb import MysqlBackend

D = TaskState.DONE
GATE = threading.Event()


class GatedSpider(CrawlTask):
    """Holds every task in parse() until the test opens the gate."""

    def parse(self, request, response, task):
        GATE.wait(60)
        yield from super().parse(request, response, task)


def factory(backend, cls, **settings):
    return lambda: cls(batch_store=backend.store(), settings=backend.settings(**settings))


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def probes_of(watch, backend):
    return next((o.probes for o in watch.outages() if o.backend == backend), 0)


def test_write_backs_wait_out_a_database_outage_quietly_and_cheaply(private_mysql, site, caplog):
    db, backend = private_mysql
    backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 6)])
    GATE.clear()
    with caplog.at_level(logging.INFO, logger="batchd"):
        with InProcessBatch(factory(backend, GatedSpider, SPIDER_THREAD_COUNT=5)) as batch:
            worker = next(loop for name, _, _, loop in batch.loops if name.startswith("worker"))
            wait_for(lambda: worker.pipeline is not None and worker.pipeline.in_flight() == 5,
                     message="every task leased")
            backend.conn.close()
            db.stop()
            GATE.set()                         # items flushed into a dead server, then write-backs
            wait_for(lambda: worker.watch.is_down("MySQL"), message="the worker waiting for MySQL")
            cpu_before, probes_before = cpu_seconds(), probes_of(worker.watch, "MySQL")
            wait_for(lambda: probes_of(worker.watch, "MySQL") >= probes_before + 3, timeout=20,
                     message="three probes of the dead server (some seconds of outage)")
            cpu_waiting = cpu_seconds() - cpu_before
            db.start()
            backend.reconnect()
            wait_for(lambda: set(backend.states().values()) == {D}, timeout=30, message="tasks done")
            wait_for(lambda: caplog.text.count("MySQL is back after") == 2, timeout=10,
                     message="both roles saying so (the master at its next probe or patrol)")
    print(f"CPU while waiting out the outage: {cpu_waiting:.3f} s (master and worker threads of this process)")
    assert cpu_waiting < 0.5, "waiting out an outage must cost no measurable CPU"
    assert len(backend.items()) == 5 and not os.path.exists(backend.failed_items_path), \
        "a short outage (under ITEM_FLUSH_GIVE_UP) loses nothing and dumps nothing"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "MySQL" in r.getMessage()]
    assert len(warnings) == 2, f"one line per role (master, worker) when the outage starts: {warnings}"


def test_a_redis_that_comes_back_empty_loses_no_task(mysql_url, site, failed_items_path, caplog):
    with PrivateRedis() as redis_server:
        backend = MysqlBackend(mysql_url, redis_server.url(0), failed_items_path)
        try:
            backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 9)])
            GATE.clear()
            settings = dict(SPIDER_THREAD_COUNT=2, BATCH_LOST_TASK_STALE=2)
            with caplog.at_level(logging.WARNING, logger="batchd"):
                with InProcessBatch(factory(backend, GatedSpider, **settings)):
                    wait_for(lambda: list(backend.states().values()).count(TaskState.PROCESSING) == 8,
                             message="every task claimed")
                    redis_server.stop()            # the queue and the leases are gone...
                    redis_server.start()           # ...and Redis is back, empty
                    GATE.set()
                    wait_for(lambda: set(backend.states().values()) == {D}, timeout=90, message="tasks done")
            assert "that no queue holds" in caplog.text
            assert sorted(i["title"] for i in backend.items()) == [f"Title {i}" for i in range(1, 9)]
        finally:
            backend.close()


def test_items_dumped_during_a_long_outage_are_replayed_by_the_worker_once_the_database_is_back(
        private_mysql, site, caplog):
    db, backend = private_mysql
    backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 6)])
    GATE.clear()
    with caplog.at_level(logging.INFO, logger="batchd"):
        with InProcessBatch(factory(backend, GatedSpider, SPIDER_THREAD_COUNT=5, ITEM_FLUSH_GIVE_UP=1)) as batch:
            worker = next(loop for name, _, _, loop in batch.loops if name.startswith("worker"))
            wait_for(lambda: worker.pipeline is not None and worker.pipeline.in_flight() == 5,
                     message="every task leased")
            backend.conn.close()
            db.stop()
            GATE.set()
            wait_for(lambda: "written to" in caplog.text, timeout=30, message="the items dumped after ITEM_FLUSH_GIVE_UP")
            db.start()
            backend.reconnect()
            wait_for(lambda: set(backend.states().values()) == {D}, timeout=30, message="tasks done")
            wait_for(lambda: len(backend.items()) == 5, timeout=30, message="the dump replayed by the worker")
    dumped = [r.getMessage() for r in caplog.records if "written to" in r.getMessage()]
    assert dumped and "ITEM_FLUSH_GIVE_UP=1 s" in dumped[0] and "this worker stores them once the database" in dumped[0]
    path = backend.failed_items_path
    assert not os.path.exists(path) or open(path).read() == "", "the file keeps only what still fails: nothing"


def test_a_backend_that_answers_probes_but_refuses_work_stays_one_quiet_outage(caplog):
    """A read-only server answers a ping yet refuses every write: each answered probe lets the waiters
    try again (once per probe period, not in a spin), and only a real call that works ends the outage;
    a backend flapping right after it came back is the same story, told once."""
    from batchd.errors import BackendUnavailable
    from batchd.process.outages import PROBE_EVERY, OutageWatch
    watch = OutageWatch({"MySQL": lambda: None})     # the probe always answers
    refused = BackendUnavailable("MySQL db unreachable: the server is read-only", "MySQL")
    never, tries, started = threading.Event(), 0, time.monotonic()
    with caplog.at_level(logging.INFO, logger="batchd"):
        while time.monotonic() - started < 3 * PROBE_EVERY:
            tries += 1
            watch.failed(refused)
            watch.wait(30.0, "MySQL", never)
        watch.ok("MySQL")
        for _ in range(3):
            watch.failed(BackendUnavailable("MySQL db unreachable: gone", "MySQL"))
            watch.ok("MySQL")
    assert tries <= 5, f"{tries} retries in {3 * PROBE_EVERY} s: one per answered probe, not a spin"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and lines[1].startswith("MySQL is back after"), lines
    assert lines[0] == "MySQL db unreachable: the server is read-only; waiting for it (retries back off up to 30 s)"
