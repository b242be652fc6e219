"""`batchd status` and `batchd check`: where the batch stands, and whether the config, the
connections and the task table are fit for a crawl. Neither changes anything.
"""
import argparse
import logging
import sys
import time
from typing import Callable

from ..errors import BatchdError, ExitCode
from ..download.chain import ChainContext, chain_from_settings
from ..download.host_terms import HostTerms
from ..backends.ports import claim_namespace
from ..runtime import Runtime
from .arguments import VerbGroup, positive, runtime_from_args, spider_and_config
from .status import (gather_history, gather_hosts, gather_status, render_history, render_hosts, render_json,
                     render_status)
from .why import gather_why, render_why

VERBS = VerbGroup()
verb = VERBS.verb

HISTORY_LENGTH = 10         # batches `batchd status --history` shows unless told


# -- status, check
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


class Checklist:
    """`batchd check`: one line per item, OK or the one-line reason; the first failure's exit code."""

    def __init__(self):
        self.exit_code = ExitCode.OK

    def item(self, name: str, action: Callable[[], tuple], needs: object = True):
        """Run `action` -> (value, text); returns the value, or None when it failed or was skipped."""
        if not needs:
            print(f"SKIP  {name:<11} needs the checks above")
            return None
        try:
            value, text = action()
        except BatchdError as e:
            print(f"FAIL  {name:<11} {e}")
            self.exit_code = self.exit_code or e.exit_code
            return None
        print(f"OK    {name:<11} {text}")
        return value


@verb("check", "check the config, the connections, the task table and its columns, the index",
      spider_and_config)
def check_verb(args: argparse.Namespace) -> int:
    logging.getLogger("batchd.store").setLevel(logging.ERROR)    # the index line says it, once
    checks = Checklist()
    runtime = checks.item("config", lambda: _checked_runtime(args))
    reached = checks.item("store", lambda: (True, _reach_store(runtime)), needs=runtime)
    queue = checks.item("queue", lambda: (True, _reach_queue(runtime)), needs=runtime)
    opened = checks.item("task table", lambda: (True, _open_task_table(runtime)), needs=reached)
    checks.item("index", lambda: (True, _state_index(runtime)), needs=opened)
    checks.item("namespace", lambda: (True, _namespace_owner(runtime)), needs=opened and queue)
    checks.item("downloader", lambda: (True, _middleware_chain(runtime)), needs=queue)
    if runtime is not None:
        _host_terms(runtime)
    return checks.exit_code


def _host_terms(runtime: Runtime) -> None:
    """The terms in force: the global ones, then one line per [hosts] table (proxies redacted)."""
    terms = HostTerms.from_settings(runtime.settings)
    print(f"TERMS {'every host':<11} {terms.defaults.describe()}")
    for pattern, table in terms.patterns.items():
        print(f"TERMS {pattern:<11} {table.describe()}")


def _checked_runtime(args: argparse.Namespace) -> tuple:
    runtime = runtime_from_args(args)
    return runtime, (f"{type(runtime.spider).__name__}: task table {runtime.layout.table}, "
                     f"namespace {runtime.namespace}")


def _reach_store(runtime: Runtime) -> str:
    runtime.store.ping()
    return runtime.store.describe()


def _reach_queue(runtime: Runtime) -> str:
    runtime.backend.leases.ping()
    return runtime.backend.leases.describe()


def _open_task_table(runtime: Runtime) -> str:
    layout = runtime.layout
    runtime.store.open(layout)
    hosts = f", hosts from `{layout.host_field}` (BATCH_TASK_HOST_FIELD)" if layout.host_field else ""
    return f"`{layout.table}` with `{layout.id_field}`, `{layout.state_field}`, `{layout.time_field}`{hosts}"


def _namespace_owner(runtime: Runtime) -> str:
    identity = claim_namespace(runtime.backend.namespaces, runtime.store, runtime.layout, runtime.namespace,
                               "check", record=False)
    return f"{runtime.namespace} serves {identity}"


def _middleware_chain(runtime: Runtime) -> str:
    """DOWNLOADER_MIDDLEWARES as a worker would load it (with these settings: links they leave idle are out)."""
    context = ChainContext(runtime.settings, spider=runtime.spider, threads=runtime.settings.SPIDER_THREAD_COUNT,
                           host_rates=runtime.backend.host_rates(runtime.namespace))
    chain = chain_from_settings(context)
    names = " > ".join(type(link).__name__ for link in chain.middlewares) or "no link"
    chain.close()
    return f"middlewares {names}"


def _state_index(runtime: Runtime) -> str:
    layout = runtime.layout
    fix = runtime.store.missing_state_index(layout)
    if fix:
        raise BatchdError(f"`{layout.state_field}` has no index, so every patrol scans the whole table; run: {fix}")
    if layout.host_field:     # the claim reads the host column with the rows the state index finds
        return f"`{layout.state_field}` is indexed; claims across hosts need no index on `{layout.host_field}`"
    return f"`{layout.state_field}` is indexed"
