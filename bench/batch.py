"""Wall time and tasks/s of one whole batch: `batchd run --once --workers N` (the supervisor, the
master and N worker processes), crawling the local test site (tests/httpserver.py) so that the
network is not what is measured. The time includes the processes' start and the last patrol
that closes the batch.

    .venv/bin/python bench/batch.py --tasks 2000 --workers 2                 # MySQL + Redis
    .venv/bin/python bench/batch.py --tasks 2000 --workers 2 --store sqlite  # one SQLite file

MySQL + Redis: the machine's MariaDB (127.0.0.1:3306, root) and Redis (127.0.0.1:6379); the
bench makes its own database and namespace and removes them. SQLite: a file in a temporary
directory.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(os.path.dirname(HERE), "tests")
sys.path.insert(0, TESTS)

from batchd.backends import store_from_url
from batchd.model import TaskLayout
from httpserver import TestSite  # noqa: E402

MYSQL_PORT = 3306
REDIS_URL = "redis://127.0.0.1:6379/12"
LAYOUT = TaskLayout(table="crawl_task")


class Place:
    """Where the batch runs: its store URL, the settings that name it, and its clean-up."""

    def __init__(self, kind: str, mysql_port: int = MYSQL_PORT, redis_url: str = REDIS_URL):
        """MySQL: a new database on the server at 127.0.0.1:`mysql_port` (root, no password), the
        namespace on `redis_url` (python -m bench compare passes servers of its own)."""
        self.kind, self.name = kind, "bench_" + uuid.uuid4().hex[:8]
        self.mysql_port, self.redis_url = mysql_port, redis_url
        if kind == "sqlite":
            self.dir = tempfile.mkdtemp(prefix="batchd-bench-")
            self.url = f"sqlite:///{self.dir}/bench.db"
            self.settings = {"STORE": self.url}
        else:
            conn = self.connect()
            conn.cursor().execute(f"CREATE DATABASE `{self.name}`")
            conn.close()
            self.url = f"mysql://root@127.0.0.1:{mysql_port}/{self.name}"
            self.settings = {"MYSQL_URL": self.url, "REDIS_URL": redis_url, "NAMESPACE": self.name}

    def connect(self):
        """A root connection to the MySQL server (no database selected)."""
        import MySQLdb
        return MySQLdb.connect(host="127.0.0.1", port=self.mysql_port, user="root", autocommit=True)

    def remove(self) -> None:
        if self.kind == "sqlite":
            shutil.rmtree(self.dir, ignore_errors=True)
            return
        import redis
        conn = self.connect()
        conn.cursor().execute(f"DROP DATABASE IF EXISTS `{self.name}`")
        conn.close()
        client = redis.Redis.from_url(self.redis_url)
        keys = list(client.scan_iter(match=f"{self.name}:*"))
        if keys:
            client.delete(*keys)


def load_tasks(place: Place, tasks: int, site: TestSite) -> None:
    """Pages 0 .. tasks-1 of `site`."""
    load_urls(place, [site.url(f"/page/{i}") for i in range(tasks)])


def load_urls(place: Place, urls: list) -> None:
    """One pending task per URL, ids in the list's order, through the store's own calls, as `batchd
    tasks add` does."""
    store = store_from_url(place.url)
    store.create_task_table(LAYOUT)
    for start in range(0, len(urls), 1000):
        store.add_tasks(LAYOUT, [{"url": url} for url in urls[start:start + 1000]])
    store.close()


def run(place: Place, workers: int, threads: int) -> float:
    settings = dict(place.settings, BATCH_MONITOR_INTERVAL="1", SPIDER_THREAD_COUNT=str(threads),
                    FAILED_ITEMS_PATH=f"/tmp/{place.name}-failed.jsonl", LOG_LEVEL="WARNING")
    env = dict(os.environ, PYTHONPATH=TESTS, BATCHD_CONFIG=os.devnull,
               **{f"BATCHD_{name}": value for name, value in settings.items()})
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "batchd", "run", "spiders.seed:CrawlTask", "--once",
                           "--workers", str(workers)], env=env)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, f"batchd run exited {done.returncode}"
    return elapsed


def check(place: Place, tasks: int) -> None:
    """Every task done and every item stored, read back from the store."""
    store = store_from_url(place.url)
    store.open(LAYOUT)
    progress = store.progress()
    items = store.fetch(f"SELECT COUNT(*) FROM {store.quote(LAYOUT.default_item_table)}")[0][0]
    store.close()
    assert progress.done == tasks == items, f"{progress}, {items} items"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--store", choices=("mysql", "sqlite"), default="mysql")
    args = parser.parse_args()
    place = Place(args.store)
    try:
        with TestSite() as site:
            load_tasks(place, args.tasks, site)
            elapsed = run(place, args.workers, args.threads)
            check(place, args.tasks)
    finally:
        place.remove()
    print(f"{args.store}: {args.tasks} tasks, {args.workers} workers x {args.threads} threads: "
          f"{elapsed:.1f} s wall, {args.tasks / elapsed:.0f} tasks/s (every task done, every item stored)")


if __name__ == "__main__":
    main()
