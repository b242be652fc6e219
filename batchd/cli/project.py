"""First steps: `batchd demo` (a whole batch on a bundled site), `batchd init` (a starter spider
and config), `batchd tasks add|import|import-sitemap` (tasks into the task table).

`tasks add [SPIDER] URL...`, `tasks import [SPIDER] FILE.csv` and `tasks import-sitemap [SPIDER] URL...` name the
spider as every other verb does.
Their `--spider SPIDER` of old still works, unlisted, for the scripts that use it (TaskInputParser).
"""
import argparse
import re

from ..config import check_identifier
from ..errors import ExitCode
from ..sitemaps.sitemap_import import import_sitemaps
from .arguments import VerbGroup, add_verbs, runtime_from_args, spider_and_config, workers_option
from .starter import next_steps, write_starter
from .task_import import add_urls, import_csv

VERBS = VerbGroup()
verb = VERBS.verb
TASKS = VerbGroup()       # the actions of `batchd tasks`

# `path/file.py:Class` or `module:Class`: a URL's `host:8080/...` or `scheme://` is none.
SPIDER_PATH = re.compile(r"[^\s]+:[A-Za-z_][\w.]*")
TASK_EXITS = ((ExitCode.OK, "added (duplicates, and with --skip-bad the bad rows, left out and counted)"),
              (ExitCode.DATAERR, "bad rows, or a value the database refused: nothing added"),
              ExitCode.UNAVAILABLE, ExitCode.CONFIG)


# -- first steps: demo, init, tasks
def demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", default="batchd-demo", metavar="FOLDER",
                        help="where the demo's SQLite file, config and log go (default: ./batchd-demo)")
    workers_option(parser, 2)


@verb("demo", "crawl a bundled site: no network, MySQL or Redis needed", demo_arguments,
      examples=("batchd demo", "batchd demo --dir /tmp/demo --workers 4"),
      exits=((ExitCode.OK, "the batch ran to its end (one task fails on purpose)"), ExitCode.CONFIG))
def demo_verb(args: argparse.Namespace) -> int:
    from .demo.run import run_demo
    return run_demo(args.dir, workers=args.workers)


def init_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", nargs="?", default=".", metavar="FOLDER",
                        help="where to write spider.py and batchd.toml (default: here)")
    parser.add_argument("--force", action="store_true", help="overwrite existing files")


@verb("init", "write a starter spider and a config file into FOLDER", init_arguments,
      examples=("batchd init myproject",),
      exits=((ExitCode.OK, "written"), (ExitCode.CONFIG, "a file is there already (--force overwrites it)")))
def init_verb(args: argparse.Namespace) -> int:
    write_starter(args.folder, force=args.force)
    print(next_steps(args.folder))
    return ExitCode.OK


class TaskInputParser(argparse.ArgumentParser):
    """The parser of `tasks add` and `tasks import`, which settles what argparse cannot: a first URL that
    argparse took for the optional SPIDER goes back to the URLs, and the unlisted `--spider SPIDER`
    names the spider as SPIDER does (not both)."""

    def parse_known_args(self, args=None, namespace=None):
        parsed, extras = super().parse_known_args(args, namespace)
        if getattr(parsed, "urls", None) is not None and parsed.spider and not SPIDER_PATH.fullmatch(parsed.spider):
            parsed.urls, parsed.spider = [parsed.spider] + parsed.urls, None
        if getattr(parsed, "spider_option", None):
            if parsed.spider:
                self.error(f"the spider is named twice: {parsed.spider} and --spider {parsed.spider_option}")
            parsed.spider = parsed.spider_option
        return parsed, extras


def task_input(parser: argparse.ArgumentParser) -> None:
    """What add and import take after their input."""
    column_option(parser)
    parser.add_argument("--skip-bad", action="store_true",
                        help="add the good rows and count the bad ones (default: a bad row adds nothing)")
    parser.add_argument("--allow-duplicates", action="store_true",
                        help="add a URL the task table already holds, or that the input repeats")
    parser.add_argument("--spider", dest="spider_option", metavar="SPIDER", help=argparse.SUPPRESS)


def column_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--column", default="url", metavar="NAME",
                        help="the task table's column for the URL (default: url)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    spider_and_config(parser)
    parser.add_argument("urls", nargs="+", metavar="URL",
                        help="a task's URL: absolute http:// or https://, one task each")
    task_input(parser)


def import_arguments(parser: argparse.ArgumentParser) -> None:
    spider_and_config(parser)
    parser.add_argument("file", metavar="FILE.csv",
                        help="a UTF-8 CSV file: a header row naming the task table's columns (one of them the URL's, "
                             "--column), then a task a row")
    task_input(parser)


def sitemap_arguments(parser: argparse.ArgumentParser) -> None:
    spider_and_config(parser)
    parser.add_argument("urls", nargs="+", metavar="URL",
                        help="a sitemap, a sitemap index (either may be gzipped) or a robots.txt whose Sitemap: "
                             "lines name them")
    column_option(parser)
    parser.add_argument("--spider", dest="spider_option", metavar="SPIDER", help=argparse.SUPPRESS)


def tasks_arguments(parser: argparse.ArgumentParser) -> None:
    add_verbs(parser.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=TaskInputParser),
              TASKS)


@verb("tasks", "load tasks into the task table (add, import, import-sitemap)", tasks_arguments,
      examples=("batchd tasks add crawl_task.py:CrawlTask https://example.com/", "batchd tasks import tasks.csv"),
      exits=TASK_EXITS)
def tasks_verb(args: argparse.Namespace) -> int:
    """Absolute http(s) URLs that fit the column, no duplicates; a missing task table is made (task_import.py)."""
    runtime = runtime_from_args(args)
    column = check_identifier(args.column, "--column")
    load = add_urls if args.action == "add" else import_csv
    report = load(runtime, args.urls if args.action == "add" else args.file, column=column,
                  skip_bad=args.skip_bad, allow_duplicates=args.allow_duplicates)
    return report.exit_code


TASKS.verb("add", "add tasks to the spider's task table, one per URL", add_arguments,
           examples=("batchd tasks add crawl_task.py:CrawlTask https://example.com/ https://example.org/",
                     "batchd tasks add https://example.com/ --skip-bad"), exits=TASK_EXITS)(tasks_verb)
TASKS.verb("import", "add tasks from a CSV file whose header names the columns", import_arguments,
           examples=("batchd tasks import crawl_task.py:CrawlTask tasks.csv", "batchd tasks import tasks.csv --skip-bad"),
           exits=TASK_EXITS)(tasks_verb)


@TASKS.verb("import-sitemap", "add a task for each new URL of sitemaps (robots.txt's, indexes)",
            sitemap_arguments,
            examples=("batchd tasks import-sitemap https://example.com/robots.txt",
                      "batchd tasks import-sitemap crawl_task.py:CrawlTask https://example.com/sitemap.xml.gz"),
            exits=((ExitCode.OK, "every sitemap read; new URLs added, the others counted"),
                   (ExitCode.FAILURE, "a sitemap could not be read (each named in a line); the others' URLs added"),
                   ExitCode.UNAVAILABLE, ExitCode.CONFIG))
def sitemap_verb(args: argparse.Namespace) -> int:
    """Streams the sitemaps into the task table (sitemaps/sitemap_import.py)."""
    runtime = runtime_from_args(args)
    report = import_sitemaps(runtime.settings, runtime.store, runtime.layout, args.urls,
                             column=check_identifier(args.column, "--column"))
    return ExitCode.FAILURE if report.failed else ExitCode.OK
