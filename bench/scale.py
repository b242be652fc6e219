"""The master on a big task table (issue 10): how long opening a batch takes, and what the master's
patrols cost the database while workers write back.

    .venv/bin/python bench/scale.py --rows 5000000                     # private MariaDB + Redis
    .venv/bin/python bench/scale.py --rows 5000000 --store sqlite      # one SQLite file
    .venv/bin/python bench/scale.py --rows 100000 --steady 60 --writeback-rate 500 --json
    .venv/bin/python bench/scale.py --rows 5000000 --mode due           # BATCH_MODE=due, 1 task in 10 due

What it does:
1. starts servers of its own (MySQL: a private mariadbd on a spare port, its datadir under --workdir,
   a --buffer-pool of 4G, every statement in its slow log; and a private redis-server) or makes an
   SQLite file under --workdir;
2. builds the seed's task table (`crawl_task`, made by the store's own create_task_table) and fills
   it with N rows by INSERT ... SELECT doubling, states as a finished batch leaves them (19 in 20
   done, 1 failed), so that the reset has every row to set back;
3. starts a worker simulator (a process that leases tasks through the queue and writes them back
   done at --writeback-rate tasks/s, through the same ports and in the same order as the real
   lander: release the leases, then one store.move), then the master alone, in a process of its own
   built as batchd builds it (Runtime.of(spider, settings).master().run(stop)), with
   BATCH_MONITOR_INTERVAL=--monitor-interval;
4. waits for the master to open the batch and finish its reset, lets it patrol for --steady seconds
   more, stops both, removes everything it made, and reports:

   - the table build: seconds and rows/s;
   - the reset: seconds (from the master's `opening a new batch` line to the line saying the reset is
     over) and rows/s;
   - the longest statement of the master during the reset and during the steady patrols. MySQL:
     from the server's slow log (long_query_time=0), the master connecting as its own user
     (batchd_master; the simulator is batchd_sim), the phases split by marker statements the master
     process sends the moment each phase begins. SQLite: timed in the master process around each
     statement it runs on the file (SqliteFile.rows / change / change_many), and the longest write
     transaction (BEGIN IMMEDIATE to COMMIT: what the workers' write-backs wait behind);
   - patrol time p50 / p99 / max (Master.patrol, timed in the master process), for the steady phase;
     the patrols during the reset and, when the master has them, the reset's chunks
     (Master.advance_walk or batchd.master.walks.ResetWalk.step) apart;
   - write-back latency (each store.move of the simulator) p50 / p99, during the reset and steady;
   - the first lease after the batch opened (the master's `batch N opened` line);
   - the master's RSS (VmRSS, sampled every second): at start, peak, at the end.

A human-readable table, then with --json one JSON line of the figures. The bench never changes
batchd: it times the master by wrapping its methods in the master's own process. It runs the batchd
it imports, so PYTHONPATH=<an export of another commit> measures that commit's master.

--mode due (issue 21) runs the master with BATCH_MODE=due: after the build, the store's own open() makes
`crawl_task_revisit`, filled with one revisit per task by INSERT ... SELECT, due a day ago for 1 task in
DUE_EVERY (id % DUE_EVERY = 0) and in 30 days for the rest; the reset then sets back the due ones alone.
In either mode the bench checks that the reset set back the rows it should (every row in full; the
revisits due at the opening, counted in the table, in due), that no other row left its built state
and that the simulator leased none of them, and fails loudly when not.

Other options: --monitor-interval (BATCH_MONITOR_INTERVAL, 1 s), --reset-chunk (BATCH_RESET_CHUNK),
--push-limit (BATCH_PUSH_LIMIT), --buffer-pool, --workdir (/var/tmp), --timeout (for the reset),
--keep (keep the run's directory: the master's and the simulator's logs, the events, the slow log).
"""
import argparse
import contextlib
import functools
import json
import logging
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from typing import Callable, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(os.path.dirname(HERE), "tests")
sys.path.insert(0, TESTS)

from batchd.backends import store_from_url
from batchd.backends.sql_results import REVISIT_COLUMNS
from batchd.model import TaskLayout
from batchd.spider import BatchSpider
from servers import PrivateMariaDB, PrivateRedis  # noqa: E402

LAYOUT = TaskLayout(table="crawl_task")      # the seed's table, batchd's default columns
NAMESPACE = "scale_bench"
DATABASE = "scale_bench"
USERS = {"master": "batchd_master", "simulator": "batchd_sim"}
PASSWORD = "scale-bench"
URL_PREFIX = "https://scale.invalid/task/"
SEED_ROWS = 20                # the doubling's seed: 19 done, 1 failed; copies keep the 1-in-20 pattern
DUE_EVERY = 10                # --mode due: the tasks with id % DUE_EVERY = 0 are due (the failed ones among them)
DAY = 86400.0
BUILD_SLICE = 500_000         # rows per INSERT ... SELECT: each its own short transaction
TICK = 0.1                    # seconds between two rounds of the simulator (lease, then write back)
LEASE_SECONDS = 600.0
MARKER = "scale-bench phase"  # the statement the master process sends when a phase begins
POLL = 0.2

# The master's log lines the bench reads (docs/architecture.md, A batch's life). The reset is over at
# `batch N reset: R rows walked, M set back to pending, in S s (X rows/s ...` (a master that walks the
# reset in chunks) or at `batch N opened at DATE: R tasks (M reset)` (one that resets before it opens).
OPENING = re.compile(r"^opening a new batch")
OPENED = re.compile(r"^batch (\d+) opened at ")
RESET_WALKED = re.compile(r"^batch (\d+) reset: (\d+) rows walked, (\d+) set back to pending, in ([\d.]+) s "
                          r"\((\d+) rows/s")
