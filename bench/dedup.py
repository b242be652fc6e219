"""The request filter at scale (issue 37): REQUEST_FILTER = "exact" against "bloom", in one sitting.

    .venv/bin/python -m bench dedup                               # 1 M and 10 M fingerprints
    .venv/bin/python -m bench dedup --sizes 1000000 --rounds 6 --json

For each size N, each filter (`--contenders`; `bloom-scaled` is bloom with REQUEST_FILTER_CAPACITY at N/10, so
that three or four layers are added on the way) is told N fingerprints of distinct URLs, every one new: a
fingerprint the filter takes for one it has is a false positive. They go in two ways:

- the fill: most of them, 2,000 a round trip through the port the worker holds (backends/mysql_redis: the
  exact filter's SADD and EXPIRE pipelined, the bloom filter's script told 2,000 at once), to reach N quickly
  (each fingerprint the sha1 of its URL: as new as a Request's, without the canonical URL's cost);
- the timed part (`--timed`, split into `--rounds` rounds, the contenders taking turns round by round so that
  the machine's load falls on each alike): through the worker's own filter path, TaskRunner._is_duplicate,
  from `--threads` threads (a worker's SPIDER_THREAD_COUNT) each taking the next request: a Request built from
  its URL (its fingerprint: canonical URL, sha1), one round trip to Redis, answered without the network.

Measured, on a private redis-server (tests/servers.py): bytes per fingerprint (MEMORY USAGE of the filter's keys;
INFO used_memory's growth for the filters of a size together, a check on their sum), false positives (count, rate, and the ratio to
REQUEST_FILTER_ERROR_RATE), requests/s of the timed part (the median of the rounds, and its ratio to the exact
filter's), Redis round trips per request (INFO total_writes_processed), and the drop at the batch's close
(set_done: the call's ms, and the longest a PING waited while Redis freed the filter). The closing table
extrapolates each filter's bytes per fingerprint at the largest size to 100 M, beside the bloom filter's
geometry at REQUEST_FILTER_CAPACITY = 100 M.
"""
import hashlib
import statistics
import threading
import time
import uuid

from bench.compare import markdown_table, print_report, say     # (via bench.batch: tests/ on sys.path)
from batchd.backends.mysql_redis import request_filter
from batchd.backends.mysql_redis.bloom_geometry import first_layer_bytes
from batchd.backends.mysql_redis.redis_client import connect_redis
from batchd.backends.mysql_redis.redis_keys import SEEN_TTL, Keys
from batchd.backends.mysql_redis.redis_leases import RedisLeaseQueue
from batchd.config import load_settings
from batchd.http import Request
from batchd.model import Lease
from batchd.worker.task_run import TaskRun, TaskRunner
from servers import PrivateRedis

BATCH = 1
FILL_BATCH = 2000             # fingerprints a round trip while filling
EXTRAPOLATED = 100_000_000


def url(n: int) -> str:
    return f"https://shop{n % 997}.example.com/catalogue/item-{n}?ref=list&page={n % 50}"


