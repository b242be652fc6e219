"""`python -m bench archive`: what keeping every page costs (issue 36). The same batch crawled with ARCHIVE off
and with ARCHIVE = "warc", in turns in one sitting, each its own `batchd run --once` on fresh tasks:

    .venv/bin/python -m bench archive                                  # 2,000 pages, 2x8, 2 rounds, MySQL + Redis
    .venv/bin/python -m bench archive --pages 60 --config 1x4 --rounds 1 --store sqlite --json

The site: bench/site.py's pages (about 95 KB each) served by an nginx of the bench's own that gzips them (level 6,
as most sites send HTML: the archive keeps a body as it came). A small runner, one function per measure:
- `worker_cpu`: the workers' CPU ms per task (bench/compare.py's by_role), archive on against off: the median
  of each round's ratio (target: at most 1.10);
- `bytes_written`: the bytes of the archive's files (WARC and CDXJ) against the pages' bodies gzipped at level 6
  (target: within 5 %);
- `archived_whole`: every task's page has a response record in the batch's archive, and warcio's check passes on
  every file (a correctness check: the exit code is 1 when it fails, or a run does; a missed target is reported);
- `export_rate`: `batchd export` of a large item table to JSON lines (--export-rows, 1,000,000; 0: not measured),
  on MySQL and on SQLite (--export-stores): rows/s (target: at least 100,000) and the process's resident set,
  which must stay flat. `--export-only` measures that alone (no site, no crawl):

    .venv/bin/python -m bench archive --export-only                    # 1,000,000 rows a table, MySQL and SQLite
    .venv/bin/python -m bench archive --export-only --export-rows 2000 --export-stores sqlite --json

  Per store, two tables of --export-rows rows, filled by the database itself (MariaDB's seq_A_to_B, SQLite's
  recursive WITH; 100,000 rows a statement): `crawl_task_item`, batchd's default item table (each item a JSON document of about 150 bytes,
  all of batch 1: the documents go out as they are stored), and `products`, a column table of the user's (an
  integer key, two texts, a DECIMAL price, a flag, a DATETIME, the batch column: each row made a JSON object,
  its decimal and time written as text). Each export is `python -m batchd export bench.spider:CompareSpider
  --store URL --table T -o FILE` in a process of its own, timed from its start to its exit (the interpreter's
  start and batchd's import included), its VmRSS sampled every --export-sample seconds with the size of the
  file it writes. Reported: rows/s over the whole process and over the export alone (the command's own `in N
  s`), the RSS when the first bytes were written (first), at its peak and at the last sample (last): flat when
  the last is within RSS_SLACK_MB of the first; and rows per CPU second of the process (its user + system
  time, os.wait4's), which a busy machine slows far less than the wall clock. The file is read back: one JSON
  object a line, as many as the table has rows. MySQL is the sitting's private mariadbd (bench/compare.py's,
  buffer pool 512M).
- `reparse_against_crawl`: each round, fresh tasks crawled with the archive on (`batchd run --once`), then their
  batch reparsed on the same store by `batchd reparse --batch 1` twice: with no daemon (the command's own
  process), and queued for a daemon (`batchd run`, as many workers as the crawl, started before); the wall time
  of each, process start to exit, and the median of the rounds' crawl / reparse under the daemon (target: at
  least 3; the same workers on both sides), with the one-process figure beside it; checked: every task replayed
  and its item stored each time, and not one request reached the site.
"""
import glob
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional

from bench.batch import LAYOUT, Place
from bench.compare import (REPOSITORY, BatchdMysql, BenchFailure, Config, Servers, batchd_version, byte_compile,
                           median_of, parse_configs, print_report, rotated, run_once, run_timeout, say)
from bench.probes import Run
from bench.scale import vm_rss_kb
from bench.site import NginxSite, make_pages
from batchd.backends import store_from_url

SPIDER = "bench.spider:CompareSpider"

