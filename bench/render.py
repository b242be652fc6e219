"""`python -m bench render`: what batchd's rendered pages (Request(render=True), batchd/render/) cost against a bare
Playwright loop and scrapy-playwright, on one loopback site, in one sitting (issue 35).

    .venv/bin/python -m bench render                          # 120 pages: batchd, the bare loop, scrapy-playwright
    .venv/bin/python -m bench render --pages 1000 --only batchd   # memory flat? the first 100 pages, the last 100
    .venv/bin/python -m bench render --auto                   # render="auto" against render=True, 1 host of 5 dynamic
    .venv/bin/python -m bench render --pages 10 --only batchd --json

The site (bench/render_site.py): pages whose content arrives by fetch() after load (about 4 KB each, every one
different), served by a threaded http.server on loopback; every contender waits for READY (`#content.ready`).

The contenders, one after the other over the same pages:
- `batchd`: a real batch, `batchd run bench.spider:RenderSpider --once --workers 2` on one SQLite file (--store
  mysql: the machine's MariaDB and Redis, as bench/batch.py), RENDER_CONCURRENCY=2, Debian's chromium and
  chromedriver, every other setting at its default;
- `bare`: bench/render_playwright.py, one Chromium (the same binary) driven by Playwright, --concurrency pages
  (RENDER_CONCURRENCY unless told) opened once and reused, page.content() read;
- `scrapy`: bench/render_scrapy.py, scrapy-playwright on the same Chromium, CONCURRENT_REQUESTS and
  PLAYWRIGHT_MAX_PAGES_PER_CONTEXT at --concurrency.
The last two run in a venv of their own, bench/.venv-render (made with pip on first use: playwright and
scrapy-playwright; no browser is downloaded, Playwright is pointed at /usr/bin/chromium).

What is measured, the same way for each:
- pages/s: pages / (the moment the site had the last page's last request - its first page request): the pages,
  not the start-up of the processes or of the first browser (a later browser's start, as batchd's second
  worker's, is in the time: that is what its pages waited for);
- PSS peak: every SAMPLE_EVERY s, the proportional set (/proc/<pid>/smaps_rollup) of the run's whole process
  tree summed, less batchd's supervisor and master: workers and browsers together (chromedriver, Chromium and
  its children; Playwright's node driver for the others); the peak of the sums;
- browser restarts (batchd): the batch's counter render/browser_restarts, read from the store at the end;
- left after run: live processes (state not Z) of Chromium and chromedriver carrying the run's mark (an
  environment variable every process of the run inherits), counted once the run has exited;
- left after a kill (batchd): two more batches of the same pages. In one, a worker that has browsers is
  SIGKILLed a third of the way in (its supervisor starts another, the batch goes on to its end): its browser
  processes still alive SETTLE_AFTER_KILL s later. In the other, the supervisor alone is SIGKILLed there (its
  workers have SIGTERM from the kernel and stop warm): the run's marked browser processes still alive
  SETTLE_AFTER_KILL s later, and the seconds until none was. Whatever is left is then killed, so that none
  outlives the bench;
- memory flat (200 pages or more): the mean of the PSS samples while the first 100 pages were had against
  while the last 100 were; within 10 % is the issue's target.

--auto: five hosts (127.0.0.1 to .5), one serving the dynamic pages, four the same content in their HTML; batchd
runs the batch twice, with render=True and with render="auto" (bench.spider:AutoRenderSpider); the table
gives both rates, their ratio (the issue's target is 3x) and whether both stored the same items.

Exit code 1 when a run failed (a page missing, a batch not done), 0 otherwise: a missed target is reported,
not an error.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Callable, Optional

from bench.batch import LAYOUT, Place, load_urls
from bench.compare import (MB, BenchFailure, batchd_version, byte_compile, child_environment, median_of as median,
                           rotated, say)
from bench.render_site import READY, RenderSite
from batchd.backends import store_from_url
from batchd.render.processes import descendants, pss_bytes
from supervised import title as _title      # (tests/, on the path since bench.batch)

HERE = os.path.dirname(os.path.abspath(__file__))
VENV = os.path.join(HERE, ".venv-render")
VENV_PACKAGES = ("playwright", "scrapy-playwright")
CONTENDERS = ("batchd", "bare", "scrapy")
TITLES = {"batchd": "batchd (render=True)", "bare": "bare Playwright loop", "scrapy": "scrapy-playwright",
          "auto": 'batchd (render="auto")'}
BROWSER, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
MARK = "BENCH_RENDER_MARK"      # every process of a run inherits it: how its leftovers are found
BROWSER_NAMES = ("chromium", "chrome", "chromedriver")     # /proc/<pid>/comm of a browser's processes
SAMPLE_EVERY = 0.2
SETTLE_AFTER_KILL = 3.0         # seconds the parent-death chain gets after the supervisor is SIGKILLed
BUCKET = 100                    # pages in the first and last bucket of the memory check
RESTARTS = "render/browser_restarts"


# -- one run, watched from outside
class Watched:
    """A command run to its end; every SAMPLE_EVERY s, the PSS of its process tree, less the root when
    `with_root` is false and the processes whose title `leave_out` names."""

    def __init__(self, command: list, env: dict, cwd: str, log_path: str, with_root: bool = True,
                 leave_out: Callable[[str], bool] = lambda title: False):
        self.command, self.env, self.cwd, self.log_path = command, env, cwd, log_path
        self.with_root, self.leave_out = with_root, leave_out
        self.samples: list = []         # (time.monotonic(), bytes)
        self.browsers_peak = 0          # bytes: the browsers' processes alone (chromedriver, Chromium's)
        self.exit_code: Optional[int] = None

    def go(self, timeout: float, on_sample: Callable[[int], None] = lambda root: None) -> "Watched":
        """Run to the end; `on_sample(root pid)` after each sample (a kill plan's look)."""
        with open(self.log_path, "ab") as log:
            process = subprocess.Popen(self.command, env=self.env, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                       stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        try:
            while process.poll() is None:
                self.samples.append((time.monotonic(), self._pss(process.pid)))
                on_sample(process.pid)
                if time.monotonic() > deadline:
                    raise BenchFailure(f"{' '.join(self.command[:4])}... still running after {timeout:.0f} s")
                time.sleep(SAMPLE_EVERY)
        finally:
            if process.poll() is None:
                process.kill()
            self.exit_code = process.wait()
        return self

    def _pss(self, root: int) -> int:
        tree = [root, *descendants(root)] if self.with_root else descendants(root)
        counted = [pid for pid in tree if not self.leave_out(_title(pid))]
        self.browsers_peak = max(self.browsers_peak, pss_bytes(pid for pid in counted if _is_browser(pid)))
        return pss_bytes(counted)

    @property
    def peak(self) -> int:
        return max((pss for _, pss in self.samples), default=0)

    def tail(self, lines: int = 30) -> str:
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])