RESET_BEFORE_OPEN = re.compile(r"^batch (\d+) opened at .*: (\d+) tasks \((\d+) reset\)$")

# One chunk of the reset, where the master has such a step: timed when present.
WALK_STEPS = (("batchd.master.patrol", "Master", "advance_walk"), ("batchd.master.walks", "ResetWalk", "step"))


class ScaleSpider(BatchSpider):
    """The master never runs a spider's code; it needs only the task table's name."""
    __task_table__ = LAYOUT.table

    def task_requests(self, task):
        return []


# -- figures
def percentile(values: list, q: float) -> Optional[float]:
    """Nearest-rank percentile (q in 0..1); None without values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def ms(seconds: Optional[float]) -> Optional[float]:
    return None if seconds is None else round(seconds * 1000, 2)


def spread(name: str, seconds: list) -> dict:
    """Durations as figures: how many (`name`s), `name`_p50_ms, `name`_p99_ms, `name`_max_ms."""
    return {f"{name}s": len(seconds), f"{name}_p50_ms": ms(percentile(seconds, 0.5)),
            f"{name}_p99_ms": ms(percentile(seconds, 0.99)), f"{name}_max_ms": ms(max(seconds) if seconds else None)}


class Longest:
    """The longest of some timed statements, per phase."""

    def __init__(self):
        self.by_phase: dict = {}

    def add(self, phase: str, seconds: float, statement: str) -> None:
        if seconds > self.by_phase.get(phase, (-1.0, ""))[0]:
            self.by_phase[phase] = (seconds, shortened(statement))

    def get(self, phase: str) -> tuple:
        return self.by_phase.get(phase, (None, ""))


def shortened(statement: str) -> str:
    """A statement on one line, a long IN list said as its length, at most 200 characters."""
    flat = " ".join(statement.split())
    flat = re.sub(r"IN \(([^()]{60,})\)", lambda m: f"IN (... {m.group(1).count(',') + 1} values)", flat)
    return flat[:200]


# -- the processes' shared files: a run directory holds the config, the events and each child's summary
class RunDir:
    def __init__(self, path: str):
        self.path = path

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def write_json(self, name: str, value) -> None:
        temporary = self.file(name + ".part")
        with open(temporary, "w") as f:
            json.dump(value, f)
        os.replace(temporary, self.file(name))      # a reader never sees half a file

    def read_json(self, name: str):
        with open(self.file(name)) as f:
            return json.load(f)

    def event(self, name: str, **fields) -> None:
        """One line of events.jsonl, with the wall-clock time: every process of the run shares the clock."""
        with open(self.file("events.jsonl"), "a") as f:
            f.write(json.dumps(dict(fields, event=name, t=fields.get("t", time.time()))) + "\n")

    def events(self) -> dict:
        """The first occurrence of each event so far."""
        seen: dict = {}
        try:
            with open(self.file("events.jsonl")) as f:
                for line in f:
                    if line.endswith("\n"):
                        record = json.loads(line)
                        seen.setdefault(record["event"], record)
        except FileNotFoundError:
            pass
        return seen


# -- where the run happens: its servers or file, the settings each process gets, the table's build
class BenchMariaDB(PrivateMariaDB):
    """tests/servers.py's private mariadbd, sized for big tables: its directory on a real disk, a
    buffer pool of the bench's size, a redo log large enough that the build's long inserts do not
    wait on checkpoints, and every statement in the slow log (long_query_time=0), which is kept in
    `workdir` beside the server's directory (removed with the server). Commits stay durable
    (innodb_flush_log_at_trx_commit=1, the server's default)."""

    def __init__(self, workdir: str, buffer_pool: str):
        super().__init__()
        os.rmdir(self.dir)     # made in the default temp dir, which may be a small tmpfs
        self.dir = tempfile.mkdtemp(prefix="mariadb-", dir=workdir)
        self.log_path = os.path.join(self.dir, f"{self.name}.log")
        self.buffer_pool = buffer_pool
        self.slow_log = os.path.join(workdir, "slow.log")

    def command(self) -> list:
        base = [arg for arg in super().command() if not arg.startswith("--innodb-buffer-pool-size=")]
        return base + [f"--innodb-buffer-pool-size={self.buffer_pool}", "--innodb-log-file-size=1G",
                       "--innodb-flush-log-at-trx-commit=1", "--log-output=FILE", "--slow-query-log=1",
                       "--long-query-time=0", f"--slow-query-log-file={self.slow_log}"]

    def version(self) -> str:
        conn = self.connect()
        try:
            cur = conn.cursor()
            cur.execute("SELECT VERSION()")
            return cur.fetchone()[0]
        finally:
            conn.close()


class MysqlPlace:
    """A private MariaDB and Redis; the master and the simulator connect as users of their own, so the
    slow log tells their statements apart."""

    kind = "mysql"

    def __init__(self, workdir: str, buffer_pool: str):
        self.db = BenchMariaDB(workdir, buffer_pool)
        self.redis = PrivateRedis()
        self.statements_measured = ("MariaDB's slow log (long_query_time=0), the statements of user "
                                    f"{USERS['master']}")

    def __enter__(self):
        with contextlib.ExitStack() as stack:     # a server that fails to start stops the other
            stack.enter_context(self.db)
            stack.enter_context(self.redis)
            self._create_database_and_users()
            self._started = stack.pop_all()
        return self

    def __exit__(self, *exc_info):
        self._started.__exit__(*exc_info)

    def _create_database_and_users(self) -> None:
        conn = self.db.connect()
        try:
            cur = conn.cursor()
            cur.execute(f"CREATE DATABASE `{DATABASE}` CHARACTER SET utf8mb4")
            for user in USERS.values():
                cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{PASSWORD}'")
                cur.execute(f"GRANT ALL ON `{DATABASE}`.* TO '{user}'@'%'")
        finally:
            conn.close()

    def describe(self) -> str:
        return f"MariaDB {self.db.version()}, buffer pool {self.db.buffer_pool}"

    def url(self, user: str = "root", password: str = "") -> str:
        secret = f":{password}" if password else ""
        return f"mysql://{user}{secret}@{self.db.host}:{self.db.port}/{DATABASE}"

    def settings(self, role: str) -> dict:
        return {"MYSQL_URL": self.url(USERS[role], PASSWORD), "REDIS_URL": self.redis.url(0)}

    def builder(self):
        """The store the bench builds and checks the table through, as root: a statement of the build may
        take longer than batchd's 60 s socket timeout on a slow disk."""
        return store_from_url(self.url() + "?read_timeout=3600&write_timeout=3600")

    @staticmethod
    def url_of(id_sql: str) -> str:
        return f"CONCAT('{URL_PREFIX}', {id_sql})"

    @staticmethod
    def is_due(id_sql: str) -> str:
        return f"MOD({id_sql}, {DUE_EVERY}) = 0"      # `%` would clash with MySQLdb's placeholders

    def marker_url(self) -> Optional[str]:
        return self.url()

    def longest_statements(self, master_summary: dict) -> Longest:
        return longest_in_slow_log(self.db.slow_log, USERS["master"])


class SqlitePlace:
    """One SQLite file in a directory of its own; the master times its statements itself."""

    kind = "sqlite"
    statements_measured = ("timed in the master process around each statement on the SQLite file "
                           "(SqliteFile.rows / change / change_many; a wait for the file's write lock "
                           "counts)")

    def __init__(self, workdir: str):
        self.dir = tempfile.mkdtemp(prefix="sqlite-", dir=workdir)
        self.path = os.path.join(self.dir, "scale.db")

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        shutil.rmtree(self.dir, ignore_errors=True)

    def describe(self) -> str:
        import sqlite3
        return f"SQLite {sqlite3.sqlite_version}, WAL"

    def settings(self, role: str) -> dict:
        return {"STORE": f"sqlite:///{self.path}"}

    def builder(self):
        return store_from_url(f"sqlite:///{self.path}")

    @staticmethod
    def url_of(id_sql: str) -> str:
        return f"'{URL_PREFIX}' || ({id_sql})"

    @staticmethod
    def is_due(id_sql: str) -> str:
        return f"({id_sql}) % {DUE_EVERY} = 0"

    def marker_url(self) -> Optional[str]:
        return None

    def longest_statements(self, master_summary: dict) -> Longest:
        longest = Longest()
        for phase, (seconds, statement) in master_summary["statements"].items():
            longest.add(phase, seconds, statement)
        return longest


@contextmanager
def building(place):
    """The builder's store (place.builder()), closed after."""
    store = place.builder()
    try:
        yield store
    finally:
        store.close()


def slices(count: int):
    """(first, last) of each slice of at most BUILD_SLICE rows of 0..count: first < row <= last."""
    for first in range(0, count, BUILD_SLICE):
        yield first, min(count, first + BUILD_SLICE)


def build_task_table(place, rows: int) -> float:
    """The task table made by the store itself, filled to `rows` rows by doubling (explicit ids, so they
    run 1..rows whatever the auto-increment does); seconds taken."""
    started = time.monotonic()
    with building(place) as store:
        store.create_task_table(LAYOUT)
        table, key = store.quote(LAYOUT.table), store.quote(LAYOUT.id_field)
        state, url = store.quote(LAYOUT.state_field), store.quote("url")
        p = store.placeholder
        seed = min(rows, SEED_ROWS)
        store.execute(f"INSERT INTO {table} ({key}, {url}, {state}) VALUES "
                      + ", ".join(f"({i}, {place.url_of(str(i))}, {1 if i % SEED_ROWS else -1})"
                                  for i in range(1, seed + 1)))
        have = seed
        while have < rows:
            copies = min(have, rows - have)
            for first, last in slices(copies):
                store.execute(f"INSERT INTO {table} ({key}, {url}, {state}) "
                              f"SELECT {key} + {p}, {place.url_of(f'{key} + {p}')}, {state} FROM {table} "
                              f"WHERE {key} > {p} AND {key} <= {p}", [have, have, first, last])
            have += copies
    return time.monotonic() - started


def fill_revisits(place, rows: int) -> float:
    """--mode due: the revisit table, made by the store's own open(), with one revisit per task, due a day ago
    for the tasks with id % DUE_EVERY = 0 and in 30 days for the others; seconds taken."""
    started, now = time.monotonic(), time.time()
    with building(place) as store:
        store.open(LAYOUT)
        revisit, key, p = store.quote(LAYOUT.revisit_table), store.quote(LAYOUT.id_field), store.placeholder
        for first, last in slices(rows):
            store.execute(f"INSERT INTO {revisit} ({', '.join(map(store.quote, REVISIT_COLUMNS))}) "
                          f"SELECT {key}, {p}, CASE WHEN {place.is_due(key)} THEN {p} ELSE {p} END, 'unchanged', 0 "
                          f"FROM {store.quote(LAYOUT.table)} WHERE {key} > {p} AND {key} <= {p}",
                          [DAY, now - DAY, now + 30 * DAY, first, last])
    return time.monotonic() - started


def longest_in_slow_log(path: str, user: str) -> Longest:
    """The longest statement of `user` in each phase of a MariaDB slow log (FILE output). Entries are
    in the order statements ended; a phase begins at the marker statement naming it."""
    longest, phase = Longest(), "start"
    for entry_user, seconds, statement in slow_log_entries(path):
        found = re.search(rf"'{re.escape(MARKER)}: (\w+)'", statement)
        if found:
            phase = found.group(1)
        elif entry_user == user:
            longest.add(phase, seconds, statement)
    return longest


def slow_log_entries(path: str):
    """(user, query seconds, statement text) of each entry of a slow log."""
    entry = None
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("# User@Host:"):
                if entry is not None:
                    yield entry[0], entry[1], " ".join(entry[2])
                entry = [line.split()[2].split("[")[0], 0.0, []]
            elif entry is None:
                continue       # the file's header, before the first entry
            elif line.startswith("# Query_time:"):
                entry[1] = float(line.split()[2])
            elif line.startswith("#") or re.match(r"^(SET timestamp=\d+;|use \S+;)$", line.strip()):
                continue
            else:
                entry[2].append(line.strip())
    if entry is not None:
        yield entry[0], entry[1], " ".join(entry[2])


# -- the master's process
class PhaseWatch(logging.Handler):
    """Follows the master's log: the phase it is in (start, reset, steady), the moments the batch opens
    and the reset ends, as events; with MySQL, a marker statement in the slow log as each phase begins
    (sent from the master's own thread, right after the statements of the phase before)."""

    def __init__(self, run: RunDir, marker_url: Optional[str]):
        super().__init__()
        self.run, self.phase = run, "start"
        self._marker = _MarkerConnection(marker_url) if marker_url else None

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if OPENING.match(message):
            self._enter("reset", "opening", record.created)
        if OPENED.match(message):
            self.run.event("opened", t=record.created)
        walked, before_open = RESET_WALKED.match(message), RESET_BEFORE_OPEN.match(message)
        if walked:
            self._enter("steady", "reset_finished", record.created, rows=int(walked.group(2)),
                        moved=int(walked.group(3)), master_rate=float(walked.group(5)))
        elif before_open:
            self._enter("steady", "reset_finished", record.created, rows=int(before_open.group(2)),
                        moved=int(before_open.group(3)))

    def _enter(self, phase: str, event: str, t: float, **fields) -> None:
        if self.phase == phase:
            return
        self.phase = phase
        if self._marker is not None:
            self._marker.mark(phase)
        self.run.event(event, t=t, **fields)


class _MarkerConnection:
    """A connection made ahead of time (as root: not the master's user), so a marker costs one round trip."""

    def __init__(self, url: str):
        from batchd.backends.mysql_redis.mysql import parse_mysql_url
        self.args = parse_mysql_url(url)
        self.conn = self._connect()

    def _connect(self):
        import MySQLdb
        return MySQLdb.connect(autocommit=True, **self.args)

    def mark(self, phase: str) -> None:
        try:
            self._send(phase)
        except Exception:      # idle too long: once more on a new connection
            self.conn = self._connect()
            self._send(phase)

    def _send(self, phase: str) -> None:
        cur = self.conn.cursor()
        cur.execute(f"SELECT '{MARKER}: {phase}'")
        cur.fetchall()
        cur.close()


def time_calls(owner, name: str, record: Callable[[float, tuple, object], None],
               before: Callable[[], object] = lambda: None) -> bool:
    """Replace owner.name by a wrapper that reports each call's duration, its arguments and what `before()`
    said as it began; False if owner has no such attribute."""
    original = getattr(owner, name, None)
    if original is None:
        return False

    @functools.wraps(original)
    def timed(*args, **kwargs):
        context, began = before(), time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            record(time.perf_counter() - began, args, context)
    setattr(owner, name, timed)
    return True


def time_walk_steps(record: Callable[[float, tuple, object], None]) -> Optional[str]:
    """Time the reset's chunks where the master has such a step; which one it was."""
    import importlib
    import importlib.util
    import batchd
    package = os.path.dirname(batchd.__file__)
    for module, cls, method in WALK_STEPS:
        spec = importlib.util.find_spec(module)
        # Only this batchd's modules: an editable install behind PYTHONPATH's batchd would offer its own.
        if spec is None or not (spec.origin or "").startswith(package + os.sep):
            continue
        owner = getattr(importlib.import_module(module), cls, None)
        if owner is not None and time_calls(owner, method, record):
            return f"{module}.{cls}.{method}"
    return None


def time_sqlite_statements(watch: PhaseWatch, statements: Longest, transactions: Longest) -> None:
    """Every statement the master runs on the SQLite file (store and ports alike), and every write
    transaction (the file's write lock, held from BEGIN IMMEDIATE to COMMIT)."""
    from batchd.backends.sqlite.sqlite_file import SqliteFile
    for name in ("rows", "change", "change_many"):
        time_calls(SqliteFile, name, lambda seconds, args, phase: statements.add(phase, seconds, args[1]),
                   before=lambda: watch.phase)
    original = SqliteFile.transaction

    @contextmanager
    def timed_transaction(self):
        phase, began = watch.phase, time.perf_counter()
        with original(self) as conn:
            yield conn
        transactions.add(phase, time.perf_counter() - began, "BEGIN IMMEDIATE ... COMMIT")
    SqliteFile.transaction = timed_transaction


def master_process(run: RunDir) -> None:
    from batchd.service.lifecycle import StopFlag
    from batchd.master.patrol import Master
    from batchd.runtime import Runtime
    config = run.read_json("config.json")
    logging.basicConfig(filename=run.file("master.log"), level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    watch = PhaseWatch(run, config["marker_url"])
    logging.getLogger("batchd.master").addHandler(watch)
    patrols: dict = {"reset": [], "steady": []}
    chunks: list = []
    statements, transactions = Longest(), Longest()
    # A patrol belongs to the steady phase when it began there; the ones before (opening, resetting) to the reset.
    time_calls(Master, "patrol", lambda seconds, args, phase: patrols["steady" if phase == "steady" else "reset"]
               .append(seconds), before=lambda: watch.phase)
    walk_step = time_walk_steps(lambda seconds, args, phase: chunks.append(seconds))
    if config["store"] == "sqlite":
        time_sqlite_statements(watch, statements, transactions)
    stop = StopFlag()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.request())
    master = Runtime.of(ScaleSpider(), config["master_settings"]).master()
    run.event("master_ready", pid=os.getpid())
    master.run(stop)
    run.write_json("master.json", {"patrols": patrols, "chunks": chunks, "walk_step": walk_step,
                                   "statements": statements.by_phase, "transactions": transactions.by_phase})


# -- the worker simulator's process
class WriteBacks:
    """What the simulator wrote back: for each store.move, when it ended (wall clock), how long it took,
    how many tasks it carried and how many rows it moved."""

    def __init__(self, mode: str):
        self.records: list = []
        self.first_lease: Optional[float] = None
        self.mode, self.leased, self.leased_not_set_back = mode, 0, 0

    def leased_now(self, held: list) -> None:
        if held and self.first_lease is None:
            self.first_lease = time.time()
        self.leased += len(held)
        self.leased_not_set_back += sum(not set_back(self.mode, int(lease.task_id)) for lease in held)

    def summary(self) -> dict:
        return {"writebacks": self.records, "first_lease": self.first_lease, "leased": self.leased,
                "leased_not_set_back": self.leased_not_set_back}


def set_back(mode: str, task_id: int) -> bool:
    """Whether the reset of `mode` sets the task back to pending (the built table has none pending)."""
    return mode == "full" or task_id % DUE_EVERY == 0


def lease_up_to(leases, token_prefix: str, count: int, serial: list) -> list:
    """At most `count` tasks, one lease each, as fetch threads take them; fewer when the queue runs dry."""
    taken = []
    while len(taken) < count:
        serial[0] += 1
        lease = leases.lease(f"{token_prefix}{serial[0]}", LEASE_SECONDS)
        if lease is None:
            break
        taken.append(lease)
    return taken


def write_back(backend, held: list, log: WriteBacks) -> None:
    """As the lander does (batchd/pipeline.py, _write_ready): release the leases, then one compare-and-set
    move per batch for the tasks still owned, then their count into the batch's tally where the backend
    keeps one. Only the move is the write-back's latency."""
    from batchd.task import Move
    owned = backend.leases.release(held)
    by_batch: dict = {}
    for lease in owned:
        by_batch.setdefault(lease.batch_id, []).append(lease.task_id)
    tally = getattr(backend, "tally", None)
    for batch_id, ids in by_batch.items():
        began = time.perf_counter()
        moved = backend.store.move(Move.FINISH_DONE, ids)
        log.records.append((time.time(), time.perf_counter() - began, len(ids), moved))
        if tally is not None and moved:
            tally.add_settled(batch_id, moved, 0)


def simulator_process(run: RunDir) -> None:
    """Leases and writes back at most --writeback-rate tasks/s, in rounds every TICK seconds; a round the
    queue leaves short is not made up later, so the rate achieved says when the queue ran dry."""
    from batchd.service.lifecycle import StopFlag
    from batchd.runtime import Runtime
    config = run.read_json("config.json")
    logging.basicConfig(filename=run.file("simulator.log"), level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = StopFlag()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.request())
    runtime = Runtime.of(ScaleSpider(), config["simulator_settings"])
    backend = runtime.backend           # open_backend(settings, namespace, store), as a worker's runtime opens it
    backend.store.open(runtime.layout)
    per_round = max(1, round(config["writeback_rate"] * TICK))
    token_prefix, serial, log = f"scale-sim:{os.getpid()}:", [0], WriteBacks(config["mode"])
    run.event("simulator_ready", pid=os.getpid())
    next_round = time.monotonic()
    while not stop.is_set():
        held = lease_up_to(backend.leases, token_prefix, per_round, serial)
        log.leased_now(held)
        if held:
            write_back(backend, held, log)
        next_round += TICK
        stop.wait(max(0.0, next_round - time.monotonic()))
        next_round = max(next_round, time.monotonic() - TICK)    # behind schedule: no burst to catch up
    run.write_json("simulator.json", log.summary())
    backend.close()


# -- the bench's own process: the children, their figures, the report
def child_environment() -> dict:
    """A developer's BATCHD_* variables or /etc file must not change what is measured; PYTHONPATH stays,
    so the bench runs whichever batchd it was started on."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("BATCHD_")}
    env["BATCHD_CONFIG"] = os.devnull
    return env


class Child:
    """One process of the run: this file again, in the role `role`."""

    def __init__(self, run: RunDir, role: str):
        self.run, self.role = run, role
        with open(run.file(f"{role}.out"), "ab") as out:
            self.process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", role,
                                             "--run-dir", run.path], env=child_environment(), stdout=out,
                                            stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 60.0) -> None:
        """A warm stop (SIGTERM), as batchd's own supervisor asks."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the {self.role} did not stop within {timeout:.0f} s\n{self.tail()}") from None
        if self.process.returncode != 0:
            raise RuntimeError(f"the {self.role} exited {self.process.returncode}\n{self.tail()}")

    def kill(self) -> None:
        if self.alive():
            self.process.kill()
            self.process.wait()

    def tail(self, chars: int = 3000) -> str:
        text = ""
        for name in (f"{self.role}.out", f"{self.role}.log"):
            try:
                with open(self.run.file(name), errors="replace") as f:
                    text += f"--- {name}\n{f.read()[-chars:]}\n"
            except FileNotFoundError:
                pass
        return text


def wait_until(condition: Callable[[], object], timeout: float, children: list, what: str):
    """Poll `condition` until it gives something true (returned); a child that dies, or the deadline,
    ends the wait with an error saying what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        for child in children:
            if not child.alive():
                raise RuntimeError(f"the {child.role} exited {child.process.returncode} while waiting for "
                                   f"{what}\n{child.tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} within {timeout:.0f} s\n" + "".join(c.tail() for c in children))
        time.sleep(POLL)


def vm_rss_kb(pid: int) -> Optional[int]:
    """A process's resident set now (VmRSS, in kB); None once it has gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return None


class RssSampler:
    """A process's resident set (VmRSS), once a second, on a thread of its own."""

    def __init__(self, pid: int):
        self.pid, self.samples_kb = pid, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while True:
            rss = self.read()
            if rss is not None:
                self.samples_kb.append(rss)
            if self._stop.wait(1.0):
                return

    def read(self) -> Optional[int]:
        return vm_rss_kb(self.pid)

    def finish(self) -> dict:
        """Start, peak and end, in MB, with one last sample now."""
        self._stop.set()
        self._thread.join()
        last = self.read()
        samples = self.samples_kb + ([last] if last is not None else [])
        mb = [round(kb / 1024, 1) for kb in samples]
        return {"start": mb[0], "peak": max(mb), "end": mb[-1]} if mb else {"start": None, "peak": None, "end": None}


def run_children(run: RunDir, args) -> dict:
    """The simulator, then the master; the reset, then --steady seconds of patrols; both stopped warm.
    What the run measured: the events, both summaries, the master's RSS, when the steady phase ended."""
    children: list = []
    try:
        children.append(Child(run, "simulator"))
        wait_until(lambda: "simulator_ready" in run.events(), 120, children, "the simulator's start")
        master = Child(run, "master")
        children.append(master)
        wait_until(lambda: "master_ready" in run.events(), 120, children, "the master's start")
        rss = RssSampler(master.pid)
        reset_over = wait_until(lambda: run.events().get("reset_finished"), args.timeout, children,
                                "end of the reset (the master's log line)")
        print(f"  reset over after {reset_over['t'] - run.events()['opening']['t']:.1f} s; "
              f"{args.steady:.0f} s of steady patrols", flush=True)
        # The one deliberate wait: the steady phase lasts --steady seconds (children watched throughout).
        wait_until(lambda: time.time() >= reset_over["t"] + args.steady, args.steady + 60, children,
                   "the end of the steady phase")
        steady_end = time.time()
        children[0].stop()
        master_rss = rss.finish()
        master.stop()
    finally:
        for child in children:
            child.kill()
    return {"events": run.events(), "master": run.read_json("master.json"),
            "simulator": run.read_json("simulator.json"), "rss": master_rss, "steady_end": steady_end}


def figures_of(place, measured: dict, rows: int, build_seconds: float, args) -> dict:
    """Every figure of the run, by name (the JSON line). The reset phase runs from the master's `opening a
    new batch` line to the line saying the reset is over; the steady phase from there to the stop."""
    events, master, simulator = measured["events"], measured["master"], measured["simulator"]
    opening, opened, reset = events["opening"], events.get("opened"), events["reset_finished"]
    reset_seconds = reset["t"] - opening["t"]
    steady_seconds = measured["steady_end"] - reset["t"]
    longest = place.longest_statements(master)
    writebacks = simulator["writebacks"]        # (ended, seconds, tasks, rows moved)
    during_reset = [w for w in writebacks if w[0] < reset["t"]]
    steady = [w for w in writebacks if w[0] >= reset["t"]]
    first_lease = simulator["first_lease"]
    figures = {
        "store": place.kind, "server": place.describe(), "rows": rows, "mode": args.mode,
        "monitor_interval_s": args.monitor_interval,
        "build_s": round(build_seconds, 2), "build_rows_per_s": round(rows / build_seconds),
        "reset_s": round(reset_seconds, 3), "reset_rows": reset["rows"], "reset_moved": reset["moved"],
        "reset_rows_per_s": round(reset["rows"] / reset_seconds) if reset_seconds > 0 else None,
        "reset_rows_per_s_by_master": reset.get("master_rate"),
        "reset_longest_statement_ms": ms(longest.get("reset")[0]),
        "reset_longest_statement": longest.get("reset")[1],
        "patrol_longest_statement_ms": ms(longest.get("steady")[0]),
        "patrol_longest_statement": longest.get("steady")[1],
        "statements_measured_by": place.statements_measured,
        "steady_s": round(steady_seconds, 1),
        **spread("patrol", master["patrols"]["steady"]),
        **spread("reset_patrol", master["patrols"]["reset"]),
        "reset_chunk_timed": master["walk_step"],
        **spread("reset_chunk", master["chunks"]),
        **spread("reset_writeback", [w[1] for w in during_reset]),
        **spread("steady_writeback", [w[1] for w in steady]),
        "writeback_rate_asked": args.writeback_rate,
        # (over the steady phase alone: the simulator, stopped after it, may write back once more)
        "steady_writeback_rate": round(sum(w[3] for w in steady if w[0] <= measured["steady_end"]) / steady_seconds, 1)
        if steady_seconds > 0 else None,
        "tasks_leased": simulator["leased"],
        "tasks_written_back": sum(w[3] for w in writebacks),
        "first_lease_after_open_s": round(first_lease - opened["t"], 3) if first_lease and opened else None,
        "first_lease_after_opening_s": round(first_lease - opening["t"], 3) if first_lease else None,
        "master_rss_start_mb": measured["rss"]["start"], "master_rss_peak_mb": measured["rss"]["peak"],
        "master_rss_end_mb": measured["rss"]["end"],
    }
    if master["transactions"]:
        figures["reset_longest_transaction_ms"] = ms(master["transactions"].get("reset", (None,))[0])
        figures["patrol_longest_transaction_ms"] = ms(master["transactions"].get("steady", (None,))[0])
    return figures


def check_set_back(place, mode: str, figures: dict, measured: dict) -> dict:
    """Whether the reset set back the rows it should and no other, read in the table once everything stopped:
    the figures tasks_done_in_table (rows done among those it set back: each was written back by the simulator,
    the master itself marks none done), set_back_expected (every row in full; in due, the revisits due at the
    opening) and set_back_errors (what went astray, if anything)."""
    with building(place) as store:
        table, key, state = (store.quote(name) for name in (LAYOUT.table, LAYOUT.id_field, LAYOUT.state_field))
        reset = place.is_due(key) if mode == "due" else "1 = 1"
        # Built, a row is done (1) or failed (-1). Those the reset set back are now pending, leased or done; the
        # others are as built, done (--mode due: every failed row is due).
        done, astray = store.fetch(
            f"SELECT COALESCE(SUM(CASE WHEN {reset} AND {state} = 1 THEN 1 ELSE 0 END), 0), "
            f"COALESCE(SUM(CASE WHEN ({reset} AND {state} = -1) OR (NOT ({reset}) AND {state} <> 1) THEN 1 ELSE 0 END), 0) "
            f"FROM {table}")[0]
        expected = figures["rows"] if mode == "full" else store.fetch(
            f"SELECT COUNT(*) FROM {store.quote(LAYOUT.revisit_table)} WHERE {store.quote('next_due')} <= "
            f"{store.placeholder}", [measured["events"]["opening"]["t"]])[0][0]
    errors = [f"the reset set back {figures['reset_moved']:,} rows, not the {expected:,} it should"
              ] if figures["reset_moved"] != expected else []
    if astray:
        errors.append(f"{astray:,} rows are not as the reset should have left them")
    if measured["simulator"]["leased_not_set_back"]:
        errors.append(f"the simulator leased {measured['simulator']['leased_not_set_back']:,} tasks the reset "
                      "should not have set back")
    return {"tasks_done_in_table": int(done), "set_back_expected": int(expected), "set_back_errors": errors}


def run_bench(args) -> dict:
    os.makedirs(args.workdir, exist_ok=True)
    top = tempfile.mkdtemp(prefix="batchd-scale-", dir=args.workdir)
    try:
        place = MysqlPlace(top, args.buffer_pool) if args.store == "mysql" else SqlitePlace(top)
        with place:
            print(f"{place.kind}: building {args.rows:,} rows in {top}", flush=True)
            build_seconds = build_task_table(place, args.rows)
            print(f"  built in {build_seconds:.1f} s ({args.rows / build_seconds:,.0f} rows/s)", flush=True)
            revisit_seconds = fill_revisits(place, args.rows) if args.mode == "due" else None
            if revisit_seconds is not None:
                print(f"  revisits filled in {revisit_seconds:.1f} s", flush=True)
            run = RunDir(os.path.join(top, "run"))
            os.mkdir(run.path)
            run.write_json("config.json", {
                "store": place.kind, "marker_url": place.marker_url(), "writeback_rate": args.writeback_rate,
                "mode": args.mode,
                "master_settings": batchd_settings(place, "master", run, args),
                "simulator_settings": batchd_settings(place, "simulator", run, args)})
            measured = run_children(run, args)
            figures = figures_of(place, measured, args.rows, build_seconds, args)
            figures.update(check_set_back(place, args.mode, figures, measured),
                           revisits_s=None if revisit_seconds is None else round(revisit_seconds, 2))
    finally:
        if args.keep:
            print(f"kept {top}")
        else:
            shutil.rmtree(top, ignore_errors=True)
    return figures


def batchd_settings(place, role: str, run: RunDir, args) -> dict:
    settings = dict(place.settings(role), NAMESPACE=NAMESPACE, LOG_LEVEL="INFO", BATCH_MODE=args.mode,
                    BATCH_MONITOR_INTERVAL=str(args.monitor_interval),
                    FAILED_ITEMS_PATH=run.file("failed_items.jsonl"))
    if args.reset_chunk:
        settings["BATCH_RESET_CHUNK"] = str(args.reset_chunk)
    if args.push_limit:
        settings["BATCH_PUSH_LIMIT"] = str(args.push_limit)
    return settings


def report(f: dict) -> str:
    def n(value, unit: str = "", digits: int = 1) -> str:
        return "—" if value is None else f"{value:,.{digits}f}{unit}"

    def durations(name: str) -> str:
        return ", ".join(f"{q} {n(f[f'{name}_{q}_ms'], ' ms')}" for q in ("p50", "p99", "max"))

    lines = [
        f"{f['store']}: {f['rows']:,} rows, BATCH_MODE={f['mode']} ({f['server']}; "
        f"BATCH_MONITOR_INTERVAL={f['monitor_interval_s']:g})",
        ("table build", f"{n(f['build_s'], ' s')}  ({n(f['build_rows_per_s'], ' rows/s', 0)}, INSERT ... SELECT "
                        "doubling)"),
    ]
    if f["revisits_s"] is not None:
        lines.append(("revisit table", f"{n(f['revisits_s'], ' s')}  (1 task in {DUE_EVERY} due)"))
    lines += [
        ("reset", f"{n(f['reset_s'], ' s', 2)}  ({n(f['reset_rows_per_s'], ' rows/s', 0)}; {f['reset_rows']:,} rows, "
                  f"{f['reset_moved']:,} set back to pending of {f['set_back_expected']:,} to set back: "
                  + ("; ".join(f["set_back_errors"]) or "checked") + ")"),
        ("longest statement, reset", f"{n(f['reset_longest_statement_ms'], ' ms')}  {f['reset_longest_statement']}"),
        ("longest statement, patrols",
         f"{n(f['patrol_longest_statement_ms'], ' ms')}  {f['patrol_longest_statement']}"),
    ]
    if "reset_longest_transaction_ms" in f:
        lines.append(("longest write transaction", f"reset {n(f['reset_longest_transaction_ms'], ' ms')}, "
                                                   f"patrols {n(f['patrol_longest_transaction_ms'], ' ms')}"))
    lines += [
        ("patrols, steady", f"{f['patrols']} in {n(f['steady_s'], ' s')}: {durations('patrol')}"),
        ("patrols, reset", f"{f['reset_patrols']}: {durations('reset_patrol')}"),
        ("reset chunks", f"{f['reset_chunks']} ({f['reset_chunk_timed']}): {durations('reset_chunk')}"
         if f["reset_chunk_timed"] else "— (this master has no reset step to time)"),
        ("write-back, during the reset", f"{f['reset_writebacks']} moves: {durations('reset_writeback')}"),
        ("write-back, steady", f"{f['steady_writebacks']} moves: {durations('steady_writeback')}; "
                               f"{n(f['steady_writeback_rate'])} tasks/s of {f['writeback_rate_asked']:g} asked"),
        ("first lease", f"{n(f['first_lease_after_open_s'], ' s', 2)} after `batch N opened`, "
                        f"{n(f['first_lease_after_opening_s'], ' s', 2)} after `opening a new batch`"),
        ("master RSS", f"start {n(f['master_rss_start_mb'], ' MB')}, peak {n(f['master_rss_peak_mb'], ' MB')}, "
                       f"end {n(f['master_rss_end_mb'], ' MB')}"),
        ("tasks written back", f"{f['tasks_written_back']:,} ({f['tasks_done_in_table']:,} done in the table)"),
        f"statements measured by: {f['statements_measured_by']}",
    ]
    return "\n".join(line if isinstance(line, str) else f"  {line[0]:<30}{line[1]}" for line in lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the task table")
    parser.add_argument("--store", choices=("mysql", "sqlite"), default="mysql")
    parser.add_argument("--mode", choices=("full", "due"), default="full", help="BATCH_MODE of the master")
    parser.add_argument("--steady", type=float, default=60.0, help="seconds of patrols after the reset")
    parser.add_argument("--writeback-rate", type=float, default=500.0, help="tasks/s the simulator writes back")
    parser.add_argument("--monitor-interval", type=float, default=1.0, help="BATCH_MONITOR_INTERVAL")
    parser.add_argument("--reset-chunk", type=int, help="BATCH_RESET_CHUNK (default: batchd's)")
    parser.add_argument("--push-limit", type=int, help="BATCH_PUSH_LIMIT (default: batchd's)")
    parser.add_argument("--buffer-pool", default="4G", help="MariaDB's innodb_buffer_pool_size")
    parser.add_argument("--workdir", default="/var/tmp", help="where the datadir or the SQLite file goes")
    parser.add_argument("--timeout", type=float, default=3 * 3600, help="seconds the reset may take")
    parser.add_argument("--keep", action="store_true", help="keep the run's directory (logs, slow log)")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    parser.add_argument("--child", choices=("master", "simulator"), help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        {"master": master_process, "simulator": simulator_process}[args.child](RunDir(args.run_dir))
        return
    figures = run_bench(args)
    print(report(figures))
    if args.json:
        print(json.dumps(figures))
    if figures["set_back_errors"]:
        sys.exit("FAILED: " + "; ".join(figures["set_back_errors"]))


if __name__ == "__main__":
    main()
