"""`python -m bench recrawl`: what conditional requests and change detection save when a batch crawls
a site again (issue 21). Three batches of one spider over one site, each its own `batchd run --once`:

    .venv/bin/python -m bench recrawl                                   # 2,000 pages, 2x8, MySQL + Redis
    .venv/bin/python -m bench recrawl --pages 60 --config 1x4 --store sqlite --json

1. every page new (the task table freshly loaded: the run opens the first batch);
2. nothing changed;
3. 10 % of the pages changed (--changed): their files rewritten with a different lead paragraph and a
   new mtime (set with os.utime, so that nginx's ETag and Last-Modified change whatever the clock's
   second), the others left alone.

The site: bench/site.py's pages (about 95 KB each) as static files, served by an nginx of the bench's
own (NginxSite), which sends its own ETag and Last-Modified and answers If-None-Match /
If-Modified-Since with 304; its access log also has each response's `$bytes_sent` (headers and body),
and a batch's bytes moved are the sum over the lines it added (the log's size read before and after).
The pages' files are dated a day back when written, so a change is always a new mtime.

batchd: `batchd run bench.spider:CompareSpider --once --workers P` with SPIDER_THREAD_COUNT=T (--config
PxT, 2x8), REVALIDATE=true, BATCH_MODE=full, BATCH_MONITOR_INTERVAL=1, on a private MariaDB and Redis
(bench/compare.py's servers and `mysql` contender) or on one SQLite file (--store sqlite). Batches 2
and 3 are opened as an operator opens a batch before its date: `batchd open-batch`, which leaves its
request in the queue backend; once the request is there, `batchd run --once` starts, its master takes
the request at its first patrol, and open-batch exits when it sees the new batch. (No master holds the
lock between two runs, so open-batch may open the batch itself before the request is seen: it does so
within milliseconds. The run then starts on the open batch, its reset of a few ms done.)

Per batch: bytes moved and requests (nginx's log, with its statuses), wall time (the run's process start
to its exit), CPU ms per task (the whole tree, and its workers alone, as bench/compare.py measures them),
the record's counters recrawl/new, changed, unchanged, gone and item/unchanged; then the ratios batch
2 / batch 1 and batch 3 / batch 1 of bytes and time against their targets (batch 2 at most 5 % of the
bytes and 40 % of the time, batch 3 at most 15 % and 50 %), and the correctness checks: each run
opened a new batch that closed with every task done; batch 1 counts every task new, batch 2 every task
unchanged, batch 3 exactly the changed pages changed and the others unchanged, none gone; and the
changed pages' latest items carry the new lead paragraph (the item table read back), the others not.
PASS or FAIL for each; the exit code is 1 when a check fails (or a run does), 0 otherwise: a missed
target is reported, not an error.
"""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Optional

from bench.batch import LAYOUT, Place, load_tasks
from bench.compare import (BenchFailure, Config, Contender, Servers, batchd_version, by_role, byte_compile,
                           parse_configs, print_report, run_timeout, say)
from bench.probes import Run
from bench.site import NginxSite
from batchd.backends import store_from_url

SPIDER = "bench.spider:CompareSpider"
SETTINGS = {"REVALIDATE": "true", "BATCH_MODE": "full"}
CHANGE_SEED = 21                     # which pages change: random.Random(CHANGE_SEED).sample
AGE = 86400                          # the pages' files are dated this many seconds back
OPEN_REQUEST_WAIT = 30.0             # seconds for `batchd open-batch` to leave its request
# (batch, measure, most of batch 1's)
TARGETS = ((2, "bytes", 0.05), (2, "time", 0.40), (3, "bytes", 0.15), (3, "time", 0.50))
RECRAWL = ("recrawl/new", "recrawl/changed", "recrawl/unchanged", "recrawl/gone", "item/unchanged")
WHAT = {1: "all new", 2: "nothing changed", 3: "{changed} changed"}


def lead_mark(n: int) -> str:
    """The words a changed page's lead paragraph starts with (and its item's `summary`)."""
    return f"Revised for batch 3 (page {n})."


