"""A batch's counters per host, bounded however many hosts a crawl meets (`batchd status --hosts`).

A worker counts per host in its BatchStats (settle/batch_stats.py), under names this module builds:

    host/done/<host>        attempts answered 2xx or 3xx
    host/failed/<host>      attempts answered otherwise, or with no answer
    host/le<i>/<host>       answered attempts whose time fell in LATENCY_BOUNDS[i] (a histogram bucket)

and, at each flush, sends only its HOST_STATS_TOP busiest hosts; the rest are summed into OTHER
(`fold_top`). The backend keeps per batch one table {host: {field: n}} and lets at most HOST_STATS_TOP
hosts in: a host it already has is added to, a new one beyond the cap is added to OTHER (`merge_hosts`;
the Redis port does the same in Lua). So 100,000 hosts cost a worker some names between two flushes, and
the backend HOST_STATS_TOP + 1 entries per batch, never 100,000.

`host_rows` joins the three (the counters, the gauges, the breakers) into one row per host, busiest first,
for `batchd status --hosts` and the master's supervisor's /metrics alike; `bounded_rows` keeps a number of
them and sums the rest into OTHER, so a label or a line per host stays within a known count.

The histogram's buckets are fixed, so that every worker's counts add up; p50 and p95 are read from the
sums (`percentile`: the upper bound of the bucket the rank falls in).

What is true now rather than summed (tasks set aside per host, attempts in flight) are a worker's gauges:
each publishes its own, its busiest hosts only, with a TTL; a reader sums the live ones (`sum_gauges`).
"""
import itertools
import math
from typing import Iterable, Mapping, Optional

OTHER = "(other)"         # every host beyond the cap; parentheses, which no host name has
PREFIX = "host/"
DONE, FAILED = "done", "failed"
WAITING, IN_FLIGHT = "waiting", "in_flight"
LATENCY_BOUNDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, math.inf)     # seconds, each bucket's top
BREAKERS_SHOWN = 200      # the breakers read beside the counters: the most recently changed
BUCKETS = tuple(f"le{i}" for i in range(len(LATENCY_BOUNDS)))


def host_label(netloc: str) -> str:
    """The host (and port) of a URL's netloc as counted: never the user:password a URL may carry."""
    return netloc.rpartition("@")[2].lower()


def name(field: str, host: str) -> str:
    return f"{PREFIX}{field}/{host}"


def answered_names(host: str, ok: bool, seconds: float) -> tuple:
    """The names an answered attempt adds one to: done or failed, and its latency's bucket."""
    bucket = next(i for i, top in enumerate(LATENCY_BOUNDS) if seconds <= top)
    return name(DONE if ok else FAILED, host), name(BUCKETS[bucket], host)


def split_host_counts(counts: Mapping[str, int]) -> tuple:
    """({name: n} without the host counters, {host: {field: n}})."""
    general: dict = {}
    per_host: dict = {}
    for counter, n in counts.items():
        if counter.startswith(PREFIX):
            field, _, host = counter[len(PREFIX):].partition("/")
            fields = per_host.setdefault(host, {})
            fields[field] = fields.get(field, 0) + n
        else:
            general[counter] = n
    return general, per_host


def fold_top(per_host: Mapping[str, Mapping[str, int]], top: int, activity: Iterable[str]) -> dict:
    """The `top` hosts with the largest sum of their `activity` fields, as they are; the others summed into
    OTHER."""
    ranked = sorted(per_host, key=lambda host: (-sum(per_host[host].get(f, 0) for f in activity), host))
    kept = {host: dict(per_host[host]) for host in ranked[:top] if host != OTHER}
    for host in [h for h in ranked if h not in kept]:
        _add(kept.setdefault(OTHER, {}), per_host[host])
    return kept


