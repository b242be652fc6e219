"""A batch's counters per host (hosts/counts.py) and `batchd status --hosts`: bounded to HOST_STATS_TOP
hosts and (other), histograms that add up across workers, and a real run over two hosts on each shared store."""
import json

from batchd.hosts.counts import (BUCKETS, OTHER, answered_names, bounded_rows, fold_top, host_rows,
                                         merge_hosts, percentile, split_host_counts)
from batchd.backends import open_backend
from batchd.cli.status_text import render_hosts
from batchd.config import Settings
from harness import batch_done, wait_for
from supervised import SEED, batchd, start_batchd


def test_a_host_beyond_the_cap_folds_into_other_in_the_worker_and_in_the_store():
    per_host = {f"h{n}": {"done": n} for n in range(1, 5)}
    kept = fold_top(per_host, 3, ("done",))
    assert kept == {"h4": {"done": 4}, "h3": {"done": 3}, "h2": {"done": 2}, OTHER: {"done": 1}}
    table: dict = {}
    merge_hosts(table, {"a": {"done": 1}, "b": {"done": 1}}, 2)
    merge_hosts(table, {"c": {"done": 5}, "a": {"done": 1}, OTHER: {"failed": 2}}, 2)
    assert table == {"a": {"done": 2}, "b": {"done": 1}, OTHER: {"done": 5, "failed": 2}}


def test_rows_beyond_the_top_are_summed_into_one_other_row():
    """Each worker gauges its own busiest hosts, so their sum may name more hosts than HOST_STATS_TOP: the rows
    shown (and /metrics' label values) are bounded again, the rest summed into OTHER with the stored OTHER."""
    counts = {f"h{n}": {"done": n} for n in range(3)}
    counts[OTHER] = {"done": 100, "failed": 1}
    gauges = {f"g{n}": {"waiting": 10 + n} for n in range(4)}
    rows = host_rows(counts, gauges, {"g3": "open"})
    assert [row["host"] for row in rows] == ["g3", "g2", "g1", "g0", "h2", "h1", "h0", OTHER]
    assert rows[0]["breaker"] == "open" and rows[0]["p50"] is None
    bounded = bounded_rows(rows, 2)
    assert [row["host"] for row in bounded] == ["g3", "g2", OTHER]
    assert bounded[-1] == {"host": OTHER, "waiting": 21, "in_flight": 0, "done": 103, "failed": 1, "p50": None,
                           "p95": None, "breaker": None}
    assert bounded_rows(rows[:2], 2) == rows[:2]


def test_histograms_of_two_workers_add_up_and_give_p50_and_p95():
    one, two = {}, {}
    for seconds in [0.01] * 50:
        for name in answered_names("h", True, seconds):
            one[name] = one.get(name, 0) + 1
    for seconds in [0.3] * 45 + [7.0] * 5:
        for name in answered_names("h", seconds < 5, seconds):
            two[name] = two.get(name, 0) + 1
    table: dict = {}
    for counts in (one, two):
        merge_hosts(table, split_host_counts(counts)[1], 10)
    fields = table["h"]
    assert (fields["done"], fields["failed"], sum(fields.get(b, 0) for b in BUCKETS)) == (95, 5, 100)
    assert (percentile(fields, 0.5), percentile(fields, 0.95), percentile({}, 0.5)) == (0.05, 0.5, None)
    assert percentile(fields, 0.99) == 10.0


def test_a_crawled_host_is_shown_with_its_control_characters_escaped():
    row = {"host": "evil\x1b[2J.example", "waiting": 0, "in_flight": 0, "done": 1, "failed": 0, "p50": 0.05,
           "p95": float("inf"), "breaker": None}
    text = render_hosts({"namespace": "ns", "batch": 1, "unreachable": [], "hosts": [row], "top": 50})
    assert "\x1b" not in text and "evil\\x1b[2J.example" in text and ">30s" in text and " -" in text