TARGETS = {"worker_cpu": 1.10, "bytes_written": 1.05}
REPARSE_AT_LEAST = 3.0            # crawl / reparse of the same batch, wall time
DAEMON_READY_WAIT = 60.0          # seconds for `batchd run` to be ready (or to stop)
GZIP_LEVEL = 6


class GzipSite(NginxSite):
    conf_extra = "\n    gzip on;\n    gzip_comp_level 6;\n    gzip_types text/html;"

    def describe(self) -> str:
        return super().describe() + ", gzipped (level 6)"


class ArchiveOff(BatchdMysql):
    """batchd on MySQL + Redis (private servers: bench/compare.py's), or on one SQLite file (--store sqlite)."""

    name = "archive-off"

    def __init__(self, servers: Servers, workdir: str, monitor_interval: float, store: str,
                 settings: Optional[dict] = None):
        super().__init__(servers, workdir, monitor_interval, settings)
        self.store_kind, self.uses_redis = store, store == "mysql"


class ArchiveOn(ArchiveOff):
    """batchd with ARCHIVE = "warc" under a folder of the run's own, measured and removed after each run."""

    name = "archive-on"

    def __init__(self, servers: Servers, workdir: str, monitor_interval: float, store: str):
        self.folder = os.path.join(workdir, "archive")
        super().__init__(servers, workdir, monitor_interval, store, {"ARCHIVE": "warc", "ARCHIVE_PATH": self.folder})


# -- the measures
def worker_cpu(runs: dict) -> dict:
    """Workers' CPU ms per task, each side's median, and the median of the rounds' on / off ratios."""
    off = [r["cpu_worker_ms_per_task"] for r in runs["archive-off"]]
    on = [r["cpu_worker_ms_per_task"] for r in runs["archive-on"]]
    return {"off_ms_per_task": median_of(off), "on_ms_per_task": median_of(on),
            "ratio": median_of([b / a for a, b in zip(off, on) if a and b])}


def bytes_written(folder: str, pages: int) -> dict:
    """The archive's bytes (WARC and CDXJ files) against the pages' bodies gzipped."""
    warc = sum(os.path.getsize(p) for p in glob.glob(os.path.join(folder, "**", "*.warc.gz"), recursive=True))
    index = sum(os.path.getsize(p) for p in glob.glob(os.path.join(folder, "**", "*.cdxj"), recursive=True))
    bodies = sum(len(gzip.compress(body, GZIP_LEVEL)) for _, body in make_pages(pages))
    return {"warc_bytes": warc, "index_bytes": index, "gzipped_bodies": bodies, "ratio": (warc + index) / bodies}


def archived_whole(folder: str, urls: list) -> dict:
    """Every URL's response in the archive's one batch, read back; warcio's check on every file."""
    from warcio.checker import Checker
    from batchd.archive.files import batch_folders
    from batchd.archive.index import FolderIndex
    [namespace] = os.listdir(folder)
    [batch] = batch_folders(folder, namespace).values()
    index = FolderIndex(batch)
    missing = [url for url in urls if index.find("GET", url) is None]
    files = glob.glob(os.path.join(batch, "*.warc.gz"))
    failing = [path for path in files
               if Checker(type("Args", (), {"inputs": [path], "verbose": False})()).process_all() != 0]
    return {"files": len(files), "missing": len(missing), "check_failed": len(failing),
            "pass": not missing and not failing and not glob.glob(os.path.join(batch, "*.open"))}


# -- the export measure: `batchd export` of a large item table, a sitting part of its own
EXPORT_SPIDER = "bench.spider:CompareSpider"
EXPORT_TARGET_ROWS_PER_S = 100_000
RSS_SLACK_MB = 5.0               # the last sample may exceed the first by this much and still be flat
TABLES = ("crawl_task_item", "products")
PRODUCTS = {
    "mysql": "CREATE TABLE products (id BIGINT NOT NULL PRIMARY KEY, url VARCHAR(200) NOT NULL, title VARCHAR(200), "
             "price DECIMAL(10,2), in_stock TINYINT, updated DATETIME, batch INT) DEFAULT CHARSET=utf8mb4",
    "sqlite": 'CREATE TABLE products (id INTEGER PRIMARY KEY, url TEXT NOT NULL, title TEXT, price DECIMAL(10,2), '
              'in_stock INTEGER, updated DATETIME, batch INTEGER)'}
