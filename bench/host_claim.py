"""What BATCH_TASK_HOST_FIELD costs a claim: the master's claim of 5,000 tasks on a 1,000,000-row MySQL task
table sorted by host (the first 600,000 ids on one host, then 1,000 on each of 400 others), in id order and
across hosts. Run from the repository's root, with the MariaDB of the tests at hand:

    .venv/bin/python -m bench.host_claim            # ms per claim, off and on; about a minute
    .venv/bin/python -m bench.host_claim --rows 100000 --claims 3

It works in a temporary database of its own (BENCH_MYSQL_URL, default mysql://root@127.0.0.1:3306/), dropped
at the end. Each figure is the median of --claims claims in a row (each takes tasks the last one left).
"""
import argparse
import os
import statistics
import time
import uuid
from collections import Counter

import batchd
from batchd.hosts.claims import host_of
from batchd.backends.mysql_redis.mysql import parse_mysql_url

SERVER = os.environ.get("BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306/").rstrip("/")
TABLE = "crawl_task"
BIG_SHARE = 0.6          # of the rows, on the one host holding the first ids
OTHER_HOSTS = 400


def fill(conn, rows: int) -> None:
    """The seed's task table, sorted by host, through MariaDB's sequence engine (a few seconds a million)."""
    big = int(rows * BIG_SHARE)
    per_host = max(1, (rows - big) // OTHER_HOSTS)
    cur = conn.cursor()
    cur.execute(f"""CREATE TABLE `{TABLE}` (`id` BIGINT NOT NULL AUTO_INCREMENT, `url` VARCHAR(500) NOT NULL,
        `batch_status` TINYINT NOT NULL DEFAULT 0,
        `update_time` DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
        PRIMARY KEY (`id`), KEY `idx_state` (`batch_status`))""")
    cur.execute(f"INSERT INTO `{TABLE}` (`id`, `url`) SELECT seq, CONCAT('https://', IF(seq <= %s, 'big.example', "
                f"CONCAT('h', (seq - %s - 1) DIV %s, '.example')), '/page/', seq) FROM seq_1_to_{int(rows)}",
                (big, big, per_host))
    conn.commit()


def claims_ms(url: str, host_field, limit: int, claims: int) -> tuple:
    """(median ms of a claim, hosts in the first claim); the claimed rows are set back to pending after."""
    store = batchd.MysqlBatchStore(url)
    store.open(batchd.TaskLayout(table=TABLE, host_field=host_field))
    took, hosts = [], None
    for _ in range(claims):
        began = time.perf_counter()
        rows = store.claim(limit)
        took.append((time.perf_counter() - began) * 1000)
        hosts = hosts or Counter(host_of(row["url"]) for row in rows)
    store.execute(f"UPDATE `{TABLE}` SET `batch_status` = 0 WHERE `batch_status` = 2")
    store.close()
    return statistics.median(took), hosts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.host_claim", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the task table (1000000)")
    parser.add_argument("--limit", type=int, default=5000, help="tasks per claim (5000)")
    parser.add_argument("--claims", type=int, default=5, help="claims measured each way (5)")
    args = parser.parse_args(argv)
    import MySQLdb
    admin_args = parse_mysql_url(SERVER + "/mysql")
    admin_args.pop("db")
    admin = MySQLdb.connect(**admin_args)
    name = "batchd_bench_" + uuid.uuid4().hex[:8]
    admin.cursor().execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        url = f"{SERVER}/{name}"
        began = time.perf_counter()
        fill(MySQLdb.connect(**parse_mysql_url(url)), args.rows)
        print(f"{args.rows} rows, {BIG_SHARE:.0%} on one host then {OTHER_HOSTS} hosts, in "
              f"{time.perf_counter() - began:.1f} s, in the database {name} (dropped at the end)")
        for label, host_field in (("id order", None), ("across hosts", "url")):
            ms, hosts = claims_ms(url, host_field, args.limit, args.claims)
            print(f"claim of {args.limit}, {label}: {ms:.0f} ms (median of {args.claims}); the first took "
                  f"{len(hosts)} hosts, at most {max(hosts.values())} tasks of one")
    finally:      # a connection of its own: the first may have timed out while the table filled
        admin.close()
        admin = MySQLdb.connect(**admin_args)
        admin.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")
        admin.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
