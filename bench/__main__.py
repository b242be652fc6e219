"""The benchmarks, as one command (run from the repository's root):

    .venv/bin/python -m bench compare                       # 5,000 tasks, 3 rounds, 1x4, 1x8, 2x8 + 500 at 2x8
    .venv/bin/python -m bench compare --tasks 2000 --rounds 1 --configs 2x8 --small 0 --json

`compare` runs, in one sitting and alternating round by round, these contenders over the same local
site and the same task list, and prints one table (markdown; with --json one JSON document instead):

- `baseline`, the bare loop (bench/baseline.py): no framework. P processes (fork) share out the task
  ids; each of their T threads takes tasks from its process's list, GETs the page with requests (a
  Session per thread), parses it with parsel and stores the items with multi-row INSERTs of 200 rows,
  each with one `UPDATE ... WHERE id IN (...)` marking those tasks done, into the private MariaDB;
  the same useful work as a framework, without a queue, a lease or a guarantee;
- `mysql`, batchd on MySQL + Redis: `batchd run bench.spider:CompareSpider --once --workers P` with
  SPIDER_THREAD_COUNT=T, on the private MariaDB and a private Redis;
- `mysql-noquality`, `mysql` with the quality checks off (QUALITY_CHECKS and QUALITY_BLOCK_HOLD false):
  beside `mysql`, what the checks cost (compare the rows' worker CPU ms per task, which load moves
  far less than the rates);
- `sqlite`, the same on one SQLite file (STORE=sqlite:///...);
- `tree`, with `--tree PATH`: `mysql` importing batchd from PATH (a `git worktree add` of an older
  commit, say; the bench and its spider stay this checkout's), so that a change is judged against the
  code before it in the same sitting, where the bare loop's own rate drifts from one sitting to the next:

      git worktree add /tmp/before 1d1c047
      .venv/bin/python -m bench compare --tasks 10000 --rounds 6 --configs 2x8 --small 0 \
          --contenders baseline,mysql,tree --tree /tmp/before

The bare loop and batchd's spider (bench/spider.py) parse the same fields (bench/fields.py) and
store one item per page in the same table (batchd's default item table, `crawl_task_item`). Each
run starts on a fresh database (or file) holding N pending tasks; it is timed from its process's
start to its exit, then read back: N tasks done and N items stored, or the bench fails loudly.
Before the first run the bench byte-compiles batchd/ and bench/ (as installing the package does):
a checkout run with PYTHONDONTWRITEBYTECODE would otherwise compile them at each start.

The site (bench/site.py): documentation-like pages of about 95 KB (head with meta, link and script
tags, a nav of 100 links, headings, 30 to 60 paragraphs with inline markup, code blocks, a table, a
footer), made deterministically from each page's number. nginx serves them when `shutil.which` finds
it (static files, a config and a port of the bench's own, a child process stopped at the end), the
built-in asyncio server (pages in memory, HTTP/1.1 keep-alive, Content-Length) otherwise; the output
says which. The servers: a private mariadbd (tests/servers.py, a 512M buffer pool) and a private
redis-server, started when a contender needs them, so that their counters see nothing else.

Configurations: PROCESSESxTHREADS (the bare loop's processes and threads, batchd's --workers and
SPIDER_THREAD_COUNT), each at --tasks tasks, then a small batch of --small tasks at 2x8. batchd runs
with BATCH_MONITOR_INTERVAL=--monitor-interval (1 s, as bench/batch.py) and every other setting at
its default.

The columns (medians over the rounds; peaks for memory):
- tasks/s: N / (exit - start), median (min-max);
- x bare loop: the median of each round's ratio to the bare loop's run of the same configuration;
- CPU ms/task: user + system CPU of the contender's whole process tree (os.wait4's rusage of its root,
  which holds every child it reaped) / N; cores busy: the same CPU / the run's time (2.0 would be
  both cores of a 2-core machine all the time: below that, the tree waited); the JSON also has it by
  role (`cpu_worker_ms_per_task`: every worker, or the bare loop's processes; `cpu_master_ms_per_task`,
  `cpu_supervisor_ms_per_task`), from /proc at the last sample of each process (so short of its last
  0.2 s);
- DB servers CPU ms/task: the private mariadbd's and redis-server's CPU during the run / N (mariadbd's
  from /proc, in clock ticks of 10 ms; Redis's from its own INFO `used_cpu_user` + `used_cpu_sys`, in
  microseconds); the JSON also has each server's alone (`mariadbd_cpu_us_per_task`,
  `redis_cpu_us_per_task`, microseconds);
- Redis round trips/task: requests the private Redis answered (INFO `total_writes_processed`: a
  command, a pipeline or a Lua script is one) / N; the JSON also has `redis_commands_per_task`
  (`total_commands_processed`, which counts each redis.call() inside a script);
- MySQL statements/task: the private mariadbd's `Questions` (statements sent by clients) / N;
- peak RSS MB: the resident set of every process of the tree, sampled every 0.2 s from /proc: the
  largest worker, the master (the bare loop's parent), batchd's supervisor (the JSON has the peak
  PSS and private set of each role too);
- worker peak PSS / private MB: of the same largest worker (the bare loop's largest process), from
  /proc/<pid>/smaps_rollup: its proportional set (each page it shares with the other processes of
  the tree, the modules its parent loaded before the fork above all, counted divided by their
  sharers) and its private set (Private_Clean + Private_Dirty: what it alone holds);
- batch opened s (batchd): from the process's start to the master's `batch N opened` line, stamped
  as it came out of the pipe;
- first fetch s: from the process's start to the site's first page hit;
- last fetch -> last write-back s: from the site's last page hit to the last task's write-back. The
  write-back's moment is the database's: a trigger stamps a `done_at` column with the microsecond
  clock as a task becomes done (the same trigger on every contender's table);
- close delay s (batchd): from the last task's write-back to the master's `batch N finished` line;
- exit after last write-back s: from that moment to the process tree's exit.

Options: --tasks N (5000), --rounds R (3), --configs 1x4,1x8,2x8, --small 500 (0: none),
--contenders baseline,mysql,sqlite, --site nginx|builtin|auto (auto), --monitor-interval 1,
--setting NAME=VALUE (a batchd setting for every batchd run, repeatable: to measure what a feature
costs, say `--setting DOMAIN_RATE_LIMIT=100000`), --json.
"""
import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    compare = commands.add_parser("compare", help="batchd against the bare loop, round by round",
                                  description="batchd against the bare loop: see `python -m bench --help` "
                                              "and bench/__main__.py")
    compare.add_argument("--tasks", type=int, default=5000, help="tasks per run (5000)")
    compare.add_argument("--rounds", type=int, default=3, help="rounds (3)")
    compare.add_argument("--configs", default="1x4,1x8,2x8", help="PROCESSESxTHREADS,... (1x4,1x8,2x8)")
    compare.add_argument("--small", type=int, default=500, help="tasks of the small batch at 2x8 (500; 0: none)")
    compare.add_argument("--contenders", default="baseline,mysql,sqlite", help="baseline,mysql,sqlite (also mysql-noquality, tree)")
    compare.add_argument("--site", choices=("auto", "nginx", "builtin"), default="auto",
                         help="who serves the pages (auto: nginx when installed)")
    compare.add_argument("--monitor-interval", type=float, default=1.0, help="batchd's BATCH_MONITOR_INTERVAL (1)")
    compare.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                         help="a batchd setting for every batchd run (repeatable)")
    compare.add_argument("--tree", metavar="PATH", help="another tree's batchd (a worktree of an older commit) as "
                         "the contender `tree`, on MySQL + Redis")
    compare.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    recrawl = commands.add_parser("recrawl", help="three batches of one site: all new, none changed, 10 %% changed",
                                  description="re-crawls with conditional requests: see bench/recrawl.py")
    recrawl.add_argument("--pages", type=int, default=2000, help="pages of the site, tasks per batch (2000)")
    recrawl.add_argument("--changed", type=float, default=0.1, help="share of the pages changed for batch 3 (0.1)")
    recrawl.add_argument("--config", default="2x8", help="PROCESSESxTHREADS: --workers x SPIDER_THREAD_COUNT (2x8)")
    recrawl.add_argument("--store", choices=("mysql", "sqlite"), default="mysql", help="MySQL + Redis, or SQLite")
    recrawl.add_argument("--monitor-interval", type=float, default=1.0, help="batchd's BATCH_MONITOR_INTERVAL (1)")
    recrawl.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    archive = commands.add_parser("archive", help="ARCHIVE off against on: worker CPU and bytes written",
                                  description="what keeping every page costs (issue 36): see bench/archive.py")
    archive.add_argument("--pages", type=int, default=2000, help="pages of the site, tasks per run (2000)")
    archive.add_argument("--config", default="2x8", help="PROCESSESxTHREADS: --workers x SPIDER_THREAD_COUNT (2x8)")
    archive.add_argument("--rounds", type=int, default=2, help="rounds, off and on in turns (2)")
    archive.add_argument("--store", choices=("mysql", "sqlite"), default="mysql", help="MySQL + Redis, or SQLite")
    archive.add_argument("--monitor-interval", type=float, default=1.0, help="batchd's BATCH_MONITOR_INTERVAL (1)")
    archive.add_argument("--export-rows", type=int, default=1_000_000,
                         help="rows of each item table batchd export writes out (1000000; 0: not measured)")
    archive.add_argument("--export-stores", default="mysql,sqlite", help="the export's stores, of mysql,sqlite (both)")
    archive.add_argument("--export-sample", type=float, default=0.1, help="seconds between two RSS samples (0.1)")
    archive.add_argument("--export-only", action="store_true", help="the export measure alone: no site, no crawl")
    archive.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    render = commands.add_parser("render", help="rendered pages: batchd against a bare Playwright loop and scrapy-playwright",
                                 description="rendered pages (issue 35): see bench/render.py")
    render.add_argument("--pages", type=int, default=120, help="pages of the site, tasks of the batch (120)")
    render.add_argument("--workers", type=int, default=2, help="batchd's --workers (2)")
    render.add_argument("--render-concurrency", type=int, default=2, help="batchd's RENDER_CONCURRENCY (2)")
    render.add_argument("--concurrency", type=int, help="pages at once of the bare loop and scrapy-playwright "
                        "(RENDER_CONCURRENCY)")
    render.add_argument("--only", default="batchd,bare,scrapy", help="contenders, of batchd,bare,scrapy (all)")
    render.add_argument("--rounds", type=int, default=1, help="rounds, the contenders in turn (1): the medians")
    render.add_argument("--kills", default="worker,supervisor",
                        help="batchd runs SIGKILLed a third of the way in, of worker,supervisor (both; none: none)")
    render.add_argument("--auto", action="store_true", help='render="auto" against render=True, 1 host of 5 dynamic')
    render.add_argument("--store", choices=("sqlite", "mysql"), default="sqlite",
                        help="batchd's store: one SQLite file, or the machine's MariaDB and Redis (sqlite)")
    render.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    dedup = commands.add_parser("dedup", help="the request filter: exact against bloom at 1 M and 10 M fingerprints",
                                description="REQUEST_FILTER exact against bloom (issue 37): see bench/dedup.py")
    dedup.add_argument("--sizes", default="1000000,10000000", help="fingerprints a filter is told (1000000,10000000)")
    dedup.add_argument("--contenders", default="exact,bloom", help="of exact,bloom,bloom-scaled (exact,bloom)")
    dedup.add_argument("--error-rate", type=float, default=0.001, help="REQUEST_FILTER_ERROR_RATE (0.001)")
    dedup.add_argument("--timed", type=int, default=200_000, help="requests of a size through the worker's "
                       "filter path, timed (200000); the rest are filled pipelined")
    dedup.add_argument("--rounds", type=int, default=4, help="rounds of the timed part, the contenders in turn (4)")
    dedup.add_argument("--threads", type=int, default=4, help="threads of the timed part: SPIDER_THREAD_COUNT (4)")
    dedup.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    follow = commands.add_parser("follow", help='whether "seen in an earlier batch" pays for incremental follow-crawls',
                                 description="REQUEST_FILTER_ACROSS_BATCHES against refetching and revalidating "
                                             "(issue 37): see bench/follow.py")
    follow.add_argument("--indexes", type=int, default=20, help="index pages a batch crawls (20)")
    follow.add_argument("--links", type=int, default=50, help="articles an index page links to (50)")
    follow.add_argument("--new", type=float, default=0.1, help="the share of batch 2's articles that are new (0.1)")
    follow.add_argument("--threads", type=int, default=8, help="SPIDER_THREAD_COUNT (8)")
    follow.add_argument("--rounds", type=int, default=3, help="rounds, the contenders in turn (3): the medians")
    follow.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    args = parser.parse_args(argv)
    if args.command == "follow":
        if min(args.indexes, args.links, args.threads, args.rounds) < 1 or not 0 <= args.new <= 1:
            parser.error("--indexes, --links, --threads and --rounds must be at least 1, --new between 0 and 1")
        from bench.follow import main as follow_main
        return follow_main(args)
    if args.command == "dedup":
        if min(args.timed, args.rounds, args.threads) < 1 or not 0 < args.error_rate < 1:
            parser.error("--timed, --rounds and --threads must be at least 1, --error-rate between 0 and 1")
        from bench.dedup import main as dedup_main
        return dedup_main(args)
    if args.command == "render":
        if args.pages < 3 or min(args.workers, args.render_concurrency, args.concurrency or 1, args.rounds) < 1:
            parser.error("--pages must be at least 3, --workers, --rounds and the concurrencies at least 1")
        from bench.render import main as render_main
        return render_main(args)
    if args.command == "archive":
        if args.pages < 1 or args.rounds < 1:
            parser.error("--pages and --rounds must be at least 1")
        if args.export_rows < 0 or not set(args.export_stores.split(",")) <= {"mysql", "sqlite"} \
                or args.export_sample <= 0 or (args.export_only and not args.export_rows):
            parser.error("--export-rows must be 0 or more (more with --export-only), --export-stores of mysql,sqlite, "
                         "--export-sample above 0")
        from bench.archive import main as archive_main
        return archive_main(args)
    if args.command == "recrawl":
        if args.pages < 10 or not 0 < args.changed < 1:
            parser.error("--pages must be at least 10, --changed between 0 and 1")
        from bench.recrawl import main as recrawl_main
        return recrawl_main(args)
    if args.tasks < 1 or args.rounds < 1 or args.small < 0:
        parser.error("--tasks and --rounds must be at least 1, --small at least 0")

    from bench.compare import compare, markdown, print_report
    return print_report(compare, args, markdown, "compare")


if __name__ == "__main__":
    sys.exit(main())