FILL_CHUNK = 100_000             # rows one statement of the fill inserts
# n is the row's number; the same rows on both stores.
FILL = {
    "mysql": {
        "crawl_task_item": "INSERT INTO crawl_task_item (batch_id, task_id, request_seq, item_seq, item) "
                           "SELECT 1, seq, 0, 0, JSON_OBJECT('url', CONCAT('https://shop.example/product/', seq), "
                           "'title', CONCAT('Product number ', seq, ' of the catalogue'), 'price', "
                           "CONCAT(seq % 1000, '.99 EUR'), 'in_stock', seq % 2 = 0, 'tags', JSON_ARRAY('new', 'sale')) "
                           "FROM seq_{first}_to_{last}",
        "products": "INSERT INTO products SELECT seq, CONCAT('https://shop.example/product/', seq), "
                    "CONCAT('Product number ', seq, ' of the catalogue'), (seq % 1000) + 0.99, seq % 2, "
                    "'2026-12-01 10:00:00' + INTERVAL seq SECOND, 1 FROM seq_{first}_to_{last}"},
    "sqlite": {
        "crawl_task_item": "WITH RECURSIVE seq(n) AS (SELECT {first} UNION ALL SELECT n + 1 FROM seq WHERE n < {last}) "
                           "INSERT INTO crawl_task_item (batch_id, task_id, request_seq, item_seq, item) "
                           "SELECT 1, n, 0, 0, json_object('url', 'https://shop.example/product/' || n, 'title', "
                           "'Product number ' || n || ' of the catalogue', 'price', (n % 1000) || '.99 EUR', "
                           "'in_stock', json(CASE WHEN n % 2 = 0 THEN 'true' ELSE 'false' END), "
                           "'tags', json_array('new', 'sale')) FROM seq",
        "products": "WITH RECURSIVE seq(n) AS (SELECT {first} UNION ALL SELECT n + 1 FROM seq WHERE n < {last}) "
                    "INSERT INTO products SELECT n, 'https://shop.example/product/' || n, "
                    "'Product number ' || n || ' of the catalogue', (n % 1000) + 0.99, n % 2, "
                    "datetime('2026-12-01 10:00:00', '+' || n || ' seconds'), 1 FROM seq"}}


def fill_tables(place: Place, rows: int) -> None:
    """The task table (empty), batchd's own tables as a crawl makes them, and both item tables of `rows` rows."""
    store = store_from_url(place.url)
    store.create_task_table(LAYOUT)
    store.open(LAYOUT)
    store.execute(PRODUCTS[place.kind])
    for table in TABLES:
        for first in range(1, rows + 1, FILL_CHUNK):     # each statement well within the store's read timeout
            store.execute(FILL[place.kind][table].format(first=first, last=min(first + FILL_CHUNK - 1, rows)))
    store.close()


