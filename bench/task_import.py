"""`batchd tasks import` at scale: a CSV file of N rows into a fresh SQLite file (and, with --mysql URL, a fresh
MariaDB database's table), timed, with the load's Python memory peak from a second run under tracemalloc:

    .venv/bin/python -m bench.task_import                     # 100,000 rows, SQLite, 3 rounds
    .venv/bin/python -m bench.task_import --rows 1000000 --mysql mysql://root@127.0.0.1:3306/batchd_bench

Each round imports the file into a new, empty table (the one batchd makes: its url column has no index, so
duplicates are found through the load's temporary table), then the same file again into the full table (every
row a duplicate). The file's URLs are distinct, on 97 hosts. The target of issue 34: 20,000 rows/s or more on
SQLite, and a memory peak that does not grow with the file (compare --rows 10000 with --rows 100000).
"""
import argparse
import logging
import os
import statistics
import tempfile
import time
import tracemalloc
from types import SimpleNamespace

from batchd.backends import store_from_url
from batchd.cli.task_import import import_csv
from batchd.model import TaskLayout

LAYOUT = TaskLayout("crawl_task")
TARGET = 20_000     # rows/s on SQLite (issue 34)


def write_csv(path: str, rows: int) -> None:
    with open(path, "w") as f:
        f.write("url\n")
        f.writelines(f"https://site{n % 97}.example/docs/section-{n // 1000}/page-{n}.html?lang=en\n"
                     for n in range(rows))


def fresh_store(place: str, directory: str, name: str):
    """An empty store: a new SQLite file `name`.db in `directory`, or `place`'s database without the task table."""
    if place == "sqlite":
        return store_from_url(f"sqlite:///{directory}/{name}.db")
    store = store_from_url(place)
    store.execute(f"DROP TABLE IF EXISTS {store.quote(LAYOUT.table)}")
    return store


def timed_import(store, path: str) -> tuple:
    started = time.perf_counter()
    report = import_csv(SimpleNamespace(store=store, layout=LAYOUT), path)
    return time.perf_counter() - started, report


def peak_of_import(store, path: str) -> int:
    tracemalloc.start()
    try:
        import_csv(SimpleNamespace(store=store, layout=LAYOUT), path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def bench(place: str, rows: int, rounds: int, directory: str, path: str) -> dict:
    into_empty, into_full = [], []
    for round_no in range(rounds):
        store = fresh_store(place, directory, f"tasks-{round_no}")
        seconds, report = timed_import(store, path)
        assert (report.added, report.duplicates, report.bad) == (rows, 0, 0), report
        into_empty.append(rows / seconds)
        seconds, report = timed_import(store, path)
        assert (report.added, report.duplicates) == (0, rows), report
        into_full.append(rows / seconds)
        store.close()
    store = fresh_store(place, directory, f"tasks-{rounds}")
    peak = peak_of_import(store, path)
    store.close()
    return {"empty": statistics.median(into_empty), "full": statistics.median(into_full), "peak": peak}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.task_import", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mysql", metavar="URL", help="also a MariaDB database (its crawl_task table is dropped)")
    args = parser.parse_args(argv)
    logging.getLogger("batchd").setLevel(logging.ERROR)      # the second import's duplicate lines
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "tasks.csv")
        write_csv(path, args.rows)
        places = ["sqlite"] + ([args.mysql] if args.mysql else [])
        print(f"{args.rows:,} rows, {args.rounds} rounds (medians); memory: tracemalloc's peak of one more import")
        print("| store | into an empty table, rows/s | again, all duplicates, rows/s | Python memory peak |")
        print("| --- | ---: | ---: | ---: |")
        results = {}
        for place in places:
            result = results[place] = bench(place, args.rows, args.rounds, directory, path)
            name = "SQLite" if place == "sqlite" else "MariaDB"
            print(f"| {name} | {result['empty']:,.0f} | {result['full']:,.0f} | {result['peak'] / 1e6:.1f} MB |")
    verdict = "met" if results["sqlite"]["empty"] >= TARGET else "NOT met"
    print(f"target {TARGET:,} rows/s on SQLite: {verdict}")
    return 0 if verdict == "met" else 1


if __name__ == "__main__":
    raise SystemExit(main())
