"""An operator's word to a running namespace: `batchd pause`, `resume`, `open-batch` (control/actions.py
does them), and what failed put right: `batchd failed` lists the failed tasks, `requeue` crawls
them again, `retry --items` stores the items the database refused.
"""
import argparse

from ..control import actions as control, requeue
from ..reporting.failed_tasks import failed_tasks
from ..config import load_settings
from ..errors import ExitCode
from ..backends import open_store
from ..supervisor.loader import load_spider_class
from ..worker.dumps import FailedItemsFile
from ..service.systemd import setup_logging
from .arguments import VerbGroup, config_files, positive, runtime_from_args, spider_and_config, spider_source, with_store
from .failed_text import render_json, render_text

VERBS = VerbGroup()
verb = VERBS.verb

FROM_SETTINGS = object()    # `--items` without FILE: FAILED_ITEMS_PATH


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


@verb("open-batch", "open the next batch now, whatever the calendar says: the running master opens it, or this "
                    "command when none runs (exit 1 while one is open without --force, 69 when the master holding "
                    "the lock does not open it within 30 s)", open_batch_arguments)
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
    report = failed_tasks(runtime_from_args(args, read_only=True), args.batch, args.reason, args.limit, args.every)
    print((render_json if args.json else render_text)(report))
    return ExitCode.OK


def requeue_arguments(parser: argparse.ArgumentParser) -> None:
    batch_and_reason(parser)
    parser.add_argument("--failed", action="store_true", required=True,
                        help="the failed tasks of the open batch go back to pending and are crawled again")


@verb("requeue", "put the failed tasks of the open batch back to pending, and say how many (a closed batch is left "
                 "alone: the next batch crawls them again) (exit 0; 1 no such batch)", requeue_arguments)
def requeue_verb(args: argparse.Namespace) -> int:
    print(requeue.requeue_failed(runtime_from_args(args), args.batch, args.reason))
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
