"""`python -m bench compare`: batchd against the bare loop, on one site and one task list, round by
round. How to run it and what each figure means: bench/__main__.py."""
import compileall
import contextlib
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Optional

from bench.baseline import FLUSH_ROWS
from bench.batch import LAYOUT, TESTS, Place, load_tasks     # also puts tests/ on sys.path
from bench.probes import MysqlCounters, RedisCounters, Run, cpu_seconds_of
from bench.site import open_site
from batchd.backends import store_from_url
from servers import PrivateMariaDB, PrivateRedis

REPOSITORY = os.path.dirname(TESTS)
CONTENDERS = ("baseline", "mysql", "mysql-noquality", "sqlite", "tree")
TITLES = {"baseline": "bare loop (MySQL)", "mysql": "batchd MySQL+Redis", "sqlite": "batchd SQLite",
          "mysql-noquality": "batchd MySQL+Redis, quality checks off",
          "tree": "batchd MySQL+Redis from --tree"}
OPENED = re.compile(r"\bbatch \d+ opened at ")              # the master's line opening the batch
FINISHED = re.compile(r"\bbatch \d+ finished: ")            # the master's line closing the batch
BUFFER_POOL = "512M"          # the whole run's tables stay in memory: disk reads are not what is measured
DONE = 1                      # batchd's state value for done (batchd/task.py), which the bare loop writes too
MB = 1024 * 1024


class BenchFailure(Exception):
    """A contender did not do the whole job: the comparison stops and says why."""


@dataclass(frozen=True)
class Config:
    processes: int
    threads: int
    tasks: int
    small: bool = False

    @property
    def label(self) -> str:
        return f"{self.processes}x{self.threads}" + (" small" if self.small else "")


def parse_configs(text: str, tasks: int, small: int) -> list:
    """`1x4,1x8,2x8` at `tasks` tasks each, then the small batch at 2x8 unless `small` is 0."""
    configs = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        found = re.fullmatch(r"(\d+)x(\d+)", part)
        if not found or min(int(found.group(1)), int(found.group(2))) < 1:
            raise SystemExit(f"--configs: {part!r} is not PROCESSESxTHREADS (e.g. 2x8)")
        configs.append(Config(int(found.group(1)), int(found.group(2)), tasks))
    if small:
        configs.append(Config(2, 8, small, small=True))
    return configs


# -- the servers the contenders share
class BenchMariaDB(PrivateMariaDB):
    """tests/servers.py's private mariadbd, its buffer pool big enough for every table of a run."""

    def command(self) -> list:
        return [arg for arg in super().command() if not arg.startswith("--innodb-buffer-pool-size=")] + [
            f"--innodb-buffer-pool-size={BUFFER_POOL}", "--max-connections=1000"]


class Servers:
    """A private mariadbd and redis-server when a contender needs MySQL, so that their counters count
    only the contender's statements and commands, and their CPU only its load. Redis comes with
    MariaDB even for the bare loop alone: bench/batch.py's Place cleans its namespace there."""

    def __init__(self, contenders: list):
        self.needed = any(c in ("baseline", "mysql", "mysql-noquality", "tree") for c in contenders)
        self.db: Optional[BenchMariaDB] = None
        self.redis: Optional[PrivateRedis] = None
        self._started: Optional[contextlib.ExitStack] = None

    def __enter__(self):
        if self.needed:
            with contextlib.ExitStack() as stack:     # a server that fails to start stops the other
                self.db = stack.enter_context(BenchMariaDB())
                self.redis = stack.enter_context(PrivateRedis())
                self._started = stack.pop_all()
        return self

    def __exit__(self, *exc_info):
        if self._started is not None:
            self._started.__exit__(*exc_info)

    def mariadbd_cpu_seconds(self) -> float:
        """The private mariadbd's CPU so far (Redis tells its own: RedisCounters)."""
        return cpu_seconds_of(self.db.process.pid)

    def describe(self) -> dict:
        if not self.needed:
            return {}
        conn = self.db.connect()
        cur = conn.cursor()
        cur.execute("SELECT VERSION()")
        mariadb = cur.fetchone()[0]
        conn.close()
        redis_version = RedisCounters(self.redis.url()).client.info("server")["redis_version"]
        return {"mysql": f"private MariaDB {mariadb}, buffer pool {BUFFER_POOL}",
                "redis": f"private Redis {redis_version}"}


