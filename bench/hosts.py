"""`python -m bench.hosts`: do the fast hosts' tasks go as fast beside slow, dead, rate-limited,
refusing and throttling hosts as they do alone? Run from the repository's root:

    .venv/bin/python -m bench.hosts                                   # every mix, full size
    .venv/bin/python -m bench.hosts --mix slow,alone --scale 0.1 --json
    .venv/bin/python -m bench.hosts --mix slow,alone --scale 0.2 --tree /tmp/before   # another tree's batchd

Each mix is one `batchd run bench.spider:CompareSpider --once --workers 2` (SPIDER_THREAD_COUNT=8,
CONCURRENT_REQUESTS_PER_DOMAIN=2, BATCH_MONITOR_INTERVAL=1, every other setting at its default unless
the mix says) on a fresh task table in a private MariaDB and a private Redis (bench/compare.py's Servers,
so that their counters count this run alone), the tasks' ids in the order listed:

- `alone`: 2000 tasks over 4 fast hosts (task i on fast host i mod 4): the baseline;
- `slow`: 300 tasks on one host answering in 1 s, then the 2000 fast ones;
- `dead`: 100 tasks on a host that takes connections and never answers (REQUEST_TIMEOUT=2), then the 2000;
- `rate`: 40 tasks on a host whose robots.txt asks one request a second (Crawl-delay: 1, which every
  worker of the namespace shares; ROBOTSTXT_OBEY=true), then 40 fast tasks: 40 s in all at that rate
  (a tree that keeps Crawl-delay per worker sends one a second per worker: --crawl-delay 2 to compare);
- `many`: 1000 fast hosts of 10 tasks each, a host's 10 ids in a row (what a queue in id order makes
  hardest: the next ids leased are mostly of a host at its CONCURRENT_REQUESTS_PER_DOMAIN);
- `refused`: 100 tasks on a port nothing listens on, then the 2000;
- `429`: 100 tasks on a host answering 429 with Retry-After: 1 every time, then the 2000.

The hosts (bench/hosts_site.py) listen on loopback addresses of their own (127.0.0.2 ...), so that each
is a distinct host to batchd. --scale F multiplies every count (hosts of `many` included), at least 1.

The figures, per mix:
- per group of hosts: tasks done and failed, and `settled s`: when its last task was settled (done or
  failed), in seconds from the master's `batch N opened` line, stamped as it came out of the pipe; a
  task's settling is stamped by the database itself (a trigger, bench/compare.py's write-back clock, at
  the microsecond), so the figure costs the run nothing and is exact; the page hits the hosts saw and
  the highest rate one host of the group saw (hits a second from its first to its last);
- `fast settled s` and `x alone`: the fast hosts' settled time (the `many` mix: all its hosts'), over
  the time the `alone` run took to settle as many tasks (its k-th settling, k the mix's fast tasks;
  beyond the alone run's size, its time scaled by k / its tasks). The target is at most 1.5;
- wall s: the command's start to its exit; Redis round trips/task (the private Redis's
  `total_writes_processed`: a command, a pipeline or a script is one), MySQL statements/task
  (`Questions`), CPU ms/task (user + system of batchd's whole process tree, os.wait4's rusage).

Options: --mix (every mix, alone first), --scale (1), --workers (2), --crawl-delay (1), --threads (8), --per-domain (2),
--tree PATH (import batchd from PATH/batchd instead of this repository's; the bench and its spider stay
this repository's), --give-up SECONDS (HOST_DOWN_GIVE_UP, for trees that have it), --setting NAME=VALUE
(a batchd setting for every run, repeatable), --json. A setting is passed only when given, so that the
bench runs on trees without it. The machine's other load shows in every figure: run a mix twice before
believing a difference.
"""
import argparse
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Optional

from bench.batch import LAYOUT, Place, load_urls
from bench.compare import (FINISHED, OPENED, BatchdTree, BenchFailure, Config, Servers, ServerCounters, batchd_settings,
                           byte_compile, check_tree, clock_tasks, print_report, run_timeout, say, tree_version)
from bench.hosts_site import Hosts
from bench.probes import Run
from batchd.backends import store_from_url
from batchd.task import TaskState

