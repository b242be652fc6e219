"""`python -m bench follow`: whether "seen in an earlier batch" pays, for BATCH_MODE = "incremental"
follow-crawls (issue 37):

    .venv/bin/python -m bench follow                           # 20 index pages of 50 links, 10 % new, 3 rounds
    .venv/bin/python -m bench follow --indexes 4 --links 20 --rounds 1 --json

A site of articles (tests/httpserver.py's /versioned/<n>: an ETag and a Last-Modified, a 304 to a request
whose validators hold) and of index pages (/index/<a>-<b>: a link to each article a..b). Batch 1 crawls
`--indexes` index pages of `--links` links each: the articles 1..N, every one fetched. The spider follows every
link (REQUEST_FILTER_ENABLE) and stores an item per article. Then the same number of new index pages are added
to the task table, their links the same articles shifted by `--new` of N (10 %), and batch 2 crawls them
(BATCH_MODE = "incremental": the new index pages alone), so that most of its links lead to an article batch 1
fetched. Batch 2 is spent three ways, each contender on a database and Redis namespace of its own, the three
in turn round by round:

- `refetch`: the batch's own request filter alone: every linked article fetched again (200);
- `revalidate`: and REVALIDATE: a known article asked with its validators (304: no body, no callback);
- `across`: REQUEST_FILTER_ACROSS_BATCHES on the bloom filter: a known article not asked at all.

Measured, batch 2 alone: the requests the site answered (200s and 304s), its wall time (from the aged
record to the batch's close), this process's CPU seconds meanwhile (master and worker run here, in threads:
tests/harness.py's InProcessBatch, SPIDER_THREAD_COUNT `--threads`), the items stored, and the time a
host's pace would spend on its requests at a DOWNLOAD_DELAY of 1 s (requests x 1 s: the politeness budget).
The medians of the rounds, and each against `revalidate`, today's way to spend a re-found link.
"""
import resource
import statistics
import tempfile
import time

from bench.compare import BenchMariaDB, markdown_table, print_report, say     # (bench.compare puts tests/ on sys.path)
from harness import next_batch, spider_factory
from httpserver import TestSite
from servers import PrivateRedis
from taskdb import MysqlBackend

import batchd as mw

CONTENDERS = {
    "refetch": {},
    "revalidate": {"REVALIDATE": True},
    "across": {"REQUEST_FILTER_ACROSS_BATCHES": True, "REQUEST_FILTER": "bloom"},
}


class FollowSpider(mw.BatchSpider):
    """An index page's task: every article it links to, an item each."""

    __task_table__ = "crawl_task"

    def task_requests(self, task):
        yield mw.Request(task["url"], callback=self.parse)

    def parse(self, request, response, task):
        yield from response.follow_all(css="a.article", callback=self.parse_article)
        self.update_task(task["id"], ok=True)

    def parse_article(self, request, response, task):
        yield {"url": response.url, "title": response.css("h1::text").get()}


def index_urls(site, first_article: int, indexes: int, links: int) -> list:
    return [site.url(f"/index/{first_article + i * links}-{first_article + (i + 1) * links - 1}")
            for i in range(indexes)]


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one_run(name: str, db, redis, site, args, failed_items: str) -> dict:
    """Batch 1, then batch 2 measured, for contender `name` on a database and namespace of its own."""
    site.reset()
    backend = MysqlBackend(db.create_database(), redis.url(), failed_items)
    try:
        backend.create_tasks(index_urls(site, 1, args.indexes, args.links))
        factory = spider_factory(backend, FollowSpider, REQUEST_FILTER_ENABLE=True, BATCH_MODE="incremental",
                                 SPIDER_THREAD_COUNT=args.threads, **CONTENDERS[name])
        next_batch(backend, factory)
        articles = args.indexes * args.links
        for url in index_urls(site, 1 + round(articles * args.new), args.indexes, args.links):
            backend.add_task(url)
        items_before = len(backend.items())
        site.reset()
        cpu, started = cpu_seconds(), time.perf_counter()
        record = next_batch(backend, factory)
        wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu
        answered_200, answered_304 = site.status_counts(200), site.status_counts(304)
        return {"contender": name, "batch": record["id"], "wall_s": wall, "cpu_s": cpu,
                "articles_200": answered_200, "articles_304": answered_304,
                "requests": answered_200 + answered_304 + args.indexes,
                "items": len(backend.items()) - items_before}
    finally:
        backend.close()


def sitting(args) -> dict:
    runs = []
    with tempfile.TemporaryDirectory() as scratch, BenchMariaDB() as db, PrivateRedis() as redis, \
            TestSite() as site:
        say(f"bench follow: {args.indexes} index pages of {args.links} links, {args.new:.0%} new in batch 2")
        for round_number in range(args.rounds):
            for name in CONTENDERS:
                run = one_run(name, db, redis, site, args, f"{scratch}/failed-{name}-{round_number}.jsonl")
                say(f"  round {round_number + 1} {name}: {run['wall_s']:.2f} s, {run['requests']} requests")
                runs.append(run)
    rows = []
    for name in CONTENDERS:
        mine = [run for run in runs if run["contender"] == name]
        rows.append({"contender": name, **{measure: statistics.median(run[measure] for run in mine)
                                           for measure in ("wall_s", "cpu_s", "articles_200", "articles_304",
                                                           "requests", "items")}})
    today = next(row for row in rows if row["contender"] == "revalidate")
    for row in rows:
        row["politeness_s"] = row["requests"] * 1.0
        row["wall_x_revalidate"] = row["wall_s"] / today["wall_s"]
        row["cpu_x_revalidate"] = row["cpu_s"] / today["cpu_s"]
    return {"indexes": args.indexes, "links": args.links, "new": args.new, "threads": args.threads,
            "rounds": args.rounds, "rows": rows, "runs": runs}


def markdown(report: dict) -> str:
    rows = [[row["contender"], f"{row['requests']:,.0f}", f"{row['articles_200']:,.0f} / {row['articles_304']:,.0f}",
             f"{row['items']:,.0f}", f"{row['wall_s']:.2f}", f"{row['wall_x_revalidate']:.2f}", f"{row['cpu_s']:.2f}",
             f"{row['cpu_x_revalidate']:.2f}", f"{row['politeness_s']:,.0f} s"] for row in report["rows"]]
    return "\n".join([f"batch 2: {report['indexes']} new index pages of {report['links']} links, {report['new']:.0%} "
                      f"of the articles new; {report['threads']} threads; medians of {report['rounds']} rounds", ""]
                     + markdown_table(["batch 2", "requests", "200 / 304", "items", "wall s", "x revalidate", "CPU s",
                                       "x revalidate", "at DOWNLOAD_DELAY 1 s"], rows))


def main(args) -> int:
    return print_report(sitting, args, markdown, "follow")
