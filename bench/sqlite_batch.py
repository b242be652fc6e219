"""Wall time and tasks/s of one whole batch on the embedded backend: one SQLite file, no MySQL,
no Redis; a master and N worker processes crawl the local test site (tests/httpserver.py).

    .venv/bin/python bench/sqlite_batch.py --tasks 2000 --workers 2

The file lives in a temporary directory (or --dir, to measure another disk) and is removed after.
"""
import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(os.path.dirname(HERE), "tests")
sys.path.insert(0, TESTS)

from httpserver import TestSite  # noqa: E402

SPIDER = "spiders.sqlite_seed:CrawlTask"
TASK_TABLE = """CREATE TABLE crawl_task (
  id INTEGER PRIMARY KEY AUTOINCREMENT, url TEXT NOT NULL,
  batch_status INTEGER NOT NULL DEFAULT 0,
  update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP);
CREATE INDEX idx_crawl_task_state ON crawl_task (batch_status);"""


def load_tasks(path: str, tasks: int, site: TestSite) -> None:
    with sqlite3.connect(path) as conn:
        conn.executescript(TASK_TABLE)
        conn.executemany("INSERT INTO crawl_task (url) VALUES (?)", [(site.url(f"/page/{i}"),) for i in range(tasks)])


def crawl(path: str, workers: int, threads: int) -> float:
    """Seconds from starting the processes to the master's return (the batch closed)."""
    env = dict(os.environ, PYTHONPATH=TESTS, BATCHD_CONFIG=os.devnull, TEST_SQLITE_PATH=path,
               BATCHD_BATCH_MONITOR_INTERVAL="1", BATCHD_SPIDER_THREAD_COUNT=str(threads),
               BATCHD_FAILED_ITEMS_PATH=path + "-failed.jsonl", BATCHD_LOG_LEVEL="WARNING")
    command = [sys.executable, os.path.join(TESTS, "spiders", "run.py"), SPIDER]
    started = time.monotonic()
    worker_procs = [subprocess.Popen(command + ["worker-once"], env=env) for _ in range(workers)]
    master = subprocess.run(command + ["master-once"], env=env)
    elapsed = time.monotonic() - started
    for proc in worker_procs:
        proc.wait(60)
    if master.returncode != 0:
        raise SystemExit(f"the master failed with exit code {master.returncode}")
    return elapsed


def verify(path: str, tasks: int) -> None:
    with sqlite3.connect(path) as conn:
        states = dict(conn.execute("SELECT batch_status, COUNT(*) FROM crawl_task GROUP BY batch_status"))
        items = conn.execute("SELECT COUNT(*) FROM crawl_task_item").fetchone()[0]
    if states != {1: tasks} or items != tasks:
        raise SystemExit(f"the batch is not whole: states {states}, items {items}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--dir", help="where to put the SQLite file (default: a temporary directory)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as folder, TestSite() as site:
        path = os.path.join(folder, "batchd.db")
        load_tasks(path, args.tasks, site)
        elapsed = crawl(path, args.workers, args.threads)
        verify(path, args.tasks)
    print(f"SQLite: {args.tasks} tasks, {args.workers} workers x {args.threads} threads: "
          f"{elapsed:.1f} s wall, {args.tasks / elapsed:.0f} tasks/s (every task done, every item stored)")


if __name__ == "__main__":
    main()
