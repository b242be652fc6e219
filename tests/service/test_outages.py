"""Outages of the database and of Redis in the middle of a batch, on servers of the test's own:
write-backs wait for the database and are never dropped, quietly (one line when the outage starts,
one when it ends) and cheaply (no CPU spent waiting); a Redis that comes back empty loses no task
(the master rebuilds the queue from the task table at its first patrol on the new server), and a claim
whose push Redis refused is put back as the outage ends."""
import logging
import os
import re
import resource
import time
import threading

import MySQLdb
import redis

import batchd

from batchd.backends.mysql_redis.mysql import parse_mysql_url
from batchd.backends.mysql_redis.redis_port import translate_redis_error
from batchd.errors import BackendUnavailable
from batchd.service.lifecycle import StopFlag
from batchd.service.threads import start_thread
from batchd.task import TaskState
from harness import InProcessBatch, make_master, wait_for
from relay import Relay
from servers import PrivateRedis
from spiders.seed import CrawlTask
from taskdb import MysqlBackend

D = TaskState.DONE
SWEPT = re.compile(r"reset (\d+) tasks in processing that no queue holds \(their claim's answer or push lost to an outage\)")
# The waits below are for what must come (a probe, a patrol, a line), not for how soon: on a busy machine a
# patrol after the outage comes seconds later, so they wait long; the figures printed say how long it took.
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
            wait_for(lambda: probes_of(worker.watch, "MySQL") >= probes_before + 3, timeout=40,
                     message="three probes of the dead server (some seconds of outage)")
            cpu_waiting = cpu_seconds() - cpu_before
            db.start()
            backend.reconnect()
            wait_for(lambda: set(backend.states().values()) == {D}, timeout=30, message="tasks done")
            wait_for(lambda: caplog.text.count("MySQL is back after") == 2, timeout=30,
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
            settings = dict(SPIDER_THREAD_COUNT=2, BATCH_LOST_TASK_STALE=600)      # nothing waits for it
            with caplog.at_level(logging.WARNING, logger="batchd"):
                with InProcessBatch(factory(backend, GatedSpider, **settings)):
                    wait_for(lambda: list(backend.states().values()).count(TaskState.PROCESSING) == 8,
                             message="every task claimed")
                    redis_server.stop()            # the queue and the leases are gone...
                    redis_server.start()           # ...and Redis is back, empty
                    GATE.set()
                    wait_for(lambda: set(backend.states().values()) == {D}, timeout=90, message="tasks done")
            # Rebuilt at the first patrol on the new server, not once the tasks are stale.
            assert "its queue and leases rebuilt from the task table, 8 tasks in processing set back" in caplog.text
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
    from batchd.service.outages import PROBE_EVERY, OutageWatch
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
    assert lines[0] == ("MySQL db unreachable: the server is read-only; waiting for it, trying again every few seconds "
                        "(at most every 30 s)")


def test_a_claim_whose_push_redis_refused_is_put_back_when_the_outage_ends(mysql_url, site, failed_items_path,
                                                                          caplog):
    """The window between a claim's commit and its push: the master's claim waits on a lock the test holds in
    the state index (the rows are selected, not yet marked), Redis starts refusing writes (its maxmemory
    reached), the test lets the claim commit, and the push is refused. Those tasks are in processing in MySQL
    and in no queue: they are set back to pending at the first patrol after the outage, at the default
    BATCH_LOST_TASK_STALE, not at the stale sweep ten minutes later."""
    with PrivateRedis() as redis_server:
        backend = MysqlBackend(mysql_url, redis_server.url(0), failed_items_path)
        admin = redis.Redis.from_url(redis_server.url(0))
        blocker = MySQLdb.connect(**parse_mysql_url(mysql_url))
        stop = StopFlag()
        try:
            backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 41)])
            master, _ = make_master(backend, BATCH_PUSH_LIMIT=10, BATCH_LOST_TASK_STALE=600)
            queue = master.leases
            with caplog.at_level(logging.WARNING, logger="batchd"):
                thread = start_thread(master.run, "test-master", stop)
                leases = claim_held_at_the_lock(backend, queue, blocker, mysql_url)
                admin.config_set("maxmemory", 1)                                  # every write refused (OOM)
                blocker.commit()                                                  # the claim commits...
                wait_for(lambda: "unreachable" in caplog.text, message="...and its push is refused")
                # Ten, or fewer when the master sized its claim while the test was still leasing the queue empty.
                orphans = processing_unknown(backend, queue, leases)
                assert 0 < len(orphans) <= 10, orphans
                admin.config_set("maxmemory", 0)
                back = time.monotonic()
                wait_for(lambda: not processing_unknown(backend, queue, leases), timeout=60,
                         message="the orphans of the refused push back in the queue")
                print(f"orphans of a refused push put back {time.monotonic() - back:.1f} s after the outage ended")
                wait_for(lambda: SWEPT.search(caplog.text), timeout=30, message="the master's line on the orphans")
        finally:
            stop.request_cold()
            admin.config_set("maxmemory", 0)
            blocker.close()
            backend.close()
    thread.join(10)


def admin_of(mysql_url):
    return MySQLdb.connect(**parse_mysql_url(mysql_url))


def claim_waiting(connection) -> bool:
    """A statement of the master's marking tasks claimed has been waiting (for the test's lock) a second."""
    try:
        cursor = connection.cursor()
        cursor.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE TIME >= 1 "
                       "AND INFO LIKE 'UPDATE `crawl\\_task` SET `batch\\_status` = 2,%'")
        return cursor.fetchone()[0] > 0
    finally:
        connection.close()