def test_status_hosts_after_a_run_over_two_hosts(shared_backend, site, procs):
    near = [site.url(f"/page/{n}") for n in range(1, 5)]
    far = [site.url(f"/page/{n}").replace("127.0.0.1", "localhost") for n in range(5, 11)]
    shared_backend.create_tasks(near + far + ["http://bad\x1bhost.invalid/x"])
    proc = start_batchd(procs, shared_backend, "run", "--workers", "2", "--once", SPIDER_MAX_RETRY_TIMES=0)
    assert proc.wait(60) == 1, proc.output()[-3000:]          # the bad host's task failed: --once ends 1
    wait_for(lambda: batch_done(shared_backend), message="batch 1 closed")
    status = json.loads(batchd("status", SEED, "--hosts", "--json", backend=shared_backend).stdout)
    port = site.url("/").split(":")[2].split("/")[0]
    rows = {row["host"]: row for row in status["hosts"]}
    assert rows[f"127.0.0.1:{port}"]["done"] == 4 and rows[f"localhost:{port}"]["done"] == 6, rows
    assert rows["bad\x1bhost.invalid"]["failed"] >= 1
    assert all(row["in_flight"] == 0 and row["waiting"] == 0 for row in rows.values())   # the workers left
    assert rows[f"localhost:{port}"]["p50"] is not None
    text = batchd("status", SEED, "--hosts", backend=shared_backend).stdout
    assert text.splitlines()[1].split() == ["host", "waiting", "in", "flight", "done", "failed", "p50", "p95",
                                            "breaker"], text
    assert f"localhost:{port}" in text and "bad\\x1bhost.invalid" in text and "\x1b" not in text
    if shared_backend.kind == "mysql":       # SQLite keeps breakers in each process: none for the command to see
        import time
        from batchd.backends.mysql_redis.redis_client import connect_redis
        from batchd.backends.mysql_redis.redis_hosts import RedisHostBreakers
        client = connect_redis(shared_backend.redis_url)
        RedisHostBreakers(shared_backend.redis_url, shared_backend.namespace, client).step(
            f"user:secret@localhost:{port}", "trip", time.time(), (5, 5.0))
        client.close()
        status = json.loads(batchd("status", SEED, "--hosts", "--json", backend=shared_backend).stdout)
        rows = {row["host"]: row for row in status["hosts"]}
        assert rows[f"localhost:{port}"]["breaker"] == "open" and rows[f"127.0.0.1:{port}"]["breaker"] is None
        assert "secret" not in json.dumps(status)


def test_the_store_keeps_the_cap_counts_a_flush_once_and_sums_the_live_gauges(backend):
    """On every backend: a third host past a cap of 2 lands in (other); a flush sent again adds nothing; the
    gauges of two workers add up, and a worker's {} takes its own back."""
    store = backend.store() if backend.kind != "memory" else backend.create_tasks(["http://x.invalid/"])
    settings = backend.settings()      # (the backend's own namespace: the fixture clears it after the test)
    counters = open_backend(Settings(**settings), settings.get("NAMESPACE", "t_hosts"), store).counters
    flush = {"a": {"done": 1}, "b": {"done": 2}}
    counters.add_counts(1, {}, "w1", 1, flush, 2)
    counters.add_counts(1, {}, "w1", 1, flush, 2)                  # the same flush again: applied once
    counters.add_counts(1, {"x": 1}, "w2", 1, {"c": {"failed": 3, "le0": 1}, "a": {"done": 1}}, 2)
    assert dict(counters.host_counts(1)) == {"a": {"done": 2}, "b": {"done": 2}, OTHER: {"failed": 3, "le0": 1}}
    counters.set_host_gauges("w1", {"a": {"waiting": 2}}, 30)
    counters.set_host_gauges("w2", {"a": {"waiting": 1, "in_flight": 1}}, 30)
    assert counters.host_gauges() == {"a": {"waiting": 3, "in_flight": 1}}
    counters.set_host_gauges("w2", {}, 0)
    assert counters.host_gauges() == {"a": {"waiting": 2}}