# -- the contenders
class Contender:
    """How one contender is set up, started and read."""

    name = ""
    store_kind = "mysql"
    root_role = "supervisor"          # what the root of its process tree is
    closes_batches = True             # it logs the `batch N finished` line
    uses_redis = False                # batchd on MySQL leases through Redis; the bare loop and SQLite do not

    def __init__(self, servers: Servers, workdir: str, monitor_interval: float, settings: Optional[dict] = None):
        self.servers, self.workdir, self.monitor_interval = servers, workdir, monitor_interval
        self.settings = settings or {}      # --setting NAME=VALUE: batchd's, on top of the bench's own

    def place(self) -> Place:
        if self.store_kind == "sqlite":
            return Place("sqlite")
        return Place("mysql", mysql_port=self.servers.db.port, redis_url=self.servers.redis.url(0))

    def prepare(self, place: Place, tasks: int, site) -> None:
        """The task table with `tasks` pending tasks (bench/batch.py's load, through batchd's store),
        plus the column that times each task's write-back."""
        load_tasks(place, tasks, site)
        clock_tasks(place, self.store_kind)

    def command(self, place: Place, config: Config) -> list:
        return [sys.executable, "-m", "batchd", "run", "bench.spider:CompareSpider", "--once",
                "--workers", str(config.processes)]

    def environment(self, place: Place, config: Config) -> dict:
        settings = dict(place.settings, SPIDER_THREAD_COUNT=str(config.threads), LOG_LEVEL="INFO",
                        BATCH_MONITOR_INTERVAL=f"{self.monitor_interval:g}",
                        FAILED_ITEMS_PATH=os.path.join(self.workdir, f"{place.name}-failed.jsonl"), **self.settings)
        return dict(child_environment(), BATCHD_CONFIG=os.devnull,
                    **{f"BATCHD_{name}": value for name, value in settings.items()})


class BatchdMysql(Contender):
    name = "mysql"
    uses_redis = True


class BatchdMysqlNoQuality(BatchdMysql):
    """batchd on MySQL + Redis with the quality checks off (QUALITY_CHECKS, QUALITY_BLOCK_HOLD), beside
    `mysql` in one sitting: what the checks cost a worker is the difference of the two. The two settings
    come last, over any --setting."""

    name = "mysql-noquality"

    def __init__(self, servers: Servers, workdir: str, monitor_interval: float, settings: Optional[dict] = None):
        super().__init__(servers, workdir, monitor_interval,
                         dict(settings or {}, QUALITY_CHECKS="false", QUALITY_BLOCK_HOLD="false"))


class BatchdSqlite(Contender):
    name = "sqlite"
    store_kind = "sqlite"


class BatchdTree(BatchdMysql):
    """batchd on MySQL + Redis imported from another tree (--tree: a worktree of an older commit, say), beside
    this repository's in one sitting: a directory of the run's holding only a `batchd` link to the tree's
    comes first on PYTHONPATH, so that the bench's own package (bench.spider) stays this repository's."""

    name = "tree"

    def __init__(self, servers: Servers, workdir: str, monitor_interval: float, settings: Optional[dict] = None,
                 tree: Optional[str] = None):
        super().__init__(servers, workdir, monitor_interval, settings)
        self.tree_path: Optional[str] = None
        if tree:
            self.tree_path = os.path.join(workdir, "tree")
            if not os.path.isdir(self.tree_path):
                os.makedirs(self.tree_path)
                os.symlink(os.path.join(os.path.abspath(tree), "batchd"), os.path.join(self.tree_path, "batchd"))

    def environment(self, place: Place, config: Config) -> dict:
        env = super().environment(place, config)
        if self.tree_path:
            env["PYTHONPATH"] = os.pathsep.join((self.tree_path, env["PYTHONPATH"]))
        return env


