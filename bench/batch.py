"""Wall time and tasks/s of one whole batch: `batchd run --once --workers N` (the supervisor, the
master and N worker processes) on MySQL + Redis, crawling the local test site
(tests/httpserver.py) so that the network is not what is measured. The time includes the
processes' start and the last patrol that closes the batch.

    .venv/bin/python bench/batch.py --tasks 2000 --workers 2

Needs the machine's MariaDB (127.0.0.1:3306, root) and Redis (127.0.0.1:6379); creates and
drops its own database, uses Redis db 12.
"""
import argparse
import os
import subprocess
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(os.path.dirname(HERE), "tests")
sys.path.insert(0, TESTS)

import MySQLdb  # noqa: E402
import redis  # noqa: E402

from httpserver import TestSite  # noqa: E402

MYSQL = dict(host="127.0.0.1", port=3306, user="root", passwd="")
REDIS_URL = "redis://127.0.0.1:6379/12"
TASK_TABLE = """CREATE TABLE crawl_task (
  id BIGINT NOT NULL AUTO_INCREMENT, url VARCHAR(500) NOT NULL,
  batch_status TINYINT NOT NULL DEFAULT 0,
  update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (id), KEY idx_state (batch_status))"""


def prepare(db: str, tasks: int, site: TestSite) -> None:
    conn = MySQLdb.connect(autocommit=True, **MYSQL)
    cur = conn.cursor()
    cur.execute(f"CREATE DATABASE `{db}`")
    cur.execute(f"USE `{db}`")
    cur.execute(TASK_TABLE)
    cur.executemany("INSERT INTO crawl_task (url) VALUES (%s)", [(site.url(f"/page/{i}"),) for i in range(tasks)])
    conn.close()
    redis.Redis.from_url(REDIS_URL).flushdb()


def run(db: str, workers: int, threads: int) -> float:
    """`batchd run --once`: the supervisor, the master and the workers, as an operator starts them."""
    env = dict(os.environ, PYTHONPATH=TESTS, BATCHD_CONFIG=os.devnull,
               BATCHD_MYSQL_URL=f"mysql://root@127.0.0.1:3306/{db}", BATCHD_REDIS_URL=REDIS_URL,
               BATCHD_BATCH_MONITOR_INTERVAL="1", BATCHD_SPIDER_THREAD_COUNT=str(threads),
               BATCHD_FAILED_ITEMS_PATH=f"/tmp/{db}-failed.jsonl", BATCHD_LOG_LEVEL="WARNING")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "batchd", "run", "spiders.seed:CrawlTask", "--once",
                           "--workers", str(workers)], env=env)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, f"batchd run exited {done.returncode}"
    return elapsed


def check(db: str, tasks: int) -> None:
    conn = MySQLdb.connect(db=db, **MYSQL)
    cur = conn.cursor()
    cur.execute("SELECT batch_status, COUNT(*) FROM crawl_task GROUP BY batch_status")
    states = dict(cur.fetchall())
    cur.execute("SELECT COUNT(*) FROM crawl_task_item")
    items = cur.fetchone()[0]
    conn.close()
    assert states == {1: tasks} and items == tasks, f"states {states}, items {items}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    db = "batchd_bench_" + uuid.uuid4().hex[:8]
    with TestSite() as site:
        try:
            prepare(db, args.tasks, site)
            elapsed = run(db, args.workers, args.threads)
            check(db, args.tasks)
        finally:
            conn = MySQLdb.connect(autocommit=True, **MYSQL)
            conn.cursor().execute(f"DROP DATABASE IF EXISTS `{db}`")
    print(f"{args.tasks} tasks, {args.workers} workers x {args.threads} threads: "
          f"{elapsed:.1f} s wall, {args.tasks / elapsed:.0f} tasks/s (every task done, every item stored)")


if __name__ == "__main__":
    main()