class Contender:
    """One filter kind on the private Redis, in a namespace of its own."""

    def __init__(self, name: str, redis_url: str, size: int, error_rate: float):
        self.name, self.size = name, size
        self.capacity = max(1000, size // 10) if name == "bloom-scaled" else size
        self.settings = load_settings({"REDIS_URL": redis_url, "REQUEST_FILTER_ENABLE": True,
                                       "REQUEST_FILTER": "exact" if name == "exact" else "bloom",
                                       "REQUEST_FILTER_CAPACITY": self.capacity,
                                       "REQUEST_FILTER_ERROR_RATE": error_rate})
        self.namespace = f"dd{uuid.uuid4().hex[:8]}"
        self.client = connect_redis(redis_url)
        self.port = request_filter(self.settings, redis_url, self.namespace, self.client)
        self.runner = TaskRunner(object(), self.settings, None, None, self.port, self.namespace, "bench")
        self.run = TaskRun(lease=Lease(task_id=1, batch_id=BATCH, task={}, token="bench:1"), slot=0)
        self.told = self.false_positives = 0
        self.rates: list = []
        self.round_trips = 0

    def fill(self, first: int, last: int) -> None:
        """Fingerprints first..last-1, FILL_BATCH a round trip through the port's own calls."""
        seen = Keys(self.namespace).seen
        for start in range(first, last, FILL_BATCH):
            # (Each the sha1 of its URL: as new as a Request's fingerprint, without its canonical URL's cost.)
            fingerprints = [hashlib.sha1(url(n).encode()).hexdigest() for n in range(start, min(last, start + FILL_BATCH))]
            if self.name == "exact":
                with self.client.pipeline(transaction=False) as pipe:
                    for fingerprint in fingerprints:
                        pipe.sadd(seen, f"{BATCH}:{fingerprint}")
                        pipe.expire(seen, SEEN_TTL)
                    new = pipe.execute()[::2]
            else:
                new = self.port.first_seen_many(BATCH, fingerprints)
            self.false_positives += sum(1 for added in new if not added)
            self.told += len(new)

    def timed(self, first: int, last: int, threads: int) -> None:
        """Fingerprints first..last-1 through TaskRunner._is_duplicate, from `threads` threads."""
        numbers = iter(range(first, last))
        lock, dropped = threading.Lock(), [0]

        def serve():
            while True:
                with lock:
                    n = next(numbers, None)
                if n is None:
                    return
                if self.runner._is_duplicate(self.run, Request(url(n)), own=False):
                    with lock:
                        dropped[0] += 1

        before = self.client.info("stats")["total_writes_processed"]
        workers = [threading.Thread(target=serve) for _ in range(threads)]
        started = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        elapsed = time.perf_counter() - started
        self.round_trips += self.client.info("stats")["total_writes_processed"] - before - 1
        self.rates.append((last - first) / elapsed)
        self.false_positives += dropped[0]
        self.told += last - first

    def key_bytes(self) -> int:
        keys = Keys(self.namespace)
        if self.name == "exact":
            names = [keys.seen]
        else:
            layers = int(self.client.hget(keys.bloom(BATCH), "layers") or 0)
            names = [keys.bloom(BATCH)] + [keys.bloom_layer(BATCH, layer) for layer in range(layers)]
        return sum(self.client.memory_usage(name, samples=0) or 0 for name in names)

    def drop(self) -> tuple:
        """The batch's close (set_done): the call's ms, and the longest a PING waited meanwhile and after (ms)."""
        leases = RedisLeaseQueue(self.settings.REDIS_URL, self.namespace, self.client)
        pinger, longest, stop = connect_redis(self.settings.REDIS_URL), [0.0], threading.Event()

        def ping():
            while not stop.is_set():
                started = time.perf_counter()
                pinger.ping()
                longest[0] = max(longest[0], time.perf_counter() - started)

        watcher = threading.Thread(target=ping)
        watcher.start()
        started = time.perf_counter()
        leases.set_done(BATCH)
        call = time.perf_counter() - started
        deadline = time.monotonic() + 30
        while self.client.info("memory")["lazyfree_pending_objects"] and time.monotonic() < deadline:
            time.sleep(0.01)
        stop.set()
        watcher.join()
        pinger.close()
        return call * 1000, longest[0] * 1000


def sitting(args) -> dict:
    sizes = [int(size) for size in args.sizes.split(",")]
    names = args.contenders.split(",")
    results, growth = [], {}
    with PrivateRedis() as server:
        client = connect_redis(server.url())
        say(f"bench dedup: private Redis {client.info('server')['redis_version']} on port {server.port}")
        for size in sizes:
            timed = min(args.timed, size)
            contenders = []
            memory_before = client.info("memory")["used_memory"]
            for name in names:
                contender = Contender(name, server.url(), size, args.error_rate)
                started = time.perf_counter()
                contender.fill(0, size - timed)
                say(f"  {size:,} {name}: filled {size - timed:,} in {time.perf_counter() - started:.0f} s")
                contenders.append(contender)
            rounds = min(args.rounds, timed)
            bounds = [size - timed + timed * n // rounds for n in range(rounds + 1)]     # exactly `rounds` of them
            for first, last in zip(bounds, bounds[1:]):
                for contender in contenders:
                    contender.timed(first, last, args.threads)
            memory_after = client.info("memory")["used_memory"]
            exact_rate = next((statistics.median(c.rates) for c in contenders if c.name == "exact"), None)
            for contender in contenders:
                key_bytes = contender.key_bytes()
                drop_ms, ping_ms = contender.drop()
                rate = statistics.median(contender.rates)
                results.append({
                    "size": size, "filter": contender.name, "capacity": contender.capacity,
                    "bytes_per_fp": key_bytes / size, "key_bytes": key_bytes,
                    "false_positives": contender.false_positives, "fp_rate": contender.false_positives / size,
                    "fp_x_configured": contender.false_positives / size / args.error_rate,
                    "requests_per_s": rate, "x_exact": rate / exact_rate if exact_rate else None,
                    "requests_per_s_rounds": [round(each) for each in contender.rates],
                    "round_trips_per_request": contender.round_trips / timed,
                    "drop_ms": drop_ms, "longest_ping_ms": ping_ms, "told": contender.told})
                contender.client.close()
            # (used_memory's growth, both filters standing: each one's share is its keys' bytes.)
            growth[size] = memory_after - memory_before
            say(f"  {size:,}: used_memory grew {growth[size] / 1e6:.1f} MB for the {len(names)} filters")
        client.close()
    largest = max(sizes)
    extrapolated = {row["filter"]: row["bytes_per_fp"] * EXTRAPOLATED for row in results if row["size"] == largest}
    extrapolated["bloom at capacity 100 M (geometry)"] = first_layer_bytes(EXTRAPOLATED, args.error_rate)
    return {"error_rate": args.error_rate, "threads": args.threads, "timed": args.timed, "rounds": args.rounds,
            "rows": results, "extrapolated_100m_bytes": extrapolated,
            "used_memory_growth_per_fp": {size: grown / size for size, grown in growth.items()},
            "targets_met": all(row["bytes_per_fp"] <= 2.5 and row["fp_x_configured"] <= 2
                               and (row["x_exact"] or 0) >= 0.95
                               for row in results if row["filter"] == "bloom")}


def markdown(report: dict) -> str:
    rows = [[f"{row['size']:,}", row["filter"], f"{row['capacity']:,}", f"{row['bytes_per_fp']:.2f}",
             f"{row['false_positives']:,} ({row['fp_rate']:.5f})", f"{row['fp_x_configured']:.2f}",
             f"{row['requests_per_s']:,.0f}", f"{row['x_exact'] or 0:.2f}", f"{row['round_trips_per_request']:.2f}",
             f"{row['drop_ms']:.1f}", f"{row['longest_ping_ms']:.1f}"] for row in report["rows"]]
    lines = [f"REQUEST_FILTER_ERROR_RATE {report['error_rate']}, {report['threads']} threads, "
             f"{report['timed']:,} requests timed a size in {report['rounds']} rounds", ""]
    lines += markdown_table(["fingerprints", "filter", "capacity", "B/fp", "false positives", "x configured",
                             "requests/s", "x exact", "round trips/request", "drop ms", "longest PING ms"], rows)
    lines += [""] + markdown_table(["at 100 M fingerprints", "Redis memory"],
                                   [[name, f"{value / 1e9:.2f} GB"]
                                    for name, value in report["extrapolated_100m_bytes"].items()])
    lines += ["", f"bloom targets (<= 2.5 B/fp, FP <= 2x, >= 0.95x exact's requests/s) met: {report['targets_met']}"]
    return "\n".join(lines)


def main(args) -> int:
    return print_report(sitting, args, markdown, "dedup")
