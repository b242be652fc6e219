"""`batchd demo`: serve the bundled bookshop on loopback, load its pages as tasks into a SQLite
file, run `batchd run --once` (the supervisor, the master and 2 workers) on it, show the
progress live, and end with what happened and where the results are.

Everything lands in one folder (default ./batchd-demo): demo.db (tasks, batch record,
items), batchd.toml (the demo's settings, reusable with `batchd status --config`),
batchd.log (the run's log).
"""
import os
import sqlite3
import subprocess
import sys
import time
from typing import Optional

from ...backends.sqlite.sqlite_store import SqliteBatchStore
from ...errors import ExitCode
from ...model import TaskLayout
from ..status_text import bar
from ...task import TaskState
from .site import book_paths
from .demo_spider import BookSpider

SPIDER = "batchd.cli.demo.demo_spider:BookSpider"
RUN_TIMEOUT = 120.0
# What `run --once` says of a batch that ran to its end, beside 0 (docs/architecture.md, Exit codes).
RAN_TO_ITS_END: dict = {ExitCode.FAILURE: " (the batch ran to its end; some tasks failed)",
                  ExitCode.DATAERR: " (the batch ran to its end; its data was flagged: batchd quality)"}


class Terminal:
    """Progress on one rewritten line when stdout is a terminal; a line per change otherwise."""

    def __init__(self, stream=sys.stdout):
        self.stream = stream
        self.live = stream.isatty()
        self._last = self._key = None

    def progress(self, text: str, key=None) -> None:
        """Show `text`; off a terminal, only when `key` (what the line counts) changed."""
        key = text if key is None else key
        if self.live:
            self.stream.write("\r\033[K" + text)
        elif key != self._key:
            self.stream.write(text + "\n")
        self._last, self._key = text, key
        self.stream.flush()

    def say(self, text: str = "") -> None:
        if self.live and self._last is not None:
            self.stream.write("\r\033[K")
        self.stream.write(text + "\n")
        if self.live and self._last is not None:
            self.stream.write(self._last)
        self.stream.flush()

    def end_progress(self) -> None:
        if self.live and self._last is not None:
            self.stream.write("\n")
            self.stream.flush()
        self._last = None


def run_demo(directory: str = "batchd-demo", workers: int = 2, terminal: Optional[Terminal] = None) -> int:
    terminal = terminal or Terminal()
    directory = os.path.abspath(directory)
    os.makedirs(directory, exist_ok=True)
    paths = DemoPaths(directory)
    paths.clear()
    site = start_site()
    try:
        base = f"http://127.0.0.1:{site.port}"
        load_tasks(paths.db, [base + path for path in book_paths()])
        paths.write_config()
        terminal.say(f"batchd demo: a bookshop on {base}, {len(book_paths())} pages as tasks in {paths.db}")
        terminal.say(f"running: batchd run {SPIDER} --once --workers {workers} --config {paths.config}")
        started = time.monotonic()
        code = run_batch(paths, workers, terminal)
        elapsed = time.monotonic() - started
    finally:
        site.stop()
    terminal.end_progress()
    terminal.say(summary(paths, code, elapsed))
    # The demo's out-of-print book fails on purpose: a batch that ran to its end is the demo working.
    return ExitCode.OK if code in RAN_TO_ITS_END else code


class DemoPaths:
    def __init__(self, directory: str):
        self.directory = directory
        self.db = os.path.join(directory, "demo.db")
        self.config = os.path.join(directory, "batchd.toml")
        self.log = os.path.join(directory, "batchd.log")
        self.failed_items = os.path.join(directory, "failed_items.jsonl")

    def clear(self) -> None:
        """A demo starts from nothing: its own files of an earlier run go."""
        for path in (self.db, self.db + "-wal", self.db + "-shm", self.log, self.failed_items):
            if os.path.exists(path):
                os.unlink(path)

    def write_config(self) -> None:
        with open(self.config, "w", encoding="utf-8") as f:
            f.write("# The demo's settings: `batchd status --config " + self.config + "` reads them too.\n"
                    f'SPIDER = "{SPIDER}"\n'
                    f'STORE = "sqlite:///{self.db}"\n'
                    f'FAILED_ITEMS_PATH = "{self.failed_items}"\n'
                    "BATCH_MONITOR_INTERVAL = 0.5\n"
                    "ITEM_FLUSH_INTERVAL = 0.2\n"
                    "SPIDER_THREAD_COUNT = 4\n"
                    "REQUEST_TIMEOUT = 5.0\n")


