"""`batchd status`: where the batch stands (`--why`, `--hosts`, `--history`, `--json`, `--watch`). It changes
nothing, and makes no file: reporting/ gathers the figures, status_text.py lays them out.

It reads the spider's class attributes from its source (loader.read_spider) rather than importing it, so
that a spider that does not import (a syntax error, a missing module) still lets the operator see the
batch. Only what the source does not say plainly (a __custom_setting__ built by code, a base class of
the user's) needs the import; when that fails too, status goes on with what it read and says in one line
what it could not read; without the task table it cannot go on, and says so.
"""
import argparse
import sys
import time
from typing import Callable, Optional

from ..errors import ConfigError, ExitCode
from ..runtime import Runtime
from ..supervisor.loader import SpiderSource, build_runtime, read_spider
from ..service.systemd import setup_logging
from .arguments import (VerbGroup, config_files, config_origin, existing_store, json_option, positive,
                        spider_and_config, spider_source)
from ..reporting.status import gather_history, gather_hosts, gather_status
from ..reporting.why import gather_why
from .status_text import render_history, render_hosts, render_json, render_status, render_why

VERBS = VerbGroup()
verb = VERBS.verb

HISTORY_LENGTH = 10         # batches `batchd status --history` shows unless told


def status_arguments(parser: argparse.ArgumentParser) -> None:
    spider_and_config(parser)
    parser.add_argument("--watch", nargs="?", type=float, const=2.0, metavar="SECONDS",
                        help="refresh every SECONDS (default 2) until Ctrl-C")
    parser.add_argument("--history", nargs="?", type=positive, const=HISTORY_LENGTH, metavar="N",
                        help=f"the last N batches (default {HISTORY_LENGTH}), newest first: opened, closed, "
                             "duration, done, failed, total, items stored, mean rate")
    parser.add_argument("--hosts", action="store_true",
                        help="the batch's busiest hosts (HOST_STATS_TOP), most tasks waiting first: waiting, in flight, "
                             "done, failed, p50, p95, breaker")
    parser.add_argument("--why", action="store_true",
                        help="why the open batch is not finished: tasks pending, queued, leased by live and dead "
                             "workers, set aside per host, paused, outages, the oldest in flight, and a verdict")
    json_option(parser)


@verb("status", "where the batch stands: progress, queue, rate, ETA, workers", status_arguments,
      examples=("batchd status crawl_task.py:CrawlTask --why", "batchd status --history 5 --json"),
      exits=(ExitCode.OK, ExitCode.UNAVAILABLE, ExitCode.CONFIG))
def status_verb(args: argparse.Namespace) -> int:
    runtime, spider_note = status_runtime(args)
    if args.history:
        entries = gather_history(runtime, args.history)
        print(render_json(entries) if args.json else
              "\n".join(([f"spider   {spider_note}"] if spider_note else []) + [render_history(entries)]))
        return ExitCode.OK
    gather: Callable[[Runtime], dict] = gather_why if args.why else gather_hosts if args.hosts else gather_status
    render: Callable[[dict], str] = (render_json if args.json else render_why if args.why
                                     else render_hosts if args.hosts else render_status)
    def gathered() -> dict:
        return dict(gather(runtime), config=config_origin(args), spider=spider_note)
    if not args.watch:
        status = gathered()
        print(render(status))
        return ExitCode.UNAVAILABLE if status["unreachable"] else ExitCode.OK
    clear = "\033[H\033[J" if sys.stdout.isatty() else ""
    while True:          # Ctrl-C ends it (main() turns KeyboardInterrupt into 130)
        text = render(gathered())
        print(f"{clear}{text}\n(every {args.watch:g} s; Ctrl-C to stop)", flush=True)
        time.sleep(args.watch)


def status_runtime(args: argparse.Namespace) -> tuple:
    """(the Runtime status reads with, a line on what of the spider it could not read, or None)."""
    source, settings = spider_source(args, config_files(args), {}, read_only=True)
    setup_logging(settings.LOG_LEVEL)
    reading = read_spider(source.path)
    note: Optional[str] = reading.trouble or None
    if reading.unread and not reading.trouble:
        try:
            runtime = build_runtime(source)       # what the source does not say plainly, the class says
        except ConfigError as e:
            note = str(e)
        else:
            existing_store(runtime.settings)
            return runtime, None
    if reading.unread:
        unread = "; ".join(f"{name} ({why})" for name, why in reading.unread.items())
        if "__task_table__" not in reading.values:
            raise ConfigError(f"{note or f'spider {source.path!r}'} (status needs its __task_table__: "
                              f"{reading.unread['__task_table__']})")
        note = f"{note}; not read: {unread}, so status goes on without them" if note else f"not read: {unread}"
    runtime = _stand_in_runtime(source, reading)
    existing_store(runtime.settings)
    return runtime, note


def _stand_in_runtime(source: SpiderSource, reading) -> Runtime:
    runtime = Runtime.create(reading.stand_in(), True, source.overrides, list(source.config_files))
    runtime.store          # a store the settings do not name, or name badly: its ConfigError now
    return runtime
