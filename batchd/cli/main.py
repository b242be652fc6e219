"""The `batchd` command (console script, and `python -m batchd`).

    batchd run [SPIDER]      supervisor + master + N workers on this host
    batchd master [SPIDER]   supervisor + master          (batchd-master.service; batchd-master@.service: --instance %i)
    batchd worker [SPIDER]   supervisor + N workers       (batchd-worker@.service: --instance %i)
    batchd reload --pid PID  check the config and the spider, then SIGHUP the supervisor (ExecReload=)
    batchd status [SPIDER]   where the batch stands (--json for scripts; --history [N]: the last N batches)
    batchd check [SPIDER]    config, connections, task table and columns, index
    batchd pause|resume      stop / go on claiming and leasing tasks in the namespace
    batchd open-batch        open the next batch now (--force: close the open one first)
    batchd retry --items     store the items dumped to FAILED_ITEMS_PATH
    batchd failed [SPIDER]   the failed tasks of a batch and why (--json for scripts)
    batchd requeue --failed  the failed tasks of the open batch back to pending
    batchd demo              a whole batch on a bundled site: no network, no MySQL, no Redis
    batchd init [FOLDER]     a starter spider and config
    batchd tasks add|import  load tasks into the task table

SPIDER is `path/file.py:Class` or `module:Class`; when omitted, BATCHD_SPIDER or SPIDER in the
config file. Exit codes (docs/architecture.md, Exit codes): 0 done, 1 items still refused (retry),
69 MySQL or Redis unreachable, 74 a disk refused a write (retry), 75 another master holds the lock,
78 configuration error; a BatchdError ends the command with one log line.

Verbs live in the VERBS registry: `@verb(name, help, arguments)` adds one, with its own
arguments and handler (a handler returns the exit code).
"""
import argparse
import logging
import multiprocessing
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from typing import Callable, Optional

from .. import __version__
from . import control, failures
from ..supervisor.child import probe
from ..config import DEFAULT_CONFIG_FILE, ENV_CONFIG, INSTANCE_ROLES, Settings, check_identifier, load_settings
from ..errors import BatchdError, ConfigError, ExitCode
from ..backends import open_store, store_url
from ..download.chain import ChainContext, chain_from_settings
from ..supervisor.loader import SpiderSource, absolute_spider_path, build_runtime, load_spider_class
from ..worker.dumps import FailedItemsFile
from .starter import next_steps, write_starter
from .task_import import add_urls, import_csv
from .status import gather_history, gather_status, render_history, render_json, render_status
from ..supervisor.daemon import RunningSupervisor, run_detached
from ..supervisor.supervisor import Plan, Supervisor
from ..process.systemd import set_process_role, setup_logging, under_systemd
from ..backends.ports import claim_namespace
from ..runtime import Runtime

log = logging.getLogger("batchd")

INSTANCE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
DEFAULT_LOG_FILE = "batchd.log"
EMBEDDED_FILE = "batchd.db"
FROM_SETTINGS = object()    # `--items` without FILE: FAILED_ITEMS_PATH
HISTORY_LENGTH = 10         # batches `batchd status --history` shows unless told


@dataclass(frozen=True)
class Verb:
    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], object]    # what it returns is ignored
    handler: Callable[[argparse.Namespace], int]


VERBS: dict = {}


def verb(name: str, help: str, arguments: Callable[[argparse.ArgumentParser], object] = lambda parser: None):
    def register(handler: Callable[[argparse.Namespace], int]):
        VERBS[name] = Verb(name, help, arguments, handler)
        return handler
    return register


# -- what every verb shares
def spider_and_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spider", nargs="?", metavar="SPIDER",
                        help="path/file.py:Class or module:Class (default: BATCHD_SPIDER, or SPIDER in the config file)")
    config_and_store(parser)


def config_and_store(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE",
                        help=f"the TOML config file (default: ${ENV_CONFIG}, else {DEFAULT_CONFIG_FILE} if it exists)")
    parser.add_argument("--store", metavar="URL",
                        help="the task store: mysql://user:pass@host:3306/db or sqlite:///PATH (default: STORE, "
                             f"else MYSQL_URL, else ./{EMBEDDED_FILE} on a terminal)")