def merge_hosts(table: dict, per_host: Mapping[str, Mapping[str, int]], cap: int) -> None:
    """Add `per_host` into `table`: a host `table` has is added to, a new one while it holds fewer than `cap`
    hosts (OTHER aside) is let in, any other goes to OTHER."""
    for host, fields in per_host.items():
        if host not in table and (host == OTHER or len(table) - (OTHER in table) >= cap):
            host = OTHER
        _add(table.setdefault(host, {}), fields)


def gauges_of(waiting: Mapping[str, int], in_flight: Mapping[str, int]) -> dict:
    """A worker's gauges, {host: {waiting, in_flight}}, from its tasks set aside per netloc and its attempts
    in flight per host."""
    gauges: dict = {}
    for netloc, n in waiting.items():
        fields = gauges.setdefault(host_label(netloc), {})
        fields[WAITING] = fields.get(WAITING, 0) + n
    for host, n in in_flight.items():
        gauges.setdefault(host, {})[IN_FLIGHT] = n
    return gauges


def sum_gauges(gauges: Iterable[Mapping[str, Mapping[str, int]]]) -> dict:
    """The live workers' gauges ({host: {field: n}} each), added up."""
    total: dict = {}
    for per_host in gauges:
        for host, fields in per_host.items():
            _add(total.setdefault(host, {}), fields)
    return total


def percentile(fields: Mapping[str, int], q: float) -> Optional[float]:
    """The `q` quantile (0..1) of a host's latency histogram, as its bucket's upper bound; None with no
    answer counted."""
    total = sum(fields.get(bucket, 0) for bucket in BUCKETS)
    if not total:
        return None
    cumulative = itertools.accumulate(fields.get(bucket, 0) for bucket in BUCKETS)
    return next(top for top, seen in zip(LATENCY_BOUNDS, cumulative) if seen >= q * total)


def _add(into: dict, fields: Mapping[str, int]) -> None:
    for field, n in fields.items():
        into[field] = into.get(field, 0) + int(n)


def breaker_phases(breakers, limit: int = BREAKERS_SHOWN) -> dict:
    """{host: the phase of its breaker} of the `limit` hosts whose breakers (a HostBreakers port) changed most
    recently; a host with no record is closed. Keyed as the counters are: never a URL's user:password."""
    return {host_label(host): state.phase.value for host, state in breakers.states(limit).items()}


def host_rows(counts: Mapping[str, Mapping[str, int]], gauges: Mapping[str, Mapping[str, int]],
              breakers: Mapping[str, str]) -> list:
    """A row per host counted or gauged ({host, waiting, in_flight, done, failed, p50, p95, breaker}), most
    tasks waiting first, then most in flight, then most attempts; OTHER last. `breakers`: {host: phase}."""
    rows = [_host_row(host, counts.get(host, {}), gauges.get(host, {}), breakers.get(host))
            for host in set(counts) | set(gauges)]
    rows.sort(key=lambda row: (row["host"] == OTHER, -row["waiting"], -row["in_flight"],
                               -(row["done"] + row["failed"]), row["host"]))
    return rows


def bounded_rows(rows: list, top: int) -> list:
    """The first `top` of `host_rows`' rows as they are, the rest (OTHER's too) summed into one OTHER row,
    whose latencies are unknown (None) and which has no breaker."""
    kept = [row for row in rows if row["host"] != OTHER][:top]
    rest = [row for row in rows if row not in kept]
    if not rest:
        return kept
    summed = {field: sum(row[field] for row in rest) for field in (WAITING, IN_FLIGHT, DONE, FAILED)}
    return kept + [{"host": OTHER, **summed, "p50": None, "p95": None, "breaker": None}]


def _host_row(host: str, counts: Mapping[str, int], gauges: Mapping[str, int], breaker: Optional[str]) -> dict:
    return {"host": host, WAITING: gauges.get(WAITING, 0), IN_FLIGHT: gauges.get(IN_FLIGHT, 0),
            DONE: counts.get(DONE, 0), FAILED: counts.get(FAILED, 0),
            "p50": percentile(counts, 0.5), "p95": percentile(counts, 0.95), "breaker": breaker}