class ExportSampler:
    """A process's VmRSS and the size of the file it writes, every `interval` seconds, on a thread of its own."""

    def __init__(self, pid: int, path: str, interval: float):
        self.pid, self.path, self.interval = pid, path, interval
        self.samples: list = []      # (seconds since the start, RSS kB, bytes written)
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._sample, name="export-sampler", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            rss = vm_rss_kb(self.pid)
            if rss is not None:
                self.samples.append((time.monotonic() - self._started, rss, self._written()))
            self._stop.wait(self.interval)

    def _written(self) -> int:
        """The bytes of the file so far: the export writes a temporary file beside it (.NAME.*.part)."""
        folder, name = os.path.split(self.path)
        return sum(entry.stat().st_size for entry in os.scandir(folder)
                   if entry.name.startswith(f".{name}.") or entry.name == name)

    def finish(self) -> dict:
        """RSS in MB when the first bytes were written, at its peak and at the last sample, and the samples taken."""
        self._stop.set()
        self._thread.join()
        writing = [rss for _, rss, written in self.samples if written > 0] or [rss for _, rss, _ in self.samples]
        if not writing:
            return {"first_mb": None, "peak_mb": None, "last_mb": None, "samples": 0}
        mb = [round(kb / 1024, 1) for kb in writing]
        return {"first_mb": mb[0], "peak_mb": max(mb), "last_mb": mb[-1], "samples": len(mb)}


def export_run(place: Place, table: str, rows: int, workdir: str, interval: float) -> dict:
    """One `batchd export` of `table` to JSON lines: its figures, and the file read back."""
    path = os.path.join(workdir, f"{place.kind}-{table}.jsonl")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHD_")}
    env.update(BATCHD_CONFIG=os.devnull, PYTHONPATH=REPOSITORY, BATCHD_LOG_LEVEL="WARNING")
    with tempfile.TemporaryFile("w+") as said_file:
        started = time.monotonic()
        process = subprocess.Popen([sys.executable, "-m", "batchd", "export", EXPORT_SPIDER, "--store", place.url,
                                    "--table", table, "-o", path], cwd=REPOSITORY, env=env,
                                   stdout=subprocess.DEVNULL, stderr=said_file)
        sampler = ExportSampler(process.pid, path, interval)
        _, status, usage = os.wait4(process.pid, 0)     # its CPU: what the export cost, however busy the machine
        elapsed = time.monotonic() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        rss = sampler.finish()
        said_file.seek(0)
        err = said_file.read()
    if process.returncode != 0:
        raise BenchFailure(f"batchd export of {table} on {place.kind} exited {process.returncode}: {err.strip()}")
    cpu = usage.ru_utime + usage.ru_stime
    lines = read_back(path)
    os.unlink(path)
    if lines != rows:
        raise BenchFailure(f"batchd export of {table} on {place.kind} wrote {lines} lines for {rows} rows")
    said = err.strip().rsplit(" in ", 1)[-1].split()[0]      # "exported N rows ... in 7.9 s"
    flat = rss["first_mb"] is not None and rss["last_mb"] - rss["first_mb"] <= RSS_SLACK_MB
    return {"store": place.kind, "table": table, "rows": rows, "elapsed_s": round(elapsed, 2),
            "rows_per_s": round(rows / elapsed), "export_s": float(said), "export_rows_per_s": round(rows / float(said))
            if float(said) > 0 else None, "rss": rss, "rss_flat": flat,
            "cpu_s": round(cpu, 2), "rows_per_cpu_s": round(rows / cpu) if cpu else None,
            "pass": rows / elapsed >= EXPORT_TARGET_ROWS_PER_S and flat}


def read_back(path: str) -> int:
    """The lines of the file, each checked to be one JSON object."""
    count = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not isinstance(json.loads(line), dict):
                raise BenchFailure(f"{path}: line {count + 1} is not a JSON object")
            count += 1
    return count


def export_rate(args) -> dict:
    """Each store's tables filled, then exported one by one: the runs' figures, and whether each met its target."""
    stores = args.export_stores.split(",")
    runs = []
    with Servers(["mysql"] if "mysql" in stores else []) as servers, \
            tempfile.TemporaryDirectory(prefix="bench-export-") as workdir:
        for kind in stores:
            place = Place(kind, mysql_port=servers.db.port, redis_url=servers.redis.url(0)) if kind == "mysql" \
                else Place(kind)
            try:
                say(f"export, {kind}: filling {len(TABLES)} tables of {args.export_rows} rows")
                fill_tables(place, args.export_rows)
                for table in TABLES:
                    say(f"export, {kind}: batchd export --table {table}")
                    runs.append(export_run(place, table, args.export_rows, workdir, args.export_sample))
            finally:
                place.remove()
        described = servers.describe()
    return {"rows": args.export_rows, "target_rows_per_s": EXPORT_TARGET_ROWS_PER_S, "rss_slack_mb": RSS_SLACK_MB,
            **described, "runs": runs}


