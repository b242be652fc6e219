"""The bare loop: what crawling a task table costs with no framework at all, the baseline of
`python -m bench compare`.

    python -m bench.baseline --port 3306 --database crawl --processes 2 --threads 8

It reads the pending tasks of `crawl_task` once, splits them among P processes (fork), and each
process's T threads take tasks from the process's shared list. A thread GETs the task's URL with
requests (a Session per thread, so connections are kept alive), parses the page with parsel (the
same fields as batchd's bench spider: bench/fields.py), and keeps the item; every FLUSH_ROWS tasks,
and at the end, it stores its items with one multi-row INSERT (executemany) into `crawl_task_item`
(batchd's default item table, made beforehand by the bench) and marks those tasks done with one
`UPDATE ... WHERE id IN (...)`, both in one transaction on the thread's own connection.

That is the useful work a framework does, without anything it adds: no queue server, no lease, no
retry, no batch record, no guarantee if a process dies. A task that fails ends the run with exit 1
(the bench then fails loudly); batchd is not imported.
"""
import argparse
import collections
import json
import multiprocessing
import sys
import threading
import traceback

import MySQLdb
import parsel
import requests

from bench.fields import page_fields

TASK_TABLE = "crawl_task"
ITEM_TABLE = "crawl_task_item"
FLUSH_ROWS = 200          # rows per multi-row INSERT and per UPDATE ... IN: between 100 and 500
BATCH_ID = 1              # the item table's key has a batch column; the bare loop has one batch
DONE = 1                  # batchd's state value for done, so the bench checks every contender alike
REQUEST_TIMEOUT = 30


def connect(args):
    return MySQLdb.connect(host=args.host, port=args.port, user=args.user, passwd=args.password,
                           db=args.database, charset="utf8mb4", autocommit=False)


def pending_tasks(args) -> list:
    conn = connect(args)
    try:
        cur = conn.cursor()
        cur.execute(f"SELECT id, url FROM `{TASK_TABLE}` WHERE batch_status = 0 ORDER BY id")
        return list(cur.fetchall())
    finally:
        conn.close()


def item_json(item: dict) -> str:
    # As batchd writes its items (batchd/codec.py plain_json), so both store the same bytes.
    return json.dumps(item, ensure_ascii=False, separators=(",", ":"))


def store(conn, rows: list) -> None:
    """The rows' items, then their tasks done: one INSERT, one UPDATE, one commit."""
    if not rows:
        return
    cur = conn.cursor()
    cur.executemany(f"INSERT INTO `{ITEM_TABLE}` (batch_id, task_id, request_seq, item_seq, item) "
                    "VALUES (%s, %s, %s, %s, %s)", rows)
    ids = [row[1] for row in rows]
    cur.execute(f"UPDATE `{TASK_TABLE}` SET batch_status = {DONE} WHERE id IN ({', '.join(['%s'] * len(ids))})",
                ids)
    conn.commit()


def crawl(tasks: collections.deque, args, failures: list) -> None:
    """One thread: take a task, fetch, parse, keep the item; store every FLUSH_ROWS."""
    session, conn, rows = requests.Session(), connect(args), []
    try:
        while True:
            try:
                task_id, url = tasks.popleft()      # atomic: the threads share the deque
            except IndexError:
                break
            response = session.get(url, timeout=REQUEST_TIMEOUT)
            response.raise_for_status()
            item = {"url": url, **page_fields(parsel.Selector(text=response.text))}
            rows.append((BATCH_ID, task_id, 0, 0, item_json(item)))
            if len(rows) >= FLUSH_ROWS:
                store(conn, rows)
                rows = []
        store(conn, rows)
    except Exception:
        failures.append(traceback.format_exc())
    finally:
        conn.close()
        session.close()


def crawl_share(share: list, args) -> None:
    """One process: its share of the tasks, crawled by args.threads threads."""
    tasks, failures = collections.deque(share), []
    threads = [threading.Thread(target=crawl, args=(tasks, args, failures), name=f"bare-{i}")
               for i in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for failure in failures:
        print(failure, file=sys.stderr)
    sys.exit(1 if failures else 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3306)
    parser.add_argument("--user", default="root")
    parser.add_argument("--password", default="")
    parser.add_argument("--database", required=True)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    tasks = pending_tasks(args)
    fork = multiprocessing.get_context("fork")
    # Every P-th task to each process, so that each gets as many and pages of every size.
    processes = [fork.Process(target=crawl_share, args=(tasks[i::args.processes], args), name=f"bare-{i}")
                 for i in range(args.processes)]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    failed = [p.name for p in processes if p.exitcode != 0]
    print(f"bare loop: {len(tasks)} tasks, {args.processes} processes x {args.threads} threads"
          + (f"; failed: {', '.join(failed)}" if failed else ""), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