def check_tree(tree: Optional[str], settings: dict, options: Optional[dict] = None) -> None:
    """A clear error before any run: --tree holds no batchd, or its batchd has no such setting (a tree
    from before HOST_DOWN_GIVE_UP, say), which batchd itself would only say in a failed run's log."""
    root = os.path.abspath(tree) if tree else REPOSITORY
    if not os.path.isfile(os.path.join(root, "batchd", "__init__.py")):
        raise SystemExit(f"--tree {tree}: no batchd package there (want {os.path.join(root, 'batchd')})")
    listed = subprocess.run([sys.executable, "-c", "import dataclasses, batchd.config as c; "
                             "print(' '.join(f.name for f in dataclasses.fields(c.Settings)))"],
                            env=dict(os.environ, PYTHONPATH=root), cwd=root, capture_output=True, text=True)
    known = set(listed.stdout.split())
    for name in settings:
        if name not in known:
            raise SystemExit(f"the batchd at {root} has no setting {name} "
                             f"({(options or {}).get(name, '--setting')})")


def tree_version(tree: Optional[str]) -> str:
    """This repository's commit, or --tree's (its path, when it is no git checkout: an export)."""
    if not tree:
        return batchd_version()
    found = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return f"{found.stdout.strip() or 'the tree'} at {os.path.abspath(tree)}"


class Baseline(Contender):
    name = "baseline"
    root_role = "master"
    closes_batches = False

    def prepare(self, place: Place, tasks: int, site) -> None:
        super().prepare(place, tasks, site)
        store = store_from_url(place.url)
        try:
            store.create_default_item_table(LAYOUT.default_item_table)    # the table batchd's spider writes
        finally:
            store.close()

    def command(self, place: Place, config: Config) -> list:
        return [sys.executable, "-m", "bench.baseline", "--port", str(self.servers.db.port),
                "--database", place.name, "--processes", str(config.processes), "--threads", str(config.threads)]

    def environment(self, place: Place, config: Config) -> dict:
        return child_environment()


def child_environment() -> dict:
    """This environment without what would steer batchd elsewhere (a developer's BATCHD_* or a systemd
    unit's variables), the repository importable (bench.spider, bench.fields)."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("BATCHD_") and name not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "INVOCATION_ID",
                                                              "JOURNAL_STREAM", "STATE_DIRECTORY")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (REPOSITORY, os.environ.get("PYTHONPATH"))))
    return env


def clock_tasks(place: Place, kind: str, states: tuple = (DONE,)) -> None:
    """The task table of `place` gets its write-back clock (below)."""
    store = store_from_url(place.url)
    try:
        add_write_back_clock(store, kind, states)
    finally:
        store.close()


def add_write_back_clock(store, kind: str, states: tuple = (DONE,)) -> None:
    """A `done_at` column the database itself stamps, to the microsecond, when a task moves to one of
    `states` (done; python -m bench.hosts adds failed): the task table's own time column has whole
    seconds, too coarse for the close delay. The same trigger on every contender's table, so that
    all pay for it alike."""
    table, state = LAYOUT.table, LAYOUT.state_field
    targets = ", ".join(str(int(value)) for value in states)
    if kind == "mysql":
        store.execute(f"ALTER TABLE `{table}` ADD COLUMN `done_at` DATETIME(6) NULL")
        store.execute(f"CREATE TRIGGER `{table}_done_at` BEFORE UPDATE ON `{table}` FOR EACH ROW "
                      f"SET NEW.`done_at` = IF(NEW.`{state}` IN ({targets}) AND NOT OLD.`{state}` <=> NEW.`{state}`, "
                      "SYSDATE(6), NEW.`done_at`)")
    else:
        store.execute(f'ALTER TABLE "{table}" ADD COLUMN "done_at" REAL')
        store.execute(f'CREATE TRIGGER "{table}_done_at" AFTER UPDATE OF "{state}" ON "{table}" '
                      f'WHEN NEW."{state}" IN ({targets}) AND OLD."{state}" IS NOT NEW."{state}" BEGIN '
                      f'UPDATE "{table}" SET "done_at" = (julianday(\'now\') - 2440587.5) * 86400.0 '
                      f'WHERE rowid = NEW.rowid; END')


def read_back(place: Place, kind: str) -> dict:
    """Tasks done, items stored and the last write-back's time (Unix seconds), from the store."""
    table, items = LAYOUT.table, LAYOUT.default_item_table
    last = "UNIX_TIMESTAMP(MAX(`done_at`))" if kind == "mysql" else 'MAX("done_at")'
    store = store_from_url(place.url)
    try:
        done, last_done = store.fetch(f"SELECT COUNT(*), {last} FROM {store.quote(table)} "
                                      f"WHERE {store.quote(LAYOUT.state_field)} = {DONE}")[0]
        stored = store.fetch(f"SELECT COUNT(*) FROM {store.quote(items)}")[0][0]
    finally:
        store.close()
    return {"done": int(done), "items": int(stored), "last_done": float(last_done) if last_done is not None else None}