def _is_browser(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().startswith(BROWSER_NAMES)
    except OSError:
        return False


def batchd_master(title: str) -> bool:
    """batchd's master, left out of the workers-and-browsers figure with the supervisor (the root)."""
    return title.startswith("batchd: master")


def marked_browsers(mark: str) -> list:
    """Pids of live Chromium and chromedriver processes that carry `mark` in their environment."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rpartition(")")[2].split()[0]
            with open(f"/proc/{entry}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
        except (OSError, IndexError):
            continue
        if state != "Z" and name.startswith(BROWSER_NAMES) and f"{MARK}={mark}".encode() in environ.split(b"\0"):
            found.append(int(entry))
    return found


def kill_pids(pids: list) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# -- the kills
class WorkerKill:
    """SIGKILLs one worker once `at` pages are had; SETTLE_AFTER_KILL s later, counts its browser processes still
    alive: those under it at the kill, and the marked ones that name one of its browsers' profile folders
    (Chromium's crash handlers, which leave their browser's tree). The supervisor starts a new worker, and the
    batch goes on to its end."""

    def __init__(self, site: RenderSite, at: int, mark: str):
        self.site, self.at, self.mark = site, at, mark
        self.killed_at: Optional[float] = None
        self.browsers: list = []
        self.folders: set = set()
        self.left: Optional[int] = None

    def __call__(self, root: int) -> None:
        if self.killed_at is None and len(self.site.hits.whole) >= self.at:
            self._kill_a_worker(root)
        elif self.killed_at is not None and self.left is None:
            if time.monotonic() - self.killed_at >= SETTLE_AFTER_KILL:
                self.left = len(self.still_alive())

    def _kill_a_worker(self, root: int) -> None:
        workers = [pid for pid in descendants(root) if _title(pid).startswith("batchd: worker")]
        with_browsers = [pid for pid in workers if descendants(pid)]
        if not with_browsers:
            return                      # (a look later: no worker has a browser yet)
        worker = with_browsers[0]
        self.browsers = descendants(worker)
        self.folders = {part.split("=", 1)[1].rsplit("/profile", 1)[0] for pid in self.browsers
                        for part in _title(pid).split() if part.startswith("--user-data-dir=")}
        os.kill(worker, signal.SIGKILL)
        self.killed_at = time.monotonic()

    def still_alive(self) -> list:
        marked = marked_browsers(self.mark)
        return [pid for pid in marked if pid in self.browsers or any(folder in _title(pid) for folder in self.folders)]


class SupervisorKill:
    """SIGKILLs the supervisor (the root alone) once `at` pages are had: its children have their SIGTERM from the
    kernel, stop, and close their browsers; nothing else is asked of anyone."""

    def __init__(self, site: RenderSite, at: int):
        self.site, self.at = site, at
        self.killed_at: Optional[float] = None

    def __call__(self, root: int) -> None:
        if self.killed_at is None and len(self.site.hits.whole) >= self.at:
            os.kill(root, signal.SIGKILL)
            self.killed_at = time.monotonic()


def gone_after(mark: str, since: float, bound: float = 60.0) -> tuple:
    """(browser processes of `mark` alive SETTLE_AFTER_KILL s after `since`, seconds from `since` until none
    was, or None past `bound`); whatever is left at the bound is killed, so that none outlives the bench."""
    at_settle, gone = None, None
    while True:
        alive = marked_browsers(mark)
        waited = time.monotonic() - since
        if at_settle is None and waited >= SETTLE_AFTER_KILL:
            at_settle = len(alive)
        if not alive:
            gone = waited
        if gone is not None and at_settle is not None or waited > bound:
            kill_pids(alive)
            return at_settle, gone
        time.sleep(0.1)


# -- the figures
def timed(site: RenderSite, pages: int, watched: Watched, name: str) -> dict:
    """Pages/s over the site's clock, the PSS peak, and the first and last buckets' memory."""
    hits = site.hits
    if hits.first_page is None or len(hits.whole) < pages:
        raise BenchFailure(f"{name}: the site had {len(hits.whole)} of {pages} pages whole; its last lines:\n"
                           f"{watched.tail()}")
    whole = sorted(hits.whole)
    seconds = whole[-1] - hits.first_page
    figures = {"pages": pages, "requests_whole": len(whole), "seconds": seconds, "pages_per_s": pages / seconds,
               "pss_peak_mb": watched.peak / MB, "pss_browsers_peak_mb": watched.browsers_peak / MB,
               "samples": len(watched.samples)}
    if pages >= 2 * BUCKET:
        first = _mean_between(watched.samples, hits.first_page, whole[BUCKET - 1])
        last = _mean_between(watched.samples, whole[-BUCKET], whole[-1])
        buckets = [(whole[k - 1] if k else hits.first_page, whole[min(k + BUCKET, pages) - 1])
                   for k in range(0, pages, BUCKET)]
        figures.update(pss_first_100_mb=first / MB, pss_last_100_mb=last / MB,
                       pss_last_to_first=last / first if first else None,
                       pss_by_100_pages_mb=[round(_mean_between(watched.samples, *bucket) / MB) for bucket in buckets])
    return figures


def _mean_between(samples: list, start: float, end: float) -> float:
    inside = [pss for moment, pss in samples if start <= moment <= end]
    if not inside:          # a bucket shorter than a sample's interval: the sample nearest its end
        inside = [min(samples, key=lambda sample: abs(sample[0] - end))[1]]
    return sum(inside) / len(inside)


# -- the contenders
class Sitting:
    """One sitting's shared parts: a work folder, the mark of each run, the batchd settings."""

    def __init__(self, args):
        self.args = args
        self.workdir = tempfile.mkdtemp(prefix="bench-render-")
        self.concurrency = args.concurrency or args.render_concurrency

    def mark(self) -> str:
        return uuid.uuid4().hex

    def batchd(self, site: RenderSite, urls: list, spider: str, kill: Optional[str] = None) -> dict:
        """One batch of `urls` with `spider`. `kill`: "worker", a worker SIGKILLed a third of the way in (the
        batch goes on to its end); "supervisor", the supervisor SIGKILLed there (the run ends)."""
        place = Place(self.args.store)
        mark = self.mark()
        third = max(len(urls) // 3, 1)
        plan = WorkerKill(site, third, mark) if kill == "worker" else SupervisorKill(site, third) if kill else None
        try:
            load_urls(place, urls)
            site.hits.reset()
            watched = Watched(self.batchd_command(spider), self.batchd_environment(place, mark), self.workdir,
                              os.path.join(self.workdir, f"{place.name}.log"), with_root=False,
                              leave_out=batchd_master)
            watched.go(run_timeout(len(urls)), on_sample=plan or (lambda root: None))
            if kill == "supervisor":
                if plan.killed_at is None:
                    raise BenchFailure("batchd: the batch ended before its supervisor could be killed")
                at_settle, gone = gone_after(mark, plan.killed_at)
                return {"left_after_supervisor_kill": at_settle, "supervisor_kill_gone_s": gone}
            if watched.exit_code != 0:
                raise BenchFailure(f"batchd run exited {watched.exit_code}; its last lines:\n{watched.tail()}")
            left = marked_browsers(mark)
            kill_pids(left)
            stored = read_batch(place)
        finally:
            place.remove()
        if stored["done"] != len(urls) or len(stored["items"]) != len(urls):
            raise BenchFailure(f"batchd: {stored['done']} tasks done and {len(stored['items'])} items of {len(urls)}")
        if kill == "worker":
            if plan.killed_at is None:
                raise BenchFailure("batchd: the batch ended before a worker could be killed")
            return {"left_after_worker_kill": plan.left if plan.left is not None else len(plan.still_alive())}
        counters = stored["counters"]
        return {**timed(site, len(urls), watched, "batchd"), "browser_restarts": counters.get(RESTARTS, 0),
                "browser_starts": counters.get("render/browser_starts", 0),
                "rendered": counters.get("render/pages", 0), "render_ms": counters.get("render/ms", 0),
                "left_after_run": len(left), "items": stored["items"]}

    def batchd_command(self, spider: str) -> list:
        return [sys.executable, "-m", "batchd", "run", spider, "--once", "--workers", str(self.args.workers)]

    def batchd_environment(self, place: Place, mark: str) -> dict:
        settings = dict(place.settings, RENDER_CONCURRENCY=str(self.args.render_concurrency), RENDER_BROWSER=BROWSER,
                        RENDER_DRIVER=DRIVER, BATCH_MONITOR_INTERVAL="1", LOG_LEVEL="INFO",
                        FAILED_ITEMS_PATH=os.path.join(self.workdir, f"{place.name}-failed.jsonl"))
        return dict(child_environment(), BATCHD_CONFIG=os.devnull, **{MARK: mark},
                    **{f"BATCHD_{name}": value for name, value in settings.items()})

    def contender(self, name: str, site: RenderSite, urls: list) -> dict:
        """The bare loop or scrapy-playwright over `urls`, in the bench's venv."""
        script = {"bare": "render_playwright.py", "scrapy": "render_scrapy.py"}[name]
        path = os.path.join(self.workdir, "urls.json")
        with open(path, "w") as f:
            json.dump(urls, f)
        mark = self.mark()
        site.hits.reset()
        command = [venv_python(), os.path.join(HERE, script), path, "--concurrency", str(self.concurrency),
                   "--wait", READY]
        watched = Watched(command, dict(child_environment(), **{MARK: mark}), HERE,
                          os.path.join(self.workdir, f"{name}.log")).go(run_timeout(len(urls)))
        if watched.exit_code != 0:
            raise BenchFailure(f"{name} exited {watched.exit_code}; its last lines:\n{watched.tail()}")
        left = marked_browsers(mark)
        kill_pids(left)
        return {**timed(site, len(urls), watched, name), "left_after_run": len(left)}

    def close(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def read_batch(place: Place) -> dict:
    """Tasks done, the last batch's counters and the items (url -> item) from the store."""
    store = store_from_url(place.url)
    q = store.quote
    try:
        store.open(LAYOUT)
        record = store.last_batch()
        done = store.progress().done
        rows = store.fetch(f"SELECT t.{q('url')}, i.{q('item')} FROM {q(LAYOUT.default_item_table)} i "
                           f"JOIN {q(LAYOUT.table)} t ON t.{q(LAYOUT.id_field)} = i.{q('task_id')}")
    finally:
        store.close()
    items = {url: json.loads(item) if isinstance(item, (str, bytes)) else item for url, item in rows}
    return {"done": done, "counters": dict(record.counters or {}) if record else {}, "items": items}


def run_timeout(pages: int) -> float:
    return 120 + pages * 1.0


def venv_python() -> str:
    """The bench venv's Python, with playwright and scrapy-playwright; made with pip on first use."""
    python = os.path.join(VENV, "bin", "python")
    probe = [python, "-c", "import playwright, scrapy_playwright"]
    if os.path.exists(python) and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    say(f"making {VENV} (pip install {' '.join(VENV_PACKAGES)}; no browser is downloaded)")
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", VENV], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", *VENV_PACKAGES], check=True)
    return python


# -- the sittings
def comparison(args) -> dict:
    """batchd, the bare loop and scrapy-playwright over the same pages, --rounds times in turn; then batchd's
    kills (--kills)."""
    sitting = Sitting(args)
    wanted = [name for name in CONTENDERS if name in args.only.split(",")]
    runs: dict = {name: [] for name in wanted}
    kills: dict = {}
    try:
        with RenderSite(hosts=1) as site:
            urls = [site.url(n) for n in range(args.pages)]
            say(f"site: {site.describe()}; {args.pages} pages, {args.rounds} round(s)")
            for round_no in range(args.rounds):
                for name in rotated(wanted, round_no):
                    run = sitting.batchd(site, urls, "bench.spider:RenderSpider") if name == "batchd" else \
                        sitting.contender(name, site, urls)
                    run.pop("items", None)
                    runs[name].append(run)
                    say(f"round {round_no + 1}, {name}: {run['pages_per_s']:.2f} pages/s, PSS peak "
                        f"{run['pss_peak_mb']:.0f} MB")
            for victim in kill_victims(args) if "batchd" in wanted else ():
                say(f"batchd: again, a {victim} SIGKILLed a third of the way in")
                kills.update(sitting.batchd(site, urls, "bench.spider:RenderSpider", kill=victim))
    finally:
        sitting.close()
    rows = {name: summary(runs[name], runs.get("bare")) for name in wanted}
    if "batchd" in rows:
        rows["batchd"].update(kills)
    if "batchd" in runs and "scrapy" in runs:
        rows["batchd"]["x_scrapy_pages_per_s"] = median([mine["pages_per_s"] / theirs["pages_per_s"]
                                                         for mine, theirs in zip(runs["batchd"], runs["scrapy"])])
    report = {"kind": "comparison", **describe(args, sitting), "rows": rows, "runs": runs}
    report["targets"] = targets(rows.get("batchd", {}))
    return report


def targets(batchd: dict) -> list:
    """The issue's targets that this sitting measured: (what, found, met)."""
    found = []

    def target(what: str, value, met) -> None:
        if value is not None:
            found.append({"target": what, "found": value, "met": bool(met(value))})

    target("pages/s >= 0.9x the bare loop's", batchd.get("x_bare_pages_per_s"), lambda x: x >= 0.9)
    target("pages/s >= 2x scrapy-playwright's", batchd.get("x_scrapy_pages_per_s"), lambda x: x >= 2)
    target("PSS peak <= 1.3x the bare loop's", batchd.get("x_bare_pss_peak"), lambda x: x <= 1.3)
    target("PSS of the last 100 pages within 10 % of the first 100's", batchd.get("pss_last_to_first"),
           lambda x: abs(x - 1) <= 0.1)
    target("0 browser processes left after a run", batchd.get("left_after_run"), lambda n: n == 0)
    target("0 left 3 s after a worker's kill", batchd.get("left_after_worker_kill"), lambda n: n == 0)
    target("0 left 3 s after the supervisor's kill", batchd.get("left_after_supervisor_kill"), lambda n: n == 0)
    return found


def kill_victims(args) -> list:
    return [victim for victim in ("worker", "supervisor") if victim in args.kills.split(",")]


MEDIANS = ("pages_per_s", "pss_peak_mb", "pss_browsers_peak_mb", "pss_first_100_mb", "pss_last_100_mb",
           "pss_last_to_first")


def summary(runs: list, bare: Optional[list]) -> dict:
    """The rounds' medians (the ratios: of each round's ratio to that round's bare loop), restarts summed, and
    the most left after a run."""
    row = {measure: median([run[measure] for run in runs if run.get(measure) is not None]) for measure in MEDIANS}
    row = {measure: value for measure, value in row.items() if value is not None}
    row.update(pages=runs[0]["pages"], rounds=len(runs), left_after_run=max(run["left_after_run"] for run in runs),
               pages_per_s_min=min(run["pages_per_s"] for run in runs),
               pages_per_s_max=max(run["pages_per_s"] for run in runs))
    if "browser_restarts" in runs[0]:
        row["browser_restarts"] = sum(run["browser_restarts"] for run in runs)
    row["x_bare_pages_per_s"] = median([run["pages_per_s"] / base["pages_per_s"] for run, base in zip(runs, bare)]) \
        if bare else None
    row["x_bare_pss_peak"] = median([run["pss_peak_mb"] / base["pss_peak_mb"] for run, base in zip(runs, bare)]) \
        if bare else None
    return row


def auto_comparison(args) -> dict:
    """batchd's batch of 5 hosts, 1 of them dynamic, with render=True and with render="auto"."""
    sitting = Sitting(args)
    try:
        with RenderSite(hosts=5, dynamic=1) as site:
            urls = [site.url(n) for n in range(args.pages)]
            say(f"site: {site.describe()}; {args.pages} pages")
            rows = {}
            for name, spider in (("batchd", "bench.spider:RenderSpider"), ("auto", "bench.spider:AutoRenderSpider")):
                say(f"{TITLES[name]}: running")
                rows[name] = sitting.batchd(site, urls, spider)
                say(f"{TITLES[name]}: {rows[name]['pages_per_s']:.2f} pages/s, {rows[name]['rendered']} rendered")
    finally:
        sitting.close()
    same = rows["batchd"].pop("items") == rows["auto"].pop("items")
    return {"kind": "auto", **describe(args, sitting, rounds=1), "rows": rows, "same_items": same,
            "auto_to_render": rows["auto"]["pages_per_s"] / rows["batchd"]["pages_per_s"]}


def describe(args, sitting: Sitting, rounds: Optional[int] = None) -> dict:
    return {"pages": args.pages, "rounds": rounds or args.rounds, "workers": args.workers,
            "render_concurrency": args.render_concurrency, "concurrency": sitting.concurrency, "store": args.store,
            "batchd": batchd_version(), "chromium": _version(BROWSER), "python": sys.version.split()[0],
            "cpus": os.cpu_count()}


def _version(program: str) -> str:
    try:
        return subprocess.run([program, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


# -- the table
def number(value, digits: int = 2) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


# (title, cell of a row) of the comparison's table, and of --auto's
COMPARISON_COLUMNS = (
    ("pages/s (min–max)", lambda row: rate_cell(row)),
    ("x bare loop", lambda row: number(row.get("x_bare_pages_per_s"))),
    ("PSS peak MB", lambda row: number(row["pss_peak_mb"], 0)),
    ("x bare loop", lambda row: number(row.get("x_bare_pss_peak"))),
    ("of which browsers MB", lambda row: number(row.get("pss_browsers_peak_mb"), 0)),
    ("browser restarts", lambda row: str(row.get("browser_restarts", "–"))),
    ("left after run", lambda row: str(row["left_after_run"])),
    ("left 3 s after a worker's kill", lambda row: str(row.get("left_after_worker_kill", "–"))),
    ("left 3 s after the supervisor's kill (all gone in)", lambda row: supervisor_kill(row)),
    ("PSS MB first 100 / last 100 pages", lambda row: flatness(row)),
)
AUTO_COLUMNS = (
    ("pages/s", lambda row: number(row["pages_per_s"])),
    ("pages rendered", lambda row: str(row["rendered"])),
    ("PSS peak MB", lambda row: number(row["pss_peak_mb"], 0)),
    ("browser restarts", lambda row: str(row["browser_restarts"])),
    ("left after run", lambda row: str(row["left_after_run"])),
)


def markdown(report: dict) -> str:
    head = (f"{report['pages']} pages, {report['rounds']} round(s), batchd {report['workers']} workers x "
            f"RENDER_CONCURRENCY {report['render_concurrency']}, others {report['concurrency']} pages at once; "
            f"{report['chromium']}; store {report['store']}; batchd {report['batchd']}; {report['cpus']} CPUs")
    columns = AUTO_COLUMNS if report["kind"] == "auto" else COMPARISON_COLUMNS
    lines = [head, "", "| contender | " + " | ".join(title for title, _ in columns) + " |",
             "|" + "---|" * (len(columns) + 1)]
    for name, row in report["rows"].items():
        lines.append(f"| {TITLES[name]} | " + " | ".join(cell(row) for _, cell in columns) + " |")
    lines.append("")
    if report["kind"] == "auto":
        lines += ["", f"render=\"auto\" / render=True: {report['auto_to_render']:.2f}x pages/s (target: 3x); same "
                      f"items: {'yes' if report['same_items'] else 'NO'}"]
    for target in report.get("targets", []):
        found = target["found"]
        lines.append(f"- {target['target']}: {found if isinstance(found, int) else number(found)} "
                     f"{'met' if target['met'] else 'MISSED'}")
    return "\n".join(lines)


def rate_cell(row: dict) -> str:
    if row.get("rounds", 1) < 2:
        return number(row["pages_per_s"])
    return f"{number(row['pages_per_s'])} ({number(row['pages_per_s_min'])}–{number(row['pages_per_s_max'])})"


def flatness(row: dict) -> str:
    if "pss_first_100_mb" not in row:
        return "–"
    return (f"{number(row['pss_first_100_mb'], 0)} / {number(row['pss_last_100_mb'], 0)} "
            f"({number(row['pss_last_to_first'])})")


def supervisor_kill(row: dict) -> str:
    if "left_after_supervisor_kill" not in row:
        return "–"
    gone = row["supervisor_kill_gone_s"]
    return f"{row['left_after_supervisor_kill']} ({'not in 60 s' if gone is None else f'{gone:.1f} s'})"


def main(args) -> int:
    byte_compile()
    try:
        report = auto_comparison(args) if args.auto else comparison(args)
    except BenchFailure as failure:
        print(f"bench render failed: {failure}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=1) if args.json else markdown(report))
    return 0

