"""`python -m bench.quality_hosts`: what the master's quality judgement of one batch over many hosts costs
in memory. Run from the repository's root (MariaDB at 127.0.0.1:3306, Redis at 127.0.0.1:6379):

    .venv/bin/python -m bench.quality_hosts                          # 10,000 hosts, HOST_STATS_TOP 50 and 10,000
    .venv/bin/python -m bench.quality_hosts --hosts 200 --top 50 --json

For each HOST_STATS_TOP: a fresh database and namespace (bench/batch.py's Place), then 4 batches one after
the other, each of `--hosts` hosts of `--pages` pages: the pages go through the worker's real QualityTally
(a distinct body per page, one item of bench/fields.py's shape) into two workers' BatchStats, flushed by the
real StatsFlusher every `--flush-every` pages per worker, as workers would, into the batch's per-host table in
Redis. The first 3 batches are judged and closed as the master does (their records are the baseline); the
4th is judged in a fresh process (`--judge`), which reports its peak RSS (VmHWM) before and after the
judgement, then in another the tracemalloc peak of the judgement itself (QualityJudge.judge, and the record's
JSON written to the store). HOST_STATS_TOP bounds the hosts a batch's table keeps by name (the rest are summed as "(other)"), so
the default 50 keeps the judgement small whatever the hosts; a user may raise it, hence both.
"""
import argparse
import json
import subprocess
import sys
import time
import tracemalloc
import types

from bench.batch import LAYOUT, Place, load_urls
from batchd.backends import open_backend
from batchd.config import load_settings
from batchd.model import BatchOpening, Progress
from batchd.quality.tally import BlockMarkers, QualityTally
from batchd.quality.verdict import QualityJudge
from batchd.settle.batch_stats import BatchStats, StatsFlusher

BASELINE_BATCHES = 3
WORKERS = 2


def settings_of(place: Place, top: int):
    return load_settings(dict(place.settings, HOST_STATS_TOP=top), environ={})


def item_of(page: int) -> dict:
    """An item of bench/fields.py's shape, every field filled."""
    return {"title": f"page {page}", "description": "d", "canonical": f"/page/{page}", "nav_links": 12,
            "breadcrumbs": ["a", "b"], "h1": "h", "updated": "2026-01-01", "headings": ["x", "y"],
            "summary": "s", "paragraphs": 5, "code_blocks": 1, "table": [["1", "2"]]}


def fill(counters, settings, batch_id: int, hosts: int, pages: int, flush_every: int) -> None:
    """Every host's pages, counted by `WORKERS` workers' tallies (pages dealt round) and flushed to Redis."""
    workers = []
    for n in range(WORKERS):
        stats = BatchStats()
        tally = QualityTally(stats.inc, BlockMarkers(), "crawl_task_item")
        flusher = StatsFlusher(stats, counters, f"bench-worker-{n}", 1.0, top=settings.HOST_STATS_TOP)
        workers.append((stats, tally, flusher))
    lease = types.SimpleNamespace(batch_id=batch_id)
    counted = [0] * WORKERS
    for page in range(pages):
        for host in range(hosts):
            n = (page * hosts + host) % WORKERS
            stats, tally, flusher = workers[n]
            url = f"http://h{host}.example/page/{page}"
            stats.working_on(batch_id)
            run = types.SimpleNamespace(lease=lease, url=url, quality_host=None, items_yielded=0)
            response = types.SimpleNamespace(url=url, status_code=200,
                                             content=f"<html>{host} {page} {batch_id}</html>".encode())
            tally.answered(run, response)
            tally.item(run, item_of(page))
            tally.parsed(run, response)
            tally.task_done(run, unchanged=False)
            counted[n] += 1
            if counted[n] % flush_every == 0:
                flusher.flush()
    for _, _, flusher in workers:
        flusher.flush()


def open_batch(store, total: int):
    record = store.insert_batch(1, "day", total)
    store.record_reset(record.id, None, total, finished=True, opening=BatchOpening(mode="full"))
    return [r for r in store.recent_batches(1) if r.id == record.id][0]


def close(store, record, total: int, quality) -> None:
    store.record_outcome(record.id, quality.outcome, quality.record)
    store.update_batch(record.id, Progress(total=total, done=total, failed=0, pending=0, processing=0), is_done=True)