# -- the site
class RecrawlSite(NginxSite):
    """NginxSite with the bytes each response sent (its log's fourth field) added up, the pages' files dated
    a day back, and pages to change."""

    def _write_pages(self) -> None:
        super()._write_pages()
        then = time.time() - AGE
        for name in os.listdir(self.page_dir):
            os.utime(os.path.join(self.page_dir, name), (then, then))

    @property
    def page_dir(self) -> str:
        return os.path.join(self.dir, "www", "page")

    @property
    def log_path(self) -> str:
        return os.path.join(self.dir, "access.log")

    def log_size(self) -> int:
        return os.path.getsize(self.log_path)

    def traffic(self, start: int, end: int) -> dict:
        """Bytes sent and requests per status in the log between two of its sizes."""
        with open(self.log_path, "rb") as f:
            f.seek(start)
            lines = f.read(end - start).decode(errors="replace").splitlines()
        sent, statuses = 0, {}
        for line in lines:
            fields = line.split(" ")
            if len(fields) >= 4:
                sent += int(fields[3])
                statuses[fields[1]] = statuses.get(fields[1], 0) + 1
        return {"bytes": sent, "requests": len(lines), "statuses": dict(sorted(statuses.items()))}

    def change(self, numbers: list) -> None:
        """Pages `numbers` get a different lead paragraph and an mtime of now (a day after the others')."""
        now = time.time()
        for n in numbers:
            path = os.path.join(self.page_dir, str(n))
            with open(path, "rb") as f:
                body = f.read()
            changed, found = re.subn(rb'<p class="lead">', f'<p class="lead">{lead_mark(n)} '.encode(), body, count=1)
            if found != 1:
                raise BenchFailure(f"page {n} has no lead paragraph to change")
            with open(path, "wb") as f:
                f.write(changed)
            os.utime(path, (now, now))


def pages_to_change(pages: int, share: float) -> list:
    count = max(1, round(pages * share)) if share > 0 else 0
    return sorted(random.Random(CHANGE_SEED).sample(range(pages), count))