class SiteProcess:
    def __init__(self, process: subprocess.Popen, port: int):
        self.process, self.port = process, port

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start_site() -> SiteProcess:
    process = subprocess.Popen([sys.executable, "-m", "batchd.cli.demo.site"], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None      # stdout=PIPE
    line = process.stdout.readline()
    if not line.startswith("port "):
        process.kill()
        raise RuntimeError(f"the demo site did not start: {line!r}")
    return SiteProcess(process, int(line.split()[1]))


def load_tasks(db_path: str, urls: list) -> None:
    """The pages as tasks, through the same store calls as `batchd tasks add`."""
    store, layout = SqliteBatchStore(db_path), TaskLayout(table=BookSpider.__task_table__)
    store.create_task_table(layout)
    store.add_tasks(layout, [{"url": url} for url in urls])
    store.close()


def run_batch(paths: DemoPaths, workers: int, terminal: Terminal) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHD_")}
    env["BATCHD_CONFIG"] = paths.config
    env.pop("INVOCATION_ID", None)
    env.pop("NOTIFY_SOCKET", None)
    with open(paths.log, "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "batchd", "run", "--once", "--workers", str(workers)],
                                   env=env, stdout=log, stderr=subprocess.STDOUT)
        watcher = ProgressWatcher(paths, terminal)
        deadline = time.monotonic() + RUN_TIMEOUT
        while process.poll() is None:
            watcher.show()
            if time.monotonic() > deadline:
                process.terminate()
                terminal.say(f"the batch took longer than {RUN_TIMEOUT:.0f} s; stopped")
            time.sleep(0.2)
        watcher.show()
        return process.returncode


class ProgressWatcher:
    """Reads the demo's SQLite file through batchd's own store, and the log for lines worth showing."""

    def __init__(self, paths: DemoPaths, terminal: Terminal):
        self.paths, self.terminal = paths, terminal
        self.store = SqliteBatchStore(paths.db)
        self.layout = TaskLayout(table=BookSpider.__task_table__)
        self.store.open(self.layout)
        self.started = time.monotonic()
        self.log_offset = 0

    def show(self) -> None:
        self._echo_log_warnings()
        progress = self.store.progress()
        elapsed = max(0.001, time.monotonic() - self.started)
        self.terminal.progress(f"{bar(progress.done, progress.failed, progress.total)} "
                               f"{progress.settled}/{progress.total}  done {progress.done}  failed {progress.failed}"
                               f"  {progress.settled / elapsed:.1f} tasks/s", key=progress)

    def _echo_log_warnings(self) -> None:
        """The run's warnings and errors (a 404, a retry) appear above the bar as they happen."""
        if not os.path.exists(self.paths.log):
            return
        with open(self.paths.log, "rb") as f:
            f.seek(self.log_offset)
            chunk = f.read()
        complete = chunk[:chunk.rfind(b"\n") + 1]
        self.log_offset += len(complete)
        for line in complete.decode("utf-8", "replace").splitlines():
            if " WARNING " in line or " ERROR " in line:
                self.terminal.say("  " + line.split(" ", 2)[-1])


def summary(paths: DemoPaths, code: int, elapsed: float) -> str:
    store = SqliteBatchStore(paths.db)
    store.open(TaskLayout(table=BookSpider.__task_table__))
    progress = store.progress()
    store.close()
    conn = sqlite3.connect(paths.db)
    try:
        items = conn.execute('SELECT COUNT(*) FROM "demo_book_item"').fetchone()[0]
        sample = conn.execute('SELECT "item" FROM "demo_book_item" ORDER BY "task_id" LIMIT 1').fetchone()
        failed = [url for (url,) in conn.execute('SELECT "url" FROM "demo_book" WHERE "batch_status" = ?',
                                                 (int(TaskState.FAILED),))]
    finally:
        conn.close()
    lines = ["",
             f"batchd run exited {code} after {elapsed:.1f} s{RAN_TO_ITS_END.get(code, '')}",
             f"tasks: {progress.total}, done {progress.done}, failed {progress.failed}"
             + (f" ({', '.join(failed)})" if failed else ""),
             f"items stored: {items}, in table demo_book_item of {paths.db}",
             f"  e.g. {sample[0] if sample else '(none)'}",
             "",
             "look at them:",
             f"  python3 -c \"import sqlite3; [print(r[0]) for r in sqlite3.connect('{paths.db}')"
             ".execute('SELECT item FROM demo_book_item')]\"",
             f"  batchd status --config {paths.config}",
             f"the run's log: {paths.log}"]
    return "\n".join(lines)