def processing_unknown(backend, queue, leases) -> list:
    """Tasks in processing that neither the queue nor a lease knows (the test's leases count as known)."""
    ids = [row[0] for row in backend.sql("SELECT id FROM crawl_task WHERE batch_status = 2")]
    known = queue.known([str(i) for i in ids]) | {lease.key for lease in leases if lease is not None}
    return [i for i in ids if str(i) not in known]


def test_a_refusal_that_waiting_mends_is_an_outage_whatever_redis_py_calls_it():
    """redis-py strips the reply's code from some errors (READONLY from a demoted primary, OOM from version 5 on)
    and keeps it in others: either way it is an outage, waited out, never a bug that ends the process."""
    url = "redis://:secret@127.0.0.1:6379/0"
    for error in (redis.exceptions.ReadOnlyError("You can't write against a read only replica."),
                  redis.exceptions.ResponseError("OOM command not allowed when used memory > 'maxmemory'."),
                  redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"),
                  redis.exceptions.ResponseError("Command # 1 (GET ns:open_request) of pipeline caused error: OOM "
                                                 "command not allowed when used memory > 'maxmemory'."),
                  *([redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")]
                    if hasattr(redis.exceptions, "OutOfMemoryError") else [])):
        translated = translate_redis_error(error, url)
        assert isinstance(translated, BackendUnavailable) and "secret" not in str(translated), error


def test_a_claim_whose_answer_was_lost_is_put_back_when_the_outage_ends(mysql_url, site, failed_items_path, caplog):
    """The other side of the window: the claim commits in MySQL, and its answer never reaches the master (a
    relay in front of MariaDB, tests/relay.py, lets the COMMIT through and cuts the connection instead of
    passing its answer back). The master sees MySQL fail; those tasks are in processing and in no queue: they
    are set back to pending at the first patrol after the outage, not at the stale sweep."""
    with PrivateRedis() as redis_server, Relay(parse_mysql_url(mysql_url)["port"]) as relay:
        backend = MysqlBackend(mysql_url, redis_server.url(0), failed_items_path)
        relayed = mysql_url.replace(f":{parse_mysql_url(mysql_url)['port']}/", f":{relay.port}/")
        blocker = MySQLdb.connect(**parse_mysql_url(mysql_url))
        stop = StopFlag()
        try:
            backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 41)])
            spider = CrawlTask(batch_store=batchd.MysqlBatchStore(relayed),
                               settings=backend.settings(MYSQL_URL=relayed, BATCH_PUSH_LIMIT=10,
                                                         BATCH_LOST_TASK_STALE=600))
            spider.runtime.store.open(spider.runtime.layout)
            master = spider.runtime.master()
            queue = master.leases
            with caplog.at_level(logging.WARNING, logger="batchd"):
                thread = start_thread(master.run, "test-master", stop)
                leases = claim_held_at_the_lock(backend, queue, blocker, mysql_url)
                relay.lose_answer_to(b"COMMIT")
                blocker.commit()                                # the claim commits; its answer is lost
                wait_for(lambda: relay.cuts == 1, message="the COMMIT's answer cut")
                back = time.monotonic()
                wait_for(lambda: not processing_unknown(backend, queue, leases), timeout=60,
                         message="the orphans of the lost answer back in the queue")
                print(f"orphans of a lost claim answer put back within {time.monotonic() - back:.1f} s of the cut")
                wait_for(lambda: SWEPT.search(caplog.text), timeout=30, message="the master's line on the orphans")
            assert "MySQL" in caplog.text and "unreachable" in caplog.text
        finally:
            stop.request_cold()
            blocker.close()
            backend.close()
    thread.join(10)


def claim_held_at_the_lock(backend, queue, blocker, mysql_url) -> list:
    """The master's next claim, held where it has selected its rows and waits to mark them: the test takes
    the next-key locks past the last task in processing, then leases the queue empty so that the master claims
    again. The test's leases (they count as known)."""
    wait_for(lambda: queue.pending_count() == 10, message="the first claim pushed")
    cursor = blocker.cursor()
    cursor.execute("BEGIN")
    cursor.execute("SELECT id FROM crawl_task WHERE batch_status = 2 FOR UPDATE")
    leases = [queue.lease(f"test:1:{n}:", 600) for n in range(10)]
    wait_for(lambda: claim_waiting(admin_of(mysql_url)), message="the master's claim waiting on the lock")
    return leases


def test_a_socket_error_reads_as_words_not_as_redis_py_wrote_it():
    """"Error 111 connecting to 127.0.0.1:6379. Connection refused." said beside the URL again, with a full stop
    before the "; waiting for it" the outage line adds: the operator reads what failed, once."""
    url = "redis://:secret@127.0.0.1:6379/0"
    refused = translate_redis_error(redis.exceptions.ConnectionError(
        "Error 111 connecting to 127.0.0.1:6379. Connection refused."), url)
    assert str(refused) == "Redis redis://:***@127.0.0.1:6379/0 unreachable: connection refused"
    unknown = translate_redis_error(redis.exceptions.ConnectionError(
        "Error -2 connecting to nohost:6379. Name or service not known."), url)
    assert str(unknown).endswith("unreachable: name or service not known")
    timeout = translate_redis_error(redis.exceptions.TimeoutError("Timeout reading from socket"), url)
    assert str(timeout).endswith("unreachable: Timeout reading from socket")