# -- one run
def run_once(contender: Contender, config: Config, site, timeout: float) -> dict:
    """The contender on `config.tasks` fresh pending tasks: started, waited for, checked, measured."""
    place = contender.place()
    try:
        contender.prepare(place, config.tasks, site)
        counters = ServerCounters(contender)
        site.reset()
        run = Run(contender.command(place, config), contender.environment(place, config),
                  cwd=contender.workdir).go(timeout)
        counted = counters.finish()
        if run.exit_code != 0:
            raise BenchFailure(f"{contender.name} {config.label}: exit {run.exit_code}; its last lines:\n{run.tail()}")
        stored = read_back(place, contender.store_kind)
    finally:
        place.remove()
    if not stored["done"] == stored["items"] == config.tasks:
        raise BenchFailure(f"{contender.name} {config.label}: {stored['done']} tasks done and {stored['items']} items "
                           f"stored, {config.tasks} expected; its last lines:\n{run.tail()}")
    return figures_of(run, contender, config, stored, counted, site)


class ServerCounters:
    """The private servers' counters and CPU, read before a run and after it."""

    def __init__(self, contender: Contender):
        servers = contender.servers
        self.redis = RedisCounters(servers.redis.url()) if contender.uses_redis else None
        self.mysql = MysqlCounters(servers.db.connect) if contender.store_kind == "mysql" else None
        # The servers this contender talks to: MariaDB unless on SQLite, Redis only for batchd on MySQL.
        self.servers = servers
        self.before = {"redis": self.redis.read() if self.redis else None,
                       "mysql": self.mysql.read() if self.mysql else None,
                       "mariadbd_cpu": servers.mariadbd_cpu_seconds() if self.mysql else None}

    def finish(self) -> dict:
        counted: dict = {"cpu_by_server": {}}
        if self.mysql:
            counted["cpu_by_server"]["mariadbd"] = self.servers.mariadbd_cpu_seconds() - self.before["mariadbd_cpu"]
            counted.update(MysqlCounters.delta(self.before["mysql"], self.mysql.read()))
            self.mysql.close()
        if self.redis:
            redis = RedisCounters.delta(self.before["redis"], self.redis.read())
            counted["cpu_by_server"]["redis"] = redis.pop("cpu_seconds")
            counted.update(redis)
        counted["cpu"] = sum(counted["cpu_by_server"].values()) if counted["cpu_by_server"] else None
        return counted