# -- batchd
class Recrawler(Contender):
    """bench/compare.py's batchd contender (its store, servers and environment), with the re-crawl
    settings, and the operator's `batchd open-batch`."""

    name = "recrawl"

    def __init__(self, store: str, servers: Servers, workdir: str, monitor_interval: float):
        super().__init__(servers, workdir, monitor_interval, dict(SETTINGS))
        self.store_kind = store

    def prepare(self, place: Place, tasks: int, site) -> None:
        load_tasks(place, tasks, site)

    def command(self, place: Place, config: Config) -> list:
        return [sys.executable, "-m", "batchd", "run", SPIDER, "--once", "--workers", str(config.processes)]

    def ask_next_batch(self, place: Place, config: Config) -> subprocess.Popen:
        """`batchd open-batch`, left running (it waits for a master to open the batch), once its request is
        in the queue backend, or once it has opened the batch itself."""
        opener = subprocess.Popen([sys.executable, "-m", "batchd", "open-batch", SPIDER], cwd=self.workdir,
                                  env=self.environment(place, config), stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + OPEN_REQUEST_WAIT
        while not open_request_left(place):
            if opener.poll() == 0:           # (it opened the batch itself: one_batch reads what it said)
                return opener
            if opener.poll() is not None or time.monotonic() > deadline:
                opener.kill()
                raise BenchFailure(f"batchd open-batch left no request (exit {opener.wait()}): "
                                   f"{opener.stdout.read().strip()}")
            time.sleep(0.05)
        return opener


def open_request_left(place: Place) -> bool:
    """The request `batchd open-batch` leaves for the master is in the queue backend (Redis's key
    `<namespace>:open_request`, the SQLite file's flag of that name)."""
    if place.kind == "sqlite":
        import sqlite3
        conn = sqlite3.connect(place.url[len("sqlite:///"):], timeout=10)
        try:
            return bool(conn.execute("SELECT COUNT(*) FROM batchd_flag WHERE name = 'open_request'").fetchone()[0])
        except sqlite3.OperationalError:       # no such table yet
            return False
        finally:
            conn.close()
    import redis
    return bool(redis.Redis.from_url(place.redis_url).exists(f"{place.name}:open_request"))


def read_batch(place: Place) -> dict:
    """The last batch's record, tasks done and items stored, from the store."""
    store = store_from_url(place.url)
    try:
        store.open(LAYOUT)
        record = store.last_batch()
        progress = store.progress()
        items = store.fetch(f"SELECT COUNT(*) FROM {store.quote(LAYOUT.default_item_table)}")[0][0]
    finally:
        store.close()
    return {"id": record.id if record else None, "is_done": bool(record and record.is_done),
            "record_done": record.done_count if record else 0, "record_failed": record.fail_count if record else 0,
            "counters": record.counters if record else {}, "tasks_done": progress.done, "items_rows": int(items)}


def latest_items(place: Place) -> dict:
    """url -> (batch id, item) of each task's latest item (its highest id) in the default item table."""
    store = store_from_url(place.url)
    q = store.quote
    items, tasks = q(LAYOUT.default_item_table), q(LAYOUT.table)
    try:
        rows = store.fetch(f"SELECT t.{q('url')}, i.{q('batch_id')}, i.{q('item')} FROM {items} i "
                           f"JOIN {tasks} t ON t.{q(LAYOUT.id_field)} = i.{q('task_id')} "
                           f"WHERE i.{q('id')} IN (SELECT MAX({q('id')}) FROM {items} GROUP BY {q('task_id')})")
    finally:
        store.close()
    return {url: (int(batch), json.loads(item) if isinstance(item, (str, bytes)) else item)
            for url, batch, item in rows}


# -- the sitting
def recrawl(args) -> dict:
    config = parse_configs(args.config, args.pages, 0)
    if len(config) != 1:
        raise SystemExit("--config: one PROCESSESxTHREADS (e.g. 2x8)")
    config = config[0]
    changed = pages_to_change(args.pages, args.changed)
    workdir = tempfile.mkdtemp(prefix="bench-recrawl-")
    version_at_start = batchd_version()
    byte_compile()
    batches = []
    try:
        with RecrawlSite(args.pages) as site, Servers([args.store]) as servers:
            say(f"site: {site.describe()}")
            recrawler = Recrawler(args.store, servers, workdir, args.monitor_interval)
            place = recrawler.place()
            try:
                recrawler.prepare(place, args.pages, site)
                for number in (1, 2, 3):
                    if number == 3:
                        site.change(changed)
                    batches.append(one_batch(number, recrawler, place, config, site))
                    say(f"batch {number}: {batches[-1]['bytes'] / 1e6:,.1f} MB in {batches[-1]['elapsed_s']:.1f} s, "
                        f"statuses {batches[-1]['statuses']}")
                latest = latest_items(place)
            finally:
                place.remove()
            report = {"site": site.describe(), "store": args.store, "pages": args.pages,
                      "changed": len(changed), "config": f"{config.processes}x{config.threads}",
                      "batchd": version_at_start, "batchd_settings": recrawler.settings,
                      "monitor_interval": args.monitor_interval, "python": sys.version.split()[0],
                      "cpus": os.cpu_count(), **servers.describe(), "batches": batches}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report["ratios"] = {f"batch{b['batch']}": {"bytes": ratio(b["bytes"], batches[0]["bytes"]),
                                               "time": ratio(b["elapsed_s"], batches[0]["elapsed_s"])}
                        for b in batches[1:]}
    report["targets"] = [{"batch": number, "measure": measure, "at_most": limit,
                          "ratio": report["ratios"][f"batch{number}"][measure],
                          "pass": report["ratios"][f"batch{number}"][measure] is not None
                          and report["ratios"][f"batch{number}"][measure] <= limit}
                         for number, measure, limit in TARGETS]
    report["checks"] = checks(batches, args.pages, changed, latest, site_url=site.url)
    report["correct"] = all(check["pass"] for check in report["checks"])
    return report


def one_batch(number: int, recrawler: Recrawler, place: Place, config: Config, site: RecrawlSite) -> dict:
    """One `batchd run --once` (after `batchd open-batch` but for the first), measured and read back."""
    before = read_batch(place) if number > 1 else None
    opener = recrawler.ask_next_batch(place, config) if number > 1 else None
    start = site.log_size()
    try:
        run = Run(recrawler.command(place, config), recrawler.environment(place, config),
                  cwd=recrawler.workdir).go(run_timeout(config.tasks))
    except BaseException:
        if opener is not None:
            opener.kill()
            opener.wait()
        raise
    opened = ""
    if opener is not None:
        try:
            opened = opener.communicate(timeout=OPEN_REQUEST_WAIT + 10)[0].strip()
        except subprocess.TimeoutExpired:
            opener.kill()
            opened = "(still waiting: killed)"
    if run.exit_code != 0:
        raise BenchFailure(f"batch {number}: batchd run exited {run.exit_code}; its last lines:\n{run.tail()}")
    if opener is not None and opener.returncode != 0:
        raise BenchFailure(f"batch {number}: batchd open-batch exited {opener.returncode}: {opened}")
    traffic = site.traffic(start, site.log_size())
    record = read_batch(place)
    counters = record["counters"]
    tasks, elapsed = config.tasks, run.ended - run.started
    roles = by_role(run, recrawler.root_role, tasks)
    return {"batch": number, "batch_id": record["id"], "new_batch": record["id"] != (before or {}).get("id"),
            "is_done": record["is_done"], "tasks": tasks, "tasks_done": record["tasks_done"],
            "record_done": record["record_done"], "record_failed": record["record_failed"],
            "items_rows": record["items_rows"], **traffic, "elapsed_s": elapsed,
            "cpu_ms_per_task": run.cpu_seconds * 1000 / tasks,
            "cpu_worker_ms_per_task": roles["cpu_worker_ms_per_task"],
            **{name.replace("/", "_"): counters.get(name, 0) for name in RECRAWL},
            "open_batch_said": opened, "counters": counters}


def ratio(value, base) -> Optional[float]:
    return value / base if value is not None and base else None


def checks(batches: list, pages: int, changed: list, latest: dict, site_url) -> list:
    """The correctness checks: (name, pass, what was found)."""
    found = []

    def check(name: str, ok: bool, detail: str) -> None:
        found.append({"name": name, "pass": bool(ok), "found": detail})

    expected = {1: {"recrawl_new": pages, "recrawl_changed": 0, "recrawl_unchanged": 0, "recrawl_gone": 0},
                2: {"recrawl_new": 0, "recrawl_changed": 0, "recrawl_unchanged": pages, "recrawl_gone": 0},
                3: {"recrawl_new": 0, "recrawl_changed": len(changed), "recrawl_unchanged": pages - len(changed),
                    "recrawl_gone": 0}}
    for b in batches:
        n = b["batch"]
        check(f"batch {n}: a new batch, closed, every task done",
              b["new_batch"] and b["is_done"] and b["tasks_done"] == b["record_done"] == pages
              and not b["record_failed"],
              f"batch id {b['batch_id']}, closed {b['is_done']}, {b['tasks_done']} tasks done "
              f"({b['record_done']} done, {b['record_failed']} failed in the record) of {pages}")
        got = {name: b[name] or 0 for name in expected[n]}
        check(f"batch {n}: tasks new / changed / unchanged / gone",
              got == expected[n],
              " / ".join(str(got[k]) for k in expected[n]) + ", expected " +
              " / ".join(str(v) for v in expected[n].values()))
    third = batches[-1]["batch_id"]
    changed_set = set(changed)
    wrong = []
    for n in range(pages):
        url = site_url(f"/page/{n}")
        batch, item = latest.get(url, (None, None))
        summary = (item or {}).get("summary") or ""
        carries = summary.startswith(lead_mark(n))
        if n in changed_set and not (carries and batch == third):
            wrong.append(f"page {n} (changed): latest item from batch {batch}, summary {summary[:40]!r}")
        elif n not in changed_set and (item is None or carries):
            wrong.append(f"page {n} (unchanged): " + ("no item" if item is None else "carries the change"))
    check("batch 3: the changed pages' latest items carry the new content, the others not",
          not wrong, f"{len(changed) - sum('(changed)' in w for w in wrong)} of {len(changed)} changed pages updated"
          + (f"; {len(wrong)} wrong, the first: {wrong[0]}" if wrong else ""))
    return found


# -- the report
def number(value, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def markdown(report: dict) -> str:
    lines = [f"site: {report['site']}",
             f"batchd {report['batchd']} on {report.get('mysql', 'SQLite') if report['store'] == 'mysql' else 'SQLite'}"
             + (f" + {report['redis']}" if report["store"] == "mysql" else "")
             + f", {report['config']} (--workers x SPIDER_THREAD_COUNT), "
             + ", ".join(f"{k}={v}" for k, v in report["batchd_settings"].items())
             + f", BATCH_MONITOR_INTERVAL={report['monitor_interval']:g}; Python {report['python']}, "
               f"{report['cpus']} CPUs", "",
             "| batch | pages changed | requests (statuses) | MB moved | bytes x batch 1 | wall s | time x batch 1 "
             "| CPU ms/task (workers) | new | changed | unchanged | gone | items unchanged |",
             "|" + " --- |" * 13]
    ratios = report["ratios"]
    for b in report["batches"]:
        r = ratios.get(f"batch{b['batch']}", {"bytes": 1.0, "time": 1.0})
        statuses = ", ".join(f"{k}: {v:,}" for k, v in b["statuses"].items())
        cells = (str(b["batch"]), WHAT[b["batch"]].format(changed=report["changed"]), f"{b['requests']:,} ({statuses})",
                 number(b["bytes"] / 1e6, 2), number(r["bytes"], 4), number(b["elapsed_s"], 2), number(r["time"], 3),
                 f"{number(b['cpu_ms_per_task'], 2)} ({number(b['cpu_worker_ms_per_task'], 2)})",
                 *(number(b[name.replace("/", "_")], 0) for name in RECRAWL))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for t in report["targets"]:
        lines.append(f"{'PASS' if t['pass'] else 'FAIL'} target: batch {t['batch']} {t['measure']} "
                     f"{number(None if t['ratio'] is None else t['ratio'] * 100, 1)} % of batch 1's "
                     f"(at most {t['at_most'] * 100:g} %)")
    for c in report["checks"]:
        lines.append(f"{'PASS' if c['pass'] else 'FAIL'} check: {c['name']}: {c['found']}")
    return "\n".join(lines)


def main(args) -> int:
    """Run the sitting and print it; 1 when a run failed or a check did (a missed target is no error)."""
    return print_report(recrawl, args, markdown, "recrawl", correct=lambda report: report["correct"])
