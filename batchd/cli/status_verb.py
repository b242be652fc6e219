"""`batchd status`: where the batch stands (`--why`, `--hosts`, `--history`, `--json`, `--watch`). It changes
nothing: reporting/ gathers the figures, status_text.py lays them out."""
import argparse
import sys
import time
from typing import Callable

from ..errors import ExitCode
from ..runtime import Runtime
from .arguments import VerbGroup, positive, runtime_from_args, spider_and_config
from ..reporting.status import gather_history, gather_hosts, gather_status
from ..reporting.why import gather_why
from .status_text import render_history, render_hosts, render_json, render_status, render_why

VERBS = VerbGroup()
verb = VERBS.verb

HISTORY_LENGTH = 10         # batches `batchd status --history` shows unless told


def status_arguments(parser: argparse.ArgumentParser) -> None:
    spider_and_config(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
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


@verb("status", "where the batch stands: progress, queue, rate, ETA, workers per host, unflushed items",
      status_arguments)
def status_verb(args: argparse.Namespace) -> int:
    runtime = runtime_from_args(args)
    if args.history:
        entries = gather_history(runtime, args.history)
        print(render_json(entries) if args.json else render_history(entries))
        return ExitCode.OK
    gather: Callable[[Runtime], dict] = gather_why if args.why else gather_hosts if args.hosts else gather_status
    render: Callable[[dict], str] = (render_json if args.json else render_why if args.why
                                     else render_hosts if args.hosts else render_status)
    if not args.watch:
        status = gather(runtime)
        print(render(status))
        return ExitCode.UNAVAILABLE if status["unreachable"] else ExitCode.OK
    clear = "\033[H\033[J" if sys.stdout.isatty() else ""
    while True:          # Ctrl-C ends it (main() turns KeyboardInterrupt into 130)
        text = render(gather(runtime))
        print(f"{clear}{text}\n(every {args.watch:g} s; Ctrl-C to stop)", flush=True)
        time.sleep(args.watch)