def figures_of(run: Run, contender: Contender, config: Config, stored: dict, counted: dict, site) -> dict:
    tasks, elapsed = config.tasks, run.ended - run.started
    first_hit, last_hit = site.first_hit_since_reset(), site.last_hit_since_reset()
    opened, finished = run.first_line_time(OPENED), run.first_line_time(FINISHED)
    last_done = stored["last_done"]

    def per_task(value, scale: float = 1.0):
        return None if value is None else value * scale / tasks

    def between(earlier: Optional[float], later: Optional[float]) -> Optional[float]:
        return later - earlier if earlier and later else None

    return {
        "tasks": tasks, "done": stored["done"], "items": stored["items"], "site_hits": site.hits_since_reset(),
        "elapsed_s": elapsed, "tasks_per_s": tasks / elapsed,
        "cpu_ms_per_task": per_task(run.cpu_seconds, 1000), "cpu_cores_busy": run.cpu_seconds / elapsed,
        "db_cpu_ms_per_task": per_task(counted["cpu"], 1000),
        **{f"{name}_cpu_us_per_task": per_task(seconds, 1e6) for name, seconds in counted.get("cpu_by_server", {}).items()},
        "redis_round_trips_per_task": per_task(counted.get("round_trips")),
        "redis_commands_per_task": per_task(counted.get("commands")),
        "mysql_statements_per_task": per_task(counted.get("statements")),
        **by_role(run, contender.root_role, tasks),
        "batch_opened_s": between(run.started, opened),
        "first_fetch_s": between(run.started, first_hit),
        "last_done_after_last_fetch_s": between(last_hit, last_done),
        "close_delay_s": between(last_done, finished) if contender.closes_batches else None,
        "exit_after_last_done_s": between(last_done, run.ended),
    }


def by_role(run: Run, root_role: str, tasks: int) -> dict:
    """Per role (the workers, the master, the supervisor): the peak resident, proportional and private
    MB of the largest process, and the CPU ms per task of all its processes, sampled (tree.cpu).
    batchd's children are told apart by their process titles; the probe is left out."""
    tree = run.tree
    peaks = {measure: {"worker": 0, "master": 0, "supervisor": 0} for measure in ("rss", "pss", "uss")}
    cpu = {"worker": 0.0, "master": 0.0, "supervisor": 0.0}
    for pid in tree.peak:
        role = _role_of(tree, pid, root_role)
        if role is None:
            continue
        for measure, sampled in (("rss", tree.peak), ("pss", tree.peak_pss), ("uss", tree.peak_uss)):
            peaks[measure][role] = max(peaks[measure][role], sampled.get(pid, 0))
        cpu[role] += tree.cpu.get(pid, 0.0)
    return {**{f"{measure}_{role}_mb": (peak / MB if peak else None)
               for measure, by in peaks.items() for role, peak in by.items()},
            **{f"cpu_{role}_ms_per_task": (seconds * 1000 / tasks if peaks["rss"][role] else None)
               for role, seconds in cpu.items()}}


def _role_of(tree, pid: int, root_role: str) -> Optional[str]:
    title = tree.title.get(pid, "")
    if pid == tree.root:
        return root_role
    if title.startswith("batchd: probe"):
        return None
    return "master" if title.startswith("batchd: master") else "worker"


# -- the sitting
def compare(args) -> dict:
    contenders = [name.strip() for name in args.contenders.split(",") if name.strip()]
    unknown = sorted(set(contenders) - set(CONTENDERS))
    if unknown or not contenders:
        raise SystemExit(f"--contenders: {', '.join(unknown) or '(none)'} unknown; "
                         f"choose among {', '.join(CONTENDERS)}")
    if ("tree" in contenders) != bool(args.tree):
        raise SystemExit("--tree PATH and the contender `tree` go together: one names the other's batchd")
    configs = parse_configs(args.configs, args.tasks, args.small)
    if not configs:
        raise SystemExit("--configs: no configuration to run")
    if args.tree:
        check_tree(args.tree, batchd_settings(args.setting))
    workdir = tempfile.mkdtemp(prefix="bench-compare-")
    results: dict = {}
    version_at_start = batchd_version()
    byte_compile()
    if args.tree:
        byte_compile(os.path.abspath(args.tree), ("batchd",))
    try:
        with open_site(args.site, max(c.tasks for c in configs)) as site, Servers(contenders) as servers:
            say(f"site: {site.describe()}")
            settings = batchd_settings(args.setting)
            made = {name: kind(servers, workdir, args.monitor_interval, settings)
                    for name, kind in (("baseline", Baseline), ("mysql", BatchdMysql),
                                       ("mysql-noquality", BatchdMysqlNoQuality), ("sqlite", BatchdSqlite))
                    if name in contenders}
            if args.tree:
                made["tree"] = BatchdTree(servers, workdir, args.monitor_interval, settings, args.tree)
            for round_no in range(args.rounds):
                for config in configs:
                    for name in rotated(contenders, round_no):
                        figures = run_once(made[name], config, site, timeout=run_timeout(config.tasks))
                        results.setdefault((name, config), []).append(figures)
                        say(f"round {round_no + 1}/{args.rounds} {config.label:>9} {name:>15}: {config.tasks} tasks in "
                            f"{figures['elapsed_s']:.1f} s, {figures['tasks_per_s']:.0f} tasks/s, "
                            f"{figures['cpu_ms_per_task']:.1f} CPU ms/task")
            report = {"site": site.describe(), "site_kind": site.kind,
                      "environment": dict(environment(servers, args, version_at_start),
                                          **({"tree": tree_version(args.tree)} if args.tree else {})),
                      "batchd_settings": batchd_settings(args.setting),
                      "rounds": args.rounds, "tasks": args.tasks, "small": args.small,
                      "contenders": contenders, "configs": [c.label for c in configs],
                      "rows": rows_of(results, contenders, configs)}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return report