MIXES = ("alone", "slow", "dead", "rate", "many", "refused", "429")
FAST_HOSTS = 4
SETTLED = (TaskState.DONE, TaskState.FAILED)


@dataclass(frozen=True)
class Part:
    """`tasks` tasks on `hosts` hosts of one kind, task i on host i mod hosts (or, `in_a_row`, each
    host's tasks one after the other)."""
    label: str
    kind: str
    hosts: int
    tasks: int
    in_a_row: bool = False
    fast: bool = False          # the group whose settled time is compared with the alone run's


@dataclass(frozen=True)
class Mix:
    name: str
    parts: tuple
    settings: dict = field(default_factory=dict)

    @property
    def tasks(self) -> int:
        return sum(part.tasks for part in self.parts)


def mixes_at(scale: float) -> dict:
    def count(n: int) -> int:
        return max(1, round(n * scale))
    fast = Part("fast", "fast", FAST_HOSTS, count(2000), fast=True)
    many = count(1000)
    return {mix.name: mix for mix in (
        Mix("alone", (fast,)),
        Mix("slow", (Part("slow", "slow", 1, count(300)), fast)),
        Mix("dead", (Part("dead", "dead", 1, count(100)), fast), {"REQUEST_TIMEOUT": "2"}),
        Mix("rate", (Part("rate", "rate", 1, count(40)), Part("fast", "fast", FAST_HOSTS, count(40), fast=True)),
            {"ROBOTSTXT_OBEY": "true"}),
        Mix("many", (Part("many", "fast", many, many * 10, in_a_row=True, fast=True),)),
        Mix("refused", (Part("refused", "refusing", 1, count(100)), fast)),
        Mix("429", (Part("429", "429", 1, count(100)), fast)),
    )}


def chosen_mixes(text: str, scale: float) -> list:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in MIXES]
    if unknown or not names:
        raise SystemExit(f"--mix: {', '.join(unknown) or '(none)'} unknown; choose among {', '.join(MIXES)}")
    made = mixes_at(scale)
    return [made[name] for name in sorted(set(names), key=MIXES.index)]     # alone first: the others need it


def host_counts(mixes: list) -> dict:
    """Hosts of each kind the sitting needs: a mix's part takes the first ones of its kind."""
    counts: dict = {}
    for mix in mixes:
        for part in mix.parts:
            counts[part.kind] = max(counts.get(part.kind, 0), part.hosts)
    return counts