def config_files(args: argparse.Namespace, role: Optional[str] = None) -> list:
    """The main config file, and for a named instance of a role in INSTANCE_ROLES its `ROLE-NAME.toml`
    beside it (batchd-worker@NAME reads worker-NAME.toml, batchd-master@NAME master-NAME.toml)."""
    main = args.config or os.environ.get(ENV_CONFIG)
    files = [main] if main else ([DEFAULT_CONFIG_FILE] if os.path.exists(DEFAULT_CONFIG_FILE) else [])
    instance = getattr(args, "instance", None)
    if instance and role in INSTANCE_ROLES:
        overlay = os.path.join(os.path.dirname(os.path.abspath(main or DEFAULT_CONFIG_FILE)), f"{role}-{instance}.toml")
        if os.path.exists(overlay):
            files.append(overlay)
    return [os.path.abspath(path) for path in files]


def spider_source(args: argparse.Namespace, files: list, overrides: dict) -> tuple:
    """(SpiderSource, the settings known before the spider is imported)."""
    overrides = with_store(args, files, overrides)
    settings = load_settings({}, config_files=files, overrides=overrides)
    path = args.spider or settings.SPIDER
    if not path:
        raise ConfigError("no spider: name it (batchd run path/file.py:Class), or set BATCHD_SPIDER "
                          "or SPIDER in the config file")
    return SpiderSource(absolute_spider_path(path), tuple(files), overrides), settings


def with_store(args: argparse.Namespace, files: list, overrides: dict) -> dict:
    """The command line's settings, with the store it names, or the embedded one when nothing names
    a store: `batchd.db` in the working directory, on a terminal only. Under systemd a missing store
    is a configuration error, never a silent local crawl."""
    if getattr(args, "store", None):
        return dict(overrides, STORE=args.store)
    settings = load_settings({}, config_files=files, overrides=overrides)
    if store_url(settings):
        return overrides
    if under_systemd():
        raise ConfigError("no store configured: set MYSQL_URL (and REDIS_URL), or STORE, in the config file; "
                          "under systemd batchd does not fall back to a local SQLite file")
    embedded = f"sqlite:///{os.path.abspath(EMBEDDED_FILE)}"
    if not getattr(args, "embedded_announced", False):
        args.embedded_announced = True
        setup_logging(settings.LOG_LEVEL)
        log.info("no MySQL / Redis configured: using the embedded store %s (tasks, queue and items in one "
                 "SQLite file; --store or BATCHD_STORE names another)", embedded)
    return dict(overrides, STORE=embedded)


def runtime_from_args(args: argparse.Namespace) -> Runtime:
    source, settings = spider_source(args, config_files(args), {})
    setup_logging(settings.LOG_LEVEL)
    return build_runtime(source)


# -- run, master, worker
def daemon_arguments(workers: bool, instance_help: str) -> Callable[[argparse.ArgumentParser], None]:
    def arguments(parser: argparse.ArgumentParser) -> None:
        spider_and_config(parser)
        if workers:
            parser.add_argument("--workers", type=non_negative, metavar="N",
                                help="worker processes (default: WORKERS, else the CPU count)")
        parser.add_argument("--instance", type=instance_name, metavar="NAME", help=instance_help)
        parser.add_argument("--once", action="store_true",
                            help="run / serve the current batch to completion, then exit 0 (for cron)")
        parser.add_argument("--daemon", action="store_true",
                            help="detach into the background (hosts without systemd; refused under systemd)")
        parser.add_argument("--pidfile", metavar="FILE", help="with --daemon: the pid file, locked while running")
        parser.add_argument("--log-file", metavar="FILE",
                            help=f"with --daemon: where the log goes (default: ./{DEFAULT_LOG_FILE})")
    return arguments


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text}: must be 0 or more")
    return value


