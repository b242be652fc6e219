"""First steps: `batchd demo` (a whole batch on a bundled site), `batchd init` (a starter spider
and config), `batchd tasks add|import` (tasks into the task table).
"""
import argparse

from ..config import check_identifier
from ..errors import ExitCode
from .arguments import VerbGroup, config_and_store, non_negative, runtime_from_args
from .starter import next_steps, write_starter
from .task_import import add_urls, import_csv

VERBS = VerbGroup()
verb = VERBS.verb


# -- first steps: demo, init, tasks
@verb("demo", "crawl a bundled site on loopback with the supervisor, the master and 2 workers (no servers needed)",
      lambda parser: (parser.add_argument("--dir", default="batchd-demo", metavar="FOLDER",
                                          help="where the demo's SQLite file, config and log go (default: ./batchd-demo)"),
                      parser.add_argument("--workers", type=non_negative, default=2, metavar="N",
                                          help="worker processes (default: 2)")))
def demo_verb(args: argparse.Namespace) -> int:
    from .demo.run import run_demo
    return run_demo(args.dir, workers=args.workers)


@verb("init", "write a starter spider and a config file into FOLDER",
      lambda parser: (parser.add_argument("folder", nargs="?", default=".", metavar="FOLDER",
                                          help="where to write spider.py and batchd.toml (default: here)"),
                      parser.add_argument("--force", action="store_true", help="overwrite existing files")))
def init_verb(args: argparse.Namespace) -> int:
    write_starter(args.folder, force=args.force)
    print(next_steps(args.folder))
    return ExitCode.OK


def tasks_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="add tasks, one per URL", description="add tasks, one per URL")
    add.add_argument("urls", nargs="+", metavar="URL")
    load = actions.add_parser("import", help="add tasks from a CSV file whose header names the columns",
                              description="add tasks from a CSV file whose header names the columns")
    load.add_argument("file", metavar="FILE.csv")
    for action in (add, load):
        action.add_argument("--column", default="url",
                            help="the task table's column for the URL (default: url)")
        action.add_argument("--skip-bad", action="store_true",
                            help="add the good rows and count the bad ones (default: a bad row adds nothing)")
        action.add_argument("--allow-duplicates", action="store_true",
                            help="add a URL the task table already holds, or that the input repeats")
        action.add_argument("--spider", metavar="SPIDER",
                            help="path/file.py:Class or module:Class (default: SPIDER)")
        config_and_store(action)


@verb("tasks", "load tasks into the spider's task table (created if missing): add URL..., import FILE.csv; "
               "absolute http(s) URLs that fit the column, no duplicates (exit 0; 65 bad rows, nothing added)",
      tasks_arguments)
def tasks_verb(args: argparse.Namespace) -> int:
    runtime = runtime_from_args(args)
    column = check_identifier(args.column, "--column")
    load = add_urls if args.action == "add" else import_csv
    report = load(runtime, args.urls if args.action == "add" else args.file, column=column,
                  skip_bad=args.skip_bad, allow_duplicates=args.allow_duplicates)
    return report.exit_code