def markdown_table(header: list, rows: list) -> list:
    """The lines of a markdown table: its header, the rule, a line per row (each a list of cells)."""
    return ["| " + " | ".join(header) + " |", "| --- " * len(header) + "|"] + [
        "| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def print_report(sitting, args, markdown, name: str, correct=lambda report: True) -> int:
    """`sitting(args)`'s report as JSON with --json, as markdown(report) otherwise; exit code 1, and why
    on stderr, if a run failed, and 1 if `correct(report)` says a check failed."""
    try:
        report = sitting(args)
    except BenchFailure as failure:
        print(f"bench {name} failed: {failure}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=1) if args.json else markdown(report))
    return 0 if correct(report) else 1


def byte_compile(root: str = REPOSITORY, packages: tuple = ("batchd", "bench", os.path.join("tests", "spiders"))) -> None:
    """Compile batchd's and the bench's modules once, as installing does (dh_python3's py3compile for
    the Debian package, pip for a wheel; the site's libraries were compiled so): an editable checkout
    run with PYTHONDONTWRITEBYTECODE would otherwise compile them at every start (about 0.17 s)."""
    for package in packages:
        compileall.compile_dir(os.path.join(root, package), quiet=1)


def batchd_settings(pairs: list) -> dict:
    """--setting NAME=VALUE, each given to batchd as BATCHD_NAME (the bare loop has no settings)."""
    settings = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name.strip():
            raise SystemExit(f"--setting {pair!r}: write NAME=VALUE")
        settings[name.strip().upper()] = value
    return settings


def rotated(contenders: list, round_no: int) -> list:
    """Each round starts with the next contender, so that none always runs first (on a cold cache) or
    always right after the same one."""
    shift = round_no % len(contenders)
    return contenders[shift:] + contenders[:shift]


def run_timeout(tasks: int) -> float:
    return 120 + tasks * 0.2


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def batchd_version() -> str:
    """The commit every run imports batchd from, with a word when batchd/ has uncommitted changes (the
    bench's own files do not count)."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", REPOSITORY, *args], capture_output=True, text=True)
    commit = git("rev-parse", "--short", "HEAD").stdout.strip() or "unknown"
    changed = git("status", "--porcelain", "--", "batchd").stdout.strip()
    return commit + (" + uncommitted changes in batchd/" if changed else "")


def environment(servers: Servers, args, version_at_start: str) -> dict:
    # Each run imports batchd afresh: a commit made during the sitting changes what later runs measure.
    version_at_end = batchd_version()
    version = version_at_start if version_at_end == version_at_start else \
        f"{version_at_start} at the start, {version_at_end} at the end (changed during the sitting)"
    return {"batchd": version, "python": sys.version.split()[0], "cpus": os.cpu_count(),
            "sqlite": sqlite3.sqlite_version, "batch_monitor_interval": args.monitor_interval,
            "baseline_flush_rows": FLUSH_ROWS,
            **servers.describe()}


# -- the figures
MEDIANS = ("cpu_ms_per_task", "cpu_cores_busy", "db_cpu_ms_per_task", "redis_round_trips_per_task",
           "redis_commands_per_task", "mysql_statements_per_task",
           "mariadbd_cpu_us_per_task", "redis_cpu_us_per_task",
           "cpu_worker_ms_per_task", "cpu_master_ms_per_task", "cpu_supervisor_ms_per_task", "batch_opened_s", "first_fetch_s",
           "last_done_after_last_fetch_s", "close_delay_s", "exit_after_last_done_s")
PEAKS = tuple(f"{measure}_{role}_mb" for measure in ("rss", "pss", "uss") for role in ("worker", "master", "supervisor"))


def median_of(values) -> Optional[float]:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def rows_of(results: dict, contenders: list, configs: list) -> list:
    """One row per contender and configuration: medians over the rounds (peaks for memory), the ratio
    to the baseline the median of each round's ratio to the baseline's run of the same round."""
    rows = []
    for config in configs:
        baseline = results.get(("baseline", config))
        for name in contenders:
            rounds = results[(name, config)]
            speeds = [r["tasks_per_s"] for r in rounds]
            ratios = [mine["tasks_per_s"] / theirs["tasks_per_s"] for mine, theirs in zip(rounds, baseline)] \
                if baseline else []
            row = {"contender": name, "title": TITLES[name], "config": config.label, "processes": config.processes,
                   "threads": config.threads, "tasks": config.tasks, "small": config.small,
                   "tasks_per_s": {"median": statistics.median(speeds), "min": min(speeds), "max": max(speeds)},
                   "ratio_to_baseline": median_of(ratios)}
            row.update({name_: median_of(r.get(name_) for r in rounds) for name_ in MEDIANS})
            row.update({name_: max((r[name_] for r in rounds if r[name_] is not None), default=None)
                        for name_ in PEAKS})
            row["every_task_done_and_stored"] = all(r["done"] == r["items"] == config.tasks for r in rounds)
            row["rounds"] = rounds
            rows.append(row)
    return rows


def number(value, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


COLUMNS = ("contender", "config", "tasks", "tasks/s median (min–max)", "× bare loop", "CPU ms/task", "cores busy",
           "DB servers CPU ms/task", "Redis round trips/task", "MySQL statements/task",
           "peak RSS MB worker / master / supervisor", "worker peak PSS / private MB", "batch opened s", "first fetch s",
           "last fetch → last write-back s", "close delay s", "exit after last write-back s")


def markdown(report: dict) -> str:
    env = report["environment"]
    machine = [f"batchd {env['batchd']}", f"Python {env['python']}", f"{env['cpus']} CPUs",
               *(env[k] for k in ("mysql", "redis") if k in env), f"SQLite {env['sqlite']}",
               f"BATCH_MONITOR_INTERVAL={env['batch_monitor_interval']:g} s",
               f"bare loop flushes every {env['baseline_flush_rows']} tasks"]
    lines = [f"site: {report['site']}", "; ".join(machine),
             f"{report['rounds']} rounds, contenders alternating round by round; "
             "medians over the rounds, peaks for RSS",
             "", "| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for row in report["rows"]:
        speed = row["tasks_per_s"]
        rss = " / ".join(number(row[f"rss_{role}_mb"], 0) for role in ("worker", "master", "supervisor"))
        shares = f"{number(row['pss_worker_mb'], 0)} / {number(row['uss_worker_mb'], 0)}"
        cells = (row["title"], row["config"], f"{row['tasks']:,}",
                 f"{speed['median']:,.0f} ({speed['min']:,.0f}–{speed['max']:,.0f})",
                 number(row["ratio_to_baseline"], 2), number(row["cpu_ms_per_task"]), number(row["cpu_cores_busy"], 2),
                 number(row["db_cpu_ms_per_task"]), number(row["redis_round_trips_per_task"], 2),
                 number(row["mysql_statements_per_task"], 2), rss, shares, number(row["batch_opened_s"], 2),
                 number(row["first_fetch_s"], 2), number(row["last_done_after_last_fetch_s"], 2),
                 number(row["close_delay_s"], 2), number(row["exit_after_last_done_s"], 2))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