def instance_name(text: str) -> str:
    if not INSTANCE_NAME.match(text):
        raise argparse.ArgumentTypeError(f"{text!r}: letters, digits, _ . - only (at most 64)")
    return text


def supervise(verb_name: str, args: argparse.Namespace) -> int:
    files = config_files(args, role=verb_name)
    workers = getattr(args, "workers", None)
    source, settings = spider_source(args, files, {} if workers is None else {"WORKERS": workers})
    plan = Plan(verb=verb_name, once=args.once, instance=args.instance)
    if args.daemon:
        return run_daemonized(args, plan, source, settings)
    if args.pidfile or args.log_file:
        raise ConfigError("--pidfile and --log-file go with --daemon")
    setup_logging(settings.LOG_LEVEL)
    return Supervisor(plan, source).run()


@verb("run", "supervisor + master + N workers on this host",
      daemon_arguments(True, "name this supervisor in logs, process titles and Redis"))
def run_verb(args: argparse.Namespace) -> int:
    return supervise("run", args)


@verb("master", "supervisor + the master only (batchd-master.service, batchd-master@.service)",
      daemon_arguments(False, "name the instance in logs, process titles and Redis; also reads "
                              "master-NAME.toml beside the config file"))
def master_verb(args: argparse.Namespace) -> int:
    return supervise("master", args)


@verb("worker", "supervisor + N workers only (batchd-worker@.service)",
      daemon_arguments(True, "name the instance in logs, process titles and Redis; also reads "
                             "worker-NAME.toml beside the config file"))
def worker_verb(args: argparse.Namespace) -> int:
    return supervise("worker", args)


# -- reload: check first, then signal (as `nginx -t` before `nginx -s reload`)
def positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text}: must be 1 or more")
    return value


def process_id(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text}: not a process id")
    return value


def reload_arguments(parser: argparse.ArgumentParser) -> None:
    spider_and_config(parser)
    parser.add_argument("--instance", type=instance_name, metavar="NAME",
                        help="the instance: ROLE-NAME.toml beside the config file is checked too")
    parser.add_argument("--role", choices=INSTANCE_ROLES, default="worker",
                        help="what the instance runs, which names its file: master-NAME.toml or "
                             "worker-NAME.toml (default: worker)")
    parser.add_argument("--pid", type=process_id, required=True, metavar="PID",
                        help="the supervisor to reload (under systemd: $MAINPID)")


@verb("reload", "check the config and the spider as the supervisor would load them, and only then send it "
                "SIGHUP (ExecReload=; exit 0 signalled, 78 configuration error, 69 PID is no batchd supervisor)",
      reload_arguments)
def reload_verb(args: argparse.Namespace) -> int:
    """The supervisor checks a SIGHUP's config too, but it can only say so in the journal: checking
    here first makes `systemctl reload` itself fail on a bad config, and leaves the supervisor alone.

    It does not wait for the supervisor's reload: the supervisor tells systemd itself (RELOADING=1,
    then READY=1 once the new children run), and this command has no channel back from it to tell
    a finished reload from a slow one."""
    set_process_role("reload")
    setup_logging()
    with RunningSupervisor(args.pid) as supervisor:
        namespace = checked_for_reload(args)
        supervisor.send(signal.SIGHUP)
    log.info("configuration and spider load (namespace %r): SIGHUP sent to the supervisor (pid %d), "
             "which replaces its children gracefully", namespace, args.pid)
    return ExitCode.OK


def checked_for_reload(args: argparse.Namespace) -> str:
    """The namespace of the spider the supervisor would load, from the same config files (with the
    instance's overlay), environment and spider path it resolves at start. The spider is loaded by
    the supervisor's own probe, in a child: the same checks and the same one-line errors, and a user
    module that exits, hangs or crashes at import cannot end this command with 0."""
    try:
        source, _ = spider_source(args, config_files(args, role=args.role), {})
        _, namespace = probe(multiprocessing.get_context("fork"), source, forget=lambda: None, tick=lambda: None)
    except ConfigError as e:
        raise ConfigError(f"reload refused, supervisor {args.pid} keeps its children: {e}") from None
    return namespace


