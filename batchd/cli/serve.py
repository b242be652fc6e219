"""`batchd run`, `master`, `worker`: a supervisor on this host, with a master, workers or both
(in the foreground under systemd, or `--daemon` without it); and `batchd reload`, which checks
the config and the spider before it signals a running supervisor.

The process code (the pidfd, /proc, the pid file) is the supervisor's, in supervisor/daemon.py:
here are the arguments and the messages.
"""
import argparse
import logging
import multiprocessing
import os
import re
import signal
from typing import Callable

from ..config import INSTANCE_ROLES, Settings
from ..errors import ConfigError, ExitCode
from ..supervisor.child import probe
from ..supervisor.daemon import RunningSupervisor, run_detached
from ..supervisor.loader import SpiderSource
from ..supervisor.supervisor import Plan, Supervisor
from ..service.systemd import set_process_role, setup_logging, under_systemd
from .arguments import (EXIT_WORDS, VerbGroup, announce_config, config_files, spider_and_config, spider_source,
                        workers_option)

log = logging.getLogger("batchd")

VERBS = VerbGroup()
verb = VERBS.verb

INSTANCE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
DEFAULT_LOG_FILE = "batchd.log"


# -- run, master, worker
def daemon_arguments(workers: bool, instance_help: str,
                     master: bool = True) -> Callable[[argparse.ArgumentParser], None]:
    def arguments(parser: argparse.ArgumentParser) -> None:
        spider_and_config(parser)
        if workers:
            workers_option(parser)
        if master:
            parser.add_argument("--refetch", action="store_true",
                                help="the next batch this run opens trusts no validator: it fetches every page whole "
                                     "and runs every callback, as after a change of the spider (docs/recrawl.md)")
        parser.add_argument("--instance", type=instance_name, metavar="NAME", help=instance_help)
        parser.add_argument("--once", action="store_true",
                            help="run / serve the current batch to completion, then exit (for cron; its exit "
                                 "codes below)")
        parser.add_argument("--daemon", action="store_true",
                            help="detach into the background (hosts without systemd; refused under systemd)")
        parser.add_argument("--pidfile", metavar="FILE", help="with --daemon: the pid file, locked while running")
        parser.add_argument("--log-file", metavar="FILE",
                            help=f"with --daemon: where the log goes (default: ./{DEFAULT_LOG_FILE})")
    return arguments


def instance_name(text: str) -> str:
    if not INSTANCE_NAME.match(text):
        raise argparse.ArgumentTypeError(f"{text!r}: letters, digits, _ . - only (at most 64)")
    return text


def supervise(verb_name: str, args: argparse.Namespace) -> int:
    files = config_files(args, role=verb_name)
    workers = getattr(args, "workers", None)
    source, settings = spider_source(args, files, {} if workers is None else {"WORKERS": workers})
    plan = Plan(verb=verb_name, once=args.once, instance=args.instance, refetch=getattr(args, "refetch", False))
    if args.daemon:
        return run_daemonized(args, plan, source, settings)
    if args.pidfile or args.log_file:
        raise ConfigError("--pidfile and --log-file go with --daemon")
    setup_logging(settings.LOG_LEVEL)
    announce_config(args)
    return Supervisor(plan, source).run()


# What a supervisor ends with (docs/architecture.md, Exit codes): resident, 0 or 78; --once, what its batch was.
ONCE_EXITS = ((ExitCode.OK, "stopped; with --once: the batch is over, every task done, its data clean"),
              (ExitCode.FAILURE, "--once: the batch ended with failed tasks"),
              (ExitCode.DATAERR, "--once: the batch's quality checks flagged it (batchd quality)"),
              (ExitCode.UNAVAILABLE, f"--once: {EXIT_WORDS[ExitCode.UNAVAILABLE]} (resident: waited out)"),
              (ExitCode.TEMPFAIL, "--once: another master holds the namespace"),
              ExitCode.CONFIG)


@verb("run", "supervisor + master + N workers on this host",
      daemon_arguments(True, "name this supervisor in logs, process titles and Redis"),
      examples=("batchd run crawl_task.py:CrawlTask --workers 4", "batchd run --once"), exits=ONCE_EXITS)
def run_verb(args: argparse.Namespace) -> int:
    return supervise("run", args)


@verb("master", "supervisor + the master only (batchd-master.service)",
      daemon_arguments(False, "name the instance in logs, process titles and Redis; also reads "
                              "master-NAME.toml beside the config file"),
      examples=("batchd master crawl_task.py:CrawlTask", "batchd master --instance news --once"), exits=ONCE_EXITS)
def master_verb(args: argparse.Namespace) -> int:
    return supervise("master", args)


@verb("worker", "supervisor + N workers only (batchd-worker@.service)",
      daemon_arguments(True, "name the instance in logs, process titles and Redis; also reads "
                             "worker-NAME.toml beside the config file", master=False),
      examples=("batchd worker crawl_task.py:CrawlTask --instance 1 --workers 8",),
      exits=((ExitCode.OK, "stopped; with --once: the batch is done"),
             (ExitCode.UNAVAILABLE, f"--once: {EXIT_WORDS[ExitCode.UNAVAILABLE]} (resident: waited out)"),
             ExitCode.CONFIG))
def worker_verb(args: argparse.Namespace) -> int:
    return supervise("worker", args)


# -- reload: check first, then signal (as `nginx -t` before `nginx -s reload`)
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


@verb("reload", "check the config and the spider, then SIGHUP the supervisor", reload_arguments,
      examples=("batchd reload --pid $MAINPID", "batchd reload --instance 1 --role worker --pid 4242"),
      exits=((ExitCode.OK, "the configuration and the spider load: SIGHUP sent"),
             (ExitCode.UNAVAILABLE, "PID is no batchd supervisor"),
             (ExitCode.CONFIG, "the configuration or the spider does not load: nothing signalled")))
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
        _, namespace, _ = probe(multiprocessing.get_context("fork"), source, forget=lambda: None, tick=lambda: None)
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
        announce_config(args)
        return Supervisor(plan, source).run()
    return run_detached(os.path.abspath(args.pidfile), os.path.abspath(args.log_file or DEFAULT_LOG_FILE),
                        supervise_detached)