def sitting(hosts: int, pages: int, top: int, flush_every: int, closed: int = BASELINE_BATCHES) -> dict:
    place = Place("mysql")
    try:
        load_urls(place, ["http://h0.example/page/0"])      # the task table; the batch table comes with the store
        settings = settings_of(place, top)
        backend = open_backend(settings, place.name)
        ports = backend.master_ports()
        ports.store.open(LAYOUT)
        judge = QualityJudge(settings, ports.store, ports.counters)
        total = hosts * pages
        started = time.monotonic()
        for _ in range(closed):
            record = open_batch(ports.store, total)
            fill(ports.counters, settings, record.id, hosts, pages, flush_every)
            close(ports.store, record, total, judge.judge(record, 0))
        record = open_batch(ports.store, total)
        fill(ports.counters, settings, record.id, hosts, pages, flush_every)
        filled = time.monotonic() - started
        backend.close()
        figures = {}
        for trace in (False, True):     # RSS untraced (tracemalloc's own records would swell it), then traced
            judged = subprocess.run([sys.executable, "-m", "bench.quality_hosts", "--judge", json.dumps(place.settings),
                                     "--batch", str(record.id), "--top", str(top), *(["--trace"] if trace else [])],
                                    capture_output=True, text=True, check=True)
            figures.update(json.loads(judged.stdout))
        return dict(figures, hosts=hosts, pages=pages, top=top, closed_before=closed, fill_s=round(filled, 1))
    finally:
        place.remove()


def high_water_mb() -> float:
    """This process's peak RSS (VmHWM: getrusage's ru_maxrss would count the parent's from before exec)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def judge_alone(place_settings: str, batch_id: int, top: int, trace: bool) -> dict:
    """The 4th batch judged in this fresh process, as the master's close does (`place_settings`: the Place's, JSON)."""
    place = types.SimpleNamespace(settings=json.loads(place_settings))
    settings = settings_of(place, top)
    ports = open_backend(settings, place.settings["NAMESPACE"]).master_ports()
    ports.store.open(LAYOUT)
    rss_before = high_water_mb()
    if trace:
        tracemalloc.start()
    record = ports.store.last_batch()       # the batch closing: the newest, its quality not kept yet
    assert record.id == batch_id
    judge = QualityJudge(settings, ports.store, ports.counters)
    started = time.process_time()
    quality = judge.judge(record, 0)
    ports.store.record_outcome(record.id, quality.outcome, quality.record)
    cpu = time.process_time() - started
    if trace:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return {"tracemalloc_peak_mb": round(peak / 2**20, 1)}
    peak = high_water_mb()
    return {"hosts_judged": len(json.loads(quality.record)["hosts"]), "flags": len(quality.flags),
            "record_kb": round(len(quality.record) / 1024, 1), "rss_before_mb": round(rss_before, 1),
            "rss_peak_mb": round(peak, 1), "judge_cpu_s": round(cpu, 2)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quality_hosts", description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=10_000, help="hosts per batch (10000)")
    parser.add_argument("--pages", type=int, default=1, help="pages per host per batch (1)")
    parser.add_argument("--top", default="50,10000", help="HOST_STATS_TOP values, one sitting each (50,10000)")
    parser.add_argument("--flush-every", type=int, default=500, help="pages a worker counts between flushes (500)")
    parser.add_argument("--judge", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--closed", type=int, default=BASELINE_BATCHES,
                        help="batches closed before the one judged (3: the baseline; the master reads up to 30 records)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.judge:
        print(json.dumps(judge_alone(args.judge, args.batch, int(args.top), args.trace)))
        return 0
    rows = [sitting(args.hosts, args.pages, int(top), args.flush_every, args.closed) for top in args.top.split(",")]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print("| hosts | pages/host | HOST_STATS_TOP | hosts judged | record KB | judgement tracemalloc peak MB "
          "| RSS before / peak MB | judgement CPU s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['hosts']:,} | {r['pages']} | {r['top']:,} | {r['hosts_judged']:,} | {r['record_kb']:,} "
              f"| {r['tracemalloc_peak_mb']} | {r['rss_before_mb']} / {r['rss_peak_mb']} | {r['judge_cpu_s']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