def run_daemonized(args: argparse.Namespace, plan: Plan, source: SpiderSource, settings: Settings) -> int:
    if under_systemd():
        raise ConfigError("--daemon is for hosts without systemd: under systemd batchd runs in the "
                          "foreground (Type=notify); drop --daemon")
    if not args.pidfile:
        raise ConfigError("--daemon needs --pidfile FILE")

    def supervise_detached() -> int:
        setup_logging(settings.LOG_LEVEL, force=True)
        return Supervisor(plan, source).run()
    return run_detached(os.path.abspath(args.pidfile), os.path.abspath(args.log_file or DEFAULT_LOG_FILE),
                        supervise_detached)


# -- status, check, retry
def status_arguments(parser: argparse.ArgumentParser) -> None:
    spider_and_config(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--watch", nargs="?", type=float, const=2.0, metavar="SECONDS",
                        help="refresh every SECONDS (default 2) until Ctrl-C")
    parser.add_argument("--history", nargs="?", type=positive, const=HISTORY_LENGTH, metavar="N",
                        help=f"the last N batches (default {HISTORY_LENGTH}), newest first: opened, closed, "
                             "duration, done, failed, total, items stored, mean rate")


@verb("status", "where the batch stands: progress, queue, rate, ETA, workers per host, unflushed items",
      status_arguments)
def status_verb(args: argparse.Namespace) -> int:
    runtime = runtime_from_args(args)
    if args.history:
        entries = gather_history(runtime, args.history)
        print(render_json(entries) if args.json else render_history(entries))
        return ExitCode.OK
    render = render_json if args.json else render_status
    if not args.watch:
        status = gather_status(runtime)
        print(render(status))
        return ExitCode.UNAVAILABLE if status["unreachable"] else ExitCode.OK
    clear = "\033[H\033[J" if sys.stdout.isatty() else ""
    while True:          # Ctrl-C ends it (main() turns KeyboardInterrupt into 130)
        text = render(gather_status(runtime))
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
    return checks.exit_code


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
    return f"`{layout.table}` with `{layout.id_field}`, `{layout.state_field}`, `{layout.time_field}`"


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
    return f"`{layout.state_field}` is indexed"


# -- an operator's word to the namespace
@verb("pause", "pause the namespace: the master claims nothing, workers lease nothing and finish what they hold",
      spider_and_config)
def pause_verb(args: argparse.Namespace) -> int:
    print(control.pause(runtime_from_args(args)))
    return ExitCode.OK


@verb("resume", "resume a paused namespace", spider_and_config)
def resume_verb(args: argparse.Namespace) -> int:
    print(control.resume(runtime_from_args(args)))
    return ExitCode.OK


def open_batch_arguments(parser: argparse.ArgumentParser) -> None:
    spider_and_config(parser)
    parser.add_argument("--force", action="store_true",
                        help="close the open batch as it stands first (its unsettled tasks go to the next)")


@verb("open-batch", "open the next batch now, whatever the calendar says (exit 1 while one is open without "
                    "--force, 69 when no master opens it within 30 s)", open_batch_arguments)
def open_batch_verb(args: argparse.Namespace) -> int:
    print(control.open_batch(runtime_from_args(args), args.force))
    return ExitCode.OK


def batch_and_reason(parser: argparse.ArgumentParser) -> None:
    spider_and_config(parser)
    parser.add_argument("--batch", type=positive, metavar="N", help="the batch (default: the last one)")
    parser.add_argument("--reason", metavar="TEXT",
                        help="only the tasks whose failure reason holds TEXT (any case): 'HTTP 404', 'timeout'")