def export_markdown(export: dict) -> str:
    lines = [f"`batchd export` to JSON lines, {export['rows']:,} rows a table; target {export['target_rows_per_s']:,} "
             f"rows/s over the whole process, RSS flat (last within {export['rss_slack_mb']:g} MB of first)", "",
             "| store | table | rows/s (process) | rows/s (export) | s | rows per CPU s | RSS first / peak / last MB "
             "| target |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for run in export["runs"]:
        rss = run["rss"]
        alone = f"{run['export_rows_per_s']:,}" if run["export_rows_per_s"] else "–"
        lines.append(f"| {run['store']} | {run['table']} | {run['rows_per_s']:,} | {alone} | "
                     f"{run['elapsed_s']} | {run['rows_per_cpu_s'] or 0:,} | {rss['first_mb']} / {rss['peak_mb']} / "
                     f"{rss['last_mb']} | "
                     f"{'PASS' if run['pass'] else 'FAIL'} |")
    return "\n".join(lines)
def reparse_against_crawl(contender: ArchiveOn, config: Config, site) -> dict:
    """Fresh tasks crawled with the archive on, then that batch reparsed twice by `batchd reparse --batch 1`: with
    no daemon (the command's one process), and queued for a daemon (`batchd run`, as many workers as the crawl
    had). Each one's wall time (process start to exit; the daemon started and ready before), the reparses'
    figures (their summaries) and the site's hits while they ran."""
    place = contender.place()
    try:
        contender.prepare(place, config.tasks, site)
        env = contender.environment(place, config)
        timeout = run_timeout(config.tasks)
        crawl = Run(contender.command(place, config), env, cwd=contender.workdir).go(timeout)
        if crawl.exit_code != 0:
            raise BenchFailure(f"the crawl to reparse: exit {crawl.exit_code}; its last lines:\n{crawl.tail()}")
        site.reset()
        alone = reparse_run(env, contender.workdir, timeout)
        with Daemon([sys.executable, "-m", "batchd", "run", SPIDER, "--workers", str(config.processes)], env,
                    contender.workdir):
            queued = reparse_run(env, contender.workdir, timeout)
    finally:
        place.remove()
        shutil.rmtree(contender.folder, ignore_errors=True)
    crawl_s = crawl.ended - crawl.started
    hits = site.hits_since_reset()
    return {"crawl_s": crawl_s, "alone": alone, "queued": queued, "site_hits": hits,
            "ratio": crawl_s / queued["seconds"], "ratio_alone": crawl_s / alone["seconds"],
            "pass": hits == 0 and all(r["replayed"] == r["stored"] == config.tasks for r in (alone, queued))}


def reparse_run(env: dict, cwd: str, timeout: float) -> dict:
    """`batchd reparse --batch 1`, run to its end: its wall time, CPU and what its summary said."""
    run = Run([sys.executable, "-m", "batchd", "reparse", SPIDER, "--batch", "1"], env, cwd=cwd).go(timeout)
    if run.exit_code != 0:
        raise BenchFailure(f"batchd reparse: exit {run.exit_code}; its last lines:\n{run.tail()}")
    said = {" ".join(words[:-1]): words[-1] for words in (line.split() for _, line in run.lines
                                                          if line.startswith(("  responses", "  items")))}
    return {"seconds": run.ended - run.started, "cpu_s": run.cpu_seconds,
            "replayed": int(said.get("responses replayed", "0")), "stored": int(said.get("items stored", "0"))}


class Daemon:
    """`batchd run` resident beside a measure: started, waited for until its master holds the lock and its
    workers run, stopped warm at the end."""

    def __init__(self, command: list, env: dict, cwd: str):
        self.command, self.env, self.cwd = command, env, cwd
        self.log = os.path.join(cwd, "daemon.log")

    def __enter__(self) -> "Daemon":
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(self.command, env=self.env, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                            stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + DAEMON_READY_WAIT
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise BenchFailure(f"batchd run did not get ready; its log:\n{self._text()[-3000:]}")
            time.sleep(0.2)
        return self

    def _text(self) -> str:
        with open(self.log, encoding="utf-8", errors="replace") as f:
            return f.read()

    def _ready(self) -> bool:
        text = self._text()
        return "master of namespace" in text and "] ready: " in text      # (READY=1: every worker runs)

    def __exit__(self, *exc) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(DAEMON_READY_WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# -- the sitting
def sitting(args) -> dict:
    [config] = parse_configs(args.config, args.pages, 0) or [None]
    workdir = tempfile.mkdtemp(prefix="bench-archive-")
    version_at_start = batchd_version()
    byte_compile()
    runs: dict = {"archive-off": [], "archive-on": []}
    measured: dict = {}
    reparsed: list = []
    try:
        with GzipSite(args.pages) as site, Servers([args.store]) as servers:
            say(f"site: {site.describe()}")
            contenders = {"archive-off": ArchiveOff(servers, workdir, args.monitor_interval, args.store),
                          "archive-on": ArchiveOn(servers, workdir, args.monitor_interval, args.store)}
            on = contenders["archive-on"]
            for round_no in range(args.rounds):
                for name in rotated(list(contenders), round_no):
                    figures = run_once(contenders[name], config, site, timeout=run_timeout(config.tasks))
                    runs[name].append(figures)
                    say(f"round {round_no + 1}/{args.rounds} {name:>11}: {figures['elapsed_s']:.1f} s, "
                        f"{figures['cpu_worker_ms_per_task']:.2f} worker CPU ms/task")
                    if name == "archive-on":
                        measured.setdefault("bytes_written", bytes_written(on.folder, args.pages))
                        measured.setdefault("archived_whole", archived_whole(
                            on.folder, [site.url(f"/page/{n}") for n in range(args.pages)]))
                        shutil.rmtree(on.folder, ignore_errors=True)
                reparsed.append(reparse_against_crawl(on, config, site))
                r = reparsed[-1]
                say(f"round {round_no + 1}/{args.rounds}     reparse: {r['queued']['seconds']:.1f} s under the daemon, "
                    f"{r['alone']['seconds']:.1f} s alone, against the crawl's {r['crawl_s']:.1f} s "
                    f"({r['ratio']:.2f}x, {r['ratio_alone']:.2f}x)")
            report = {"site": site.describe(), "store": args.store, "pages": args.pages,
                      "config": f"{config.processes}x{config.threads}",
                      "rounds": args.rounds, "batchd": version_at_start, "python": sys.version.split()[0],
                      "cpus": os.cpu_count(), **servers.describe(), "runs": runs,
                      "worker_cpu": worker_cpu(runs), **measured,
                      "reparse": {"rounds": reparsed, "ratio": median_of([r["ratio"] for r in reparsed]),
                                  "ratio_alone": median_of([r["ratio_alone"] for r in reparsed]),
                                  "pass": all(r["pass"] for r in reparsed)}}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report["targets"] = [{"measure": measure, "at_most": limit, "ratio": report[measure]["ratio"],
                          "pass": report[measure]["ratio"] is not None and report[measure]["ratio"] <= limit}
                         for measure, limit in TARGETS.items()]
    reparse = report["reparse"]
    report["targets"].append({"measure": "reparse", "at_least": REPARSE_AT_LEAST, "ratio": reparse["ratio"],
                              "pass": reparse["ratio"] is not None and reparse["ratio"] >= REPARSE_AT_LEAST})
    report["correct"] = report["archived_whole"]["pass"] and reparse["pass"]
    return report


def number(value: Optional[float], digits: int = 2) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def markdown(report: dict) -> str:
    cpu, written, whole = report["worker_cpu"], report["bytes_written"], report["archived_whole"]
    reparse = report["reparse"]
    lines = [f"site: {report['site']}",
             f"batchd {report['batchd']} on "
             + (f"{report.get('mysql')} + {report.get('redis')}" if report["store"] == "mysql" else "SQLite")
             + ", "
             f"{report['config']}, {report['pages']} pages, {report['rounds']} round(s); Python {report['python']}, "
             f"{report['cpus']} CPUs", "",
             "| measure | archive off | archive on | on / off (target) |", "| --- | --- | --- | --- |",
             f"| worker CPU ms/task | {number(cpu['off_ms_per_task'])} | {number(cpu['on_ms_per_task'])} | "
             f"{number(cpu['ratio'], 3)} (≤ {TARGETS['worker_cpu']}) |",
             f"| bytes written: WARC + CDXJ / bodies gzipped | {written['gzipped_bodies'] / 1e6:,.2f} MB | "
             f"{(written['warc_bytes'] + written['index_bytes']) / 1e6:,.2f} MB | {number(written['ratio'], 3)} "
             f"(≤ {TARGETS['bytes_written']}) |",
             "", "| wall time, s | crawl (archive on) | `batchd reparse` of its batch | crawl / reparse (target) |",
             "| --- | --- | --- | --- |",
             f"| under the daemon ({report['config'].split('x')[0]} workers, as the crawl) | "
             f"{number(median_of([r['crawl_s'] for r in reparse['rounds']]))} | "
             f"{number(median_of([r['queued']['seconds'] for r in reparse['rounds']]))} | "
             f"{number(reparse['ratio'], 2)} (≥ {REPARSE_AT_LEAST}) |",
             f"| alone (no daemon: the command's one process) | "
             f"{number(median_of([r['crawl_s'] for r in reparse['rounds']]))} | "
             f"{number(median_of([r['alone']['seconds'] for r in reparse['rounds']]))} | "
             f"{number(reparse['ratio_alone'], 2)} |", ""]
    for t in report["targets"]:
        bound = f"at most {t['at_most']}" if "at_most" in t else f"at least {t['at_least']}"
        lines.append(f"{'PASS' if t['pass'] else 'FAIL'} target: {t['measure']} {number(t['ratio'], 3)} ({bound})")
    lines.append(f"{'PASS' if whole['pass'] else 'FAIL'} check: every page archived and read back "
                 f"({whole['missing']} missing), warcio check on {whole['files']} file(s) "
                 f"({whole['check_failed']} failed)")
    hits = sum(r["site_hits"] for r in reparse["rounds"])
    runs = [r[how] for r in reparse["rounds"] for how in ("alone", "queued")]
    lines.append(f"{'PASS' if reparse['pass'] else 'FAIL'} check: every task reparsed from the archive, each time "
                 f"({', '.join(str(r['replayed']) for r in runs)} replayed, "
                 f"{', '.join(str(r['stored']) for r in runs)} items stored), {hits} request(s) to the site")
    return "\n".join(lines)


def every_measure(args) -> dict:
    """The crawl's measures (unless --export-only), then the export's (unless --export-rows 0)."""
    if args.export_only:
        byte_compile()
        report = {"batchd": batchd_version(), "cpus": os.cpu_count(), "correct": True}
    else:
        report = sitting(args)
    if args.export_rows:
        report["export"] = export_rate(args)
    return report


def every_markdown(report: dict) -> str:
    parts = [markdown(report)] if "worker_cpu" in report else []
    return "\n\n".join(parts + ([export_markdown(report["export"])] if "export" in report else []))


def main(args) -> int:
    return print_report(every_measure, args, every_markdown, "archive", correct=lambda report: report["correct"])