def task_urls(mix: Mix, hosts: Hosts) -> tuple:
    """The URLs of the mix's tasks in id order, and each host's group (netloc -> part label)."""
    urls, group_of = [], {}
    for part in mix.parts:
        chosen: list = hosts.by_kind[part.kind][:part.hosts]
        for host in chosen:
            group_of[host.netloc] = part.label
        for i in range(part.tasks):
            host = chosen[i // (part.tasks // part.hosts)] if part.in_a_row else chosen[i % part.hosts]
            urls.append(host.url(f"/page/{len(urls)}"))
    return urls, group_of


# -- batchd, from this tree or another
class HostsBatchd(BatchdTree):
    """bench/compare.py's batchd on MySQL + Redis (from --tree when given), with the mix's settings."""

    name = "mysql"

    def __init__(self, servers: Servers, workdir: str, settings: dict, tree: Optional[str]):
        super().__init__(servers, workdir, monitor_interval=1.0, settings=settings, tree=tree)


# -- one mix
def run_mix(mix: Mix, hosts: Hosts, servers: Servers, workdir: str, args, common: dict) -> dict:
    contender = HostsBatchd(servers, workdir, {**mix_settings(args), **mix.settings, **common}, args.tree)
    config = Config(args.workers, args.threads, mix.tasks)
    urls, group_of = task_urls(mix, hosts)
    place = contender.place()
    try:
        load_urls(place, urls)
        clock_tasks(place, "mysql", SETTLED)
        counters = ServerCounters(contender)
        hosts.reset()
        run = Run(contender.command(place, config), contender.environment(place, config),
                  cwd=workdir).go(run_timeout(mix.tasks))
        counted = counters.finish()
        if run.exit_code != 0:
            raise BenchFailure(f"mix {mix.name}: exit {run.exit_code}; its last lines:\n{run.tail()}")
        settled = settled_times(place)
    finally:
        place.remove()
    return figures_of(mix, run, counted, settled, group_of, hosts)


def mix_settings(args) -> dict:
    settings = {"CONCURRENT_REQUESTS_PER_DOMAIN": str(args.per_domain)}
    if args.give_up is not None:
        settings["HOST_DOWN_GIVE_UP"] = f"{args.give_up:g}"
    return settings


def settled_times(place: Place) -> list:
    """(url, state, settled at as Unix seconds or None) of every task."""
    store = store_from_url(place.url)
    try:
        return [(url, int(state), float(at) if at is not None else None) for url, state, at in store.fetch(
            f"SELECT {store.quote('url')}, {store.quote(LAYOUT.state_field)}, "
            f"UNIX_TIMESTAMP(`done_at`) FROM {store.quote(LAYOUT.table)}")]
    finally:
        store.close()


def figures_of(mix: Mix, run: Run, counted: dict, settled: list, group_of: dict, hosts: Hosts) -> dict:
    opened, finished = run.first_line_time(OPENED), run.first_line_time(FINISHED)
    if opened is None:
        raise BenchFailure(f"mix {mix.name}: no `batch N opened` line; its last lines:\n{run.tail()}")
    by_group: dict = {part.label: [] for part in mix.parts}
    for url, state, at in settled:
        by_group[group_of[url.split("/")[2]]].append((state, at))
    groups = []
    for part in mix.parts:
        rows = by_group[part.label]
        times = [at for state, at in rows if state in SETTLED and at is not None]
        seen = hosts.hits_of(hosts.by_kind[part.kind][:part.hosts])
        groups.append({"label": part.label, "kind": part.kind, "hosts": part.hosts, "tasks": part.tasks,
                       "fast": part.fast,
                       "done": sum(state == TaskState.DONE for state, _ in rows),
                       "failed": sum(state == TaskState.FAILED for state, _ in rows),
                       "settled_s": max(times) - opened if len(times) == len(rows) else None,
                       "settled_times_s": sorted(at - opened for at in times) if part.fast else None, **seen})
    fast, tasks = fast_group({"groups": groups}), mix.tasks
    return {"mix": mix.name, "tasks": tasks, "settings": mix.settings, "groups": groups,
            "wall_s": run.ended - run.started, "batch_opened_s": opened - run.started,
            "finished_after_last_settled_s": finished - (max(at for _, _, at in settled if at) or opened)
            if finished else None,
            "fast_settled_s": fast["settled_s"], "fast_tasks": fast["tasks"],
            "cpu_ms_per_task": run.cpu_seconds * 1000 / tasks,
            "redis_round_trips_per_task": counted["round_trips"] / tasks,
            "redis_commands_per_task": counted["commands"] / tasks,
            "mysql_statements_per_task": counted["statements"] / tasks,
            "db_cpu_ms_per_task": counted["cpu"] * 1000 / tasks}


def compare_with_alone(results: list) -> None:
    """Each mix's fast settled time over the alone run's time to settle as many tasks (see the top); the
    settling times each run kept for this are dropped from the report."""
    alone = next((fast_group(r) for r in results if r["mix"] == "alone"), None)
    times = alone["settled_times_s"] if alone and alone["settled_s"] is not None else None
    for result in results:
        k, mine, theirs = result["fast_tasks"], result["fast_settled_s"], None
        if times and mine is not None:
            theirs = times[k - 1] if k <= len(times) else times[-1] * k / len(times)
        result["alone_settled_s_for_as_many"] = theirs
        result["fast_ratio_to_alone"] = mine / theirs if theirs else None
    for result in results:
        for group in result["groups"]:
            group.pop("settled_times_s")


def fast_group(result: dict) -> dict:
    return next(group for group in result["groups"] if group["fast"])


# -- the sitting
def sitting(args) -> dict:
    mixes = chosen_mixes(args.mix, args.scale)
    common = batchd_settings(args.setting)
    check_tree(args.tree, {**mix_settings(args), **common, **{n: v for mix in mixes for n, v in mix.settings.items()}},
               {"HOST_DOWN_GIVE_UP": "--give-up"})
    workdir = tempfile.mkdtemp(prefix="bench-hosts-")
    results = []
    byte_compile()
    if args.tree:
        byte_compile(os.path.abspath(args.tree), ("batchd",))
    try:
        with Hosts(host_counts(mixes), crawl_delay=args.crawl_delay) as hosts, Servers(["mysql"]) as servers:
            for mix in mixes:
                result = run_mix(mix, hosts, servers, workdir, args, common)
                results.append(result)
                say(f"mix {mix.name}: {mix.tasks} tasks, wall {result['wall_s']:.1f} s, fast settled "
                    f"{number(result['fast_settled_s'])} s")
            environment = {"batchd": tree_version(args.tree), "python": sys.version.split()[0],
                           "cpus": os.cpu_count(), **servers.describe()}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    compare_with_alone(results)
    return {"environment": environment, "scale": args.scale, "workers": args.workers, "threads": args.threads,
            "per_domain": args.per_domain, "give_up": args.give_up, "batchd_settings": common, "mixes": results}


# -- the report
def number(value, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = [f"batchd {env['batchd']}; Python {env['python']}; {env['cpus']} CPUs; {env.get('mysql')}; "
             f"{env.get('redis')}",
             f"scale {report['scale']:g}; --workers {report['workers']} x {report['threads']} threads; "
             f"CONCURRENT_REQUESTS_PER_DOMAIN={report['per_domain']}"
             + (f"; HOST_DOWN_GIVE_UP={report['give_up']:g}" if report["give_up"] is not None else "")
             + "".join(f"; {name}={value}" for name, value in report["batchd_settings"].items()),
             "", "| mix | tasks | wall s | fast settled s | × alone | Redis round trips/task | "
                 "MySQL statements/task | CPU ms/task |", "|" + " --- |" * 8]
    for r in report["mixes"]:
        lines.append(f"| {r['mix']} | {r['tasks']:,} | {number(r['wall_s'])} | {number(r['fast_settled_s'])} | "
                     f"{number(r['fast_ratio_to_alone'], 2)} | {number(r['redis_round_trips_per_task'], 2)} | "
                     f"{number(r['mysql_statements_per_task'], 2)} | {number(r['cpu_ms_per_task'])} |")
    lines += ["", "| mix | group | kind | hosts | tasks | done | failed | settled s | page hits | "
                  "highest hits/s of one host |", "|" + " --- |" * 10]
    for r in report["mixes"]:
        for g in r["groups"]:
            lines.append(f"| {r['mix']} | {g['label']} | {g['kind']} | {g['hosts']:,} | {g['tasks']:,} "
                         f"| {g['done']:,} | {g['failed']:,} | {number(g['settled_s'])} | {g['hits']:,} "
                         f"| {number(g['hits_per_s'], 2)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hosts", description=__doc__.splitlines()[0])
    parser.add_argument("--mix", default=",".join(MIXES), help=f"mixes to run ({','.join(MIXES)})")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every task and host count (1)")
    parser.add_argument("--workers", type=int, default=2, help="batchd run --workers (2)")
    parser.add_argument("--crawl-delay", type=int, default=1, help="the rate host's robots.txt Crawl-delay (1)")
    parser.add_argument("--threads", type=int, default=8, help="SPIDER_THREAD_COUNT (8)")
    parser.add_argument("--per-domain", type=int, default=2, help="CONCURRENT_REQUESTS_PER_DOMAIN (2)")
    parser.add_argument("--tree", help="a source tree whose batchd/ the runs import (e.g. a git worktree)")
    parser.add_argument("--give-up", type=float, help="HOST_DOWN_GIVE_UP, passed only when given")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                        help="a batchd setting for every run (repeatable)")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of the tables")
    args = parser.parse_args(argv)
    if not 0 < args.scale <= 10 or min(args.workers, args.threads, args.per_domain) < 1:
        parser.error("--scale must be in (0, 10], --workers, --threads and --per-domain at least 1")
    return print_report(sitting, args, markdown, "hosts")


if __name__ == "__main__":
    sys.exit(main())