def failed_arguments(parser: argparse.ArgumentParser) -> None:
    batch_and_reason(parser)
    parser.add_argument("--limit", type=positive, default=50, metavar="N",
                        help="list at most N tasks (default 50; the summary counts them all)")
    parser.add_argument("--all", action="store_true", dest="every",
                        help="every failure record of the last batch, those of tasks requeued since too (an "
                             "earlier batch shows them all anyway)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


@verb("failed", "the failed tasks of a batch (the last by default) and why: URL, reason, attempts, host, time, "
                "and a count by reason (exit 0; 1 no such batch)", failed_arguments)
def failed_verb(args: argparse.Namespace) -> int:
    report = failures.failed_tasks(runtime_from_args(args), args.batch, args.reason, args.limit, args.every)
    print((failures.render_json if args.json else failures.render_text)(report))
    return ExitCode.OK


def requeue_arguments(parser: argparse.ArgumentParser) -> None:
    batch_and_reason(parser)
    parser.add_argument("--failed", action="store_true", required=True,
                        help="the failed tasks of the open batch go back to pending and are crawled again")


@verb("requeue", "put the failed tasks of the open batch back to pending, and say how many (a closed batch is left "
                 "alone: the next batch crawls them again) (exit 0; 1 no such batch)", requeue_arguments)
def requeue_verb(args: argparse.Namespace) -> int:
    print(failures.requeue_failed(runtime_from_args(args), args.batch, args.reason))
    return ExitCode.OK


def retry_arguments(parser: argparse.ArgumentParser) -> None:
    spider_and_config(parser)
    parser.add_argument("--items", nargs="?", const=FROM_SETTINGS, required=True, metavar="FILE",
                        help="the failed items file (default: FAILED_ITEMS_PATH)")


@verb("retry", "replay what could not be stored: `--items` stores the items dumped to FAILED_ITEMS_PATH "
              "(exit 0 all stored, 1 some refused and kept, 69 store unreachable, 74 disk error)",
      retry_arguments)
def retry_verb(args: argparse.Namespace) -> int:
    files = config_files(args)
    settings = load_settings({}, config_files=files, overrides=with_store(args, files, {}))
    if args.spider or settings.SPIDER:      # the spider's __custom_setting__ may name the file or the database
        source, _ = spider_source(args, files, {})
        settings = source.settings(load_spider_class(source.path))
    setup_logging(settings.LOG_LEVEL)
    path = settings.failed_items_path() if args.items is FROM_SETTINGS else args.items
    store = open_store(settings)
    store.now()       # unreachable: exit 69 now, before the file is claimed
    result = FailedItemsFile(path).replay(store)     # it logs its own summary, in one line
    if result.disk_error:
        return ExitCode.IOERR
    if result.interrupted_by_outage:
        return ExitCode.UNAVAILABLE
    return ExitCode.FAILURE if result.kept else ExitCode.OK


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
    add.add_argument("--column", default="url", help="the task table's column for the URL (default: url)")
    add.add_argument("--spider", metavar="SPIDER", help="path/file.py:Class or module:Class (default: SPIDER)")
    config_and_store(add)
    load = actions.add_parser("import", help="add tasks from a CSV file whose header names the columns",
                              description="add tasks from a CSV file whose header names the columns")
    load.add_argument("file", metavar="FILE.csv")
    load.add_argument("--spider", metavar="SPIDER", help="path/file.py:Class or module:Class (default: SPIDER)")
    config_and_store(load)


@verb("tasks", "load tasks into the spider's task table (created if missing): add URL..., import FILE.csv",
      tasks_arguments)
def tasks_verb(args: argparse.Namespace) -> int:
    runtime = runtime_from_args(args)
    if args.action == "add":
        add_urls(runtime, args.urls, column=check_identifier(args.column, "--column"))
    else:
        import_csv(runtime, args.file)
    return ExitCode.OK


# -- the command
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="batchd", description="Periodic batch web crawling: a supervisor, "
                                     "a master and workers over a MySQL task table and Redis leases.")
    parser.add_argument("--version", action="version", version=f"batchd {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for entry in VERBS.values():
        sub = verbs.add_parser(entry.name, help=entry.help, description=entry.help)
        entry.arguments(sub)
        sub.set_defaults(handler=entry.handler)
    return parser


def main(argv: Optional[list] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except BatchdError as e:
        setup_logging()
        log.error("%s", e)
        return int(e.exit_code)
    except KeyboardInterrupt:
        return 130
