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
from .arguments import (EXIT_WORDS, NO_SUCH_BATCH, VerbGroup, batch_option, config_files, json_option, positive,
                        runtime_from_args, spider_and_config, spider_source, with_store)
from .failed_text import render_json, render_text

VERBS = VerbGroup()
verb = VERBS.verb

FROM_SETTINGS = object()    # `--items` without FILE: FAILED_ITEMS_PATH
READS_STORE = (ExitCode.OK, ExitCode.UNAVAILABLE, ExitCode.CONFIG)


# -- an operator's word to the namespace
@verb("pause", "pause the namespace: no task claimed or leased; held ones finish", spider_and_config,
      examples=("batchd pause crawl_task.py:CrawlTask",), exits=READS_STORE)
def pause_verb(args: argparse.Namespace) -> int:
    print(control.pause(runtime_from_args(args)))
    return ExitCode.OK


@verb("resume", "resume a paused namespace", spider_and_config,
      examples=("batchd resume crawl_task.py:CrawlTask",), exits=READS_STORE)
def resume_verb(args: argparse.Namespace) -> int:
    print(control.resume(runtime_from_args(args)))
    return ExitCode.OK


def open_batch_arguments(parser: argparse.ArgumentParser) -> None:
    spider_and_config(parser)
    parser.add_argument("--force", action="store_true",
                        help="close the open batch as it stands first (its unsettled tasks go to the next)")


@verb("open-batch", "open the next batch now, whatever the calendar says", open_batch_arguments,
      examples=("batchd open-batch crawl_task.py:CrawlTask", "batchd open-batch --force"),
      exits=((ExitCode.OK, "the batch is open (the running master opened it, or this command)"),
             (ExitCode.FAILURE, "a batch is open already and no --force"),
             (ExitCode.UNAVAILABLE, f"the master holding the lock did not open it within 30 s; or "
                                    f"{EXIT_WORDS[ExitCode.UNAVAILABLE]}"),
             ExitCode.CONFIG))
def open_batch_verb(args: argparse.Namespace) -> int:
    print(control.open_batch(runtime_from_args(args), args.force))
    return ExitCode.OK


def batch_and_reason(parser: argparse.ArgumentParser) -> None:
    batch_option(parser)
    parser.add_argument("--reason", metavar="TEXT",
                        help="only the tasks whose failure reason holds TEXT (any case): 'HTTP 404', 'timeout'")


def failed_arguments(parser: argparse.ArgumentParser) -> None:
    spider_and_config(parser)
    parser.add_argument("--limit", type=positive, default=50, metavar="N",
                        help="list at most N tasks (default 50; the summary counts them all)")
    parser.add_argument("--all", action="store_true", dest="every",
                        help="every failure record of the last batch, those of tasks requeued since too (an "
                             "earlier batch shows them all anyway)")
    batch_and_reason(parser)
    json_option(parser)


@verb("failed", "the failed tasks of a batch and why, counted by reason", failed_arguments,
      examples=("batchd failed crawl_task.py:CrawlTask", "batchd failed --batch 12 --reason 'HTTP 404' --json"),
      exits=((ExitCode.OK, "listed"), NO_SUCH_BATCH, ExitCode.UNAVAILABLE, ExitCode.CONFIG))
def failed_verb(args: argparse.Namespace) -> int:
    report = failed_tasks(runtime_from_args(args, read_only=True), args.batch, args.reason, args.limit, args.every)
    print((render_json if args.json else render_text)(report))
    return ExitCode.OK


def requeue_arguments(parser: argparse.ArgumentParser) -> None:
    spider_and_config(parser)
    parser.add_argument("--failed", action="store_true", required=True,
                        help="the failed tasks of the open batch go back to pending and are crawled again")
    batch_and_reason(parser)


@verb("requeue", "put the failed tasks of the open batch back to pending", requeue_arguments,
      examples=("batchd requeue crawl_task.py:CrawlTask --failed", "batchd requeue --failed --reason timeout"),
      exits=((ExitCode.OK, "requeued, and how many said (a closed batch is left alone)"), NO_SUCH_BATCH,
             ExitCode.UNAVAILABLE, ExitCode.CONFIG))
def requeue_verb(args: argparse.Namespace) -> int:
    print(requeue.requeue_failed(runtime_from_args(args), args.batch, args.reason))
    return ExitCode.OK


def retry_arguments(parser: argparse.ArgumentParser) -> None:
    spider_and_config(parser)
    parser.add_argument("--items", nargs="?", const=FROM_SETTINGS, required=True, metavar="FILE",
                        help="the failed items file (default: FAILED_ITEMS_PATH)")


@verb("retry", "store the items dumped to FAILED_ITEMS_PATH (--items)", retry_arguments,
      examples=("batchd retry --items", "batchd retry crawl_task.py:CrawlTask --items /var/lib/batchd/failed_items.jsonl"),
      exits=((ExitCode.OK, "every item stored"), (ExitCode.FAILURE, "some items refused: kept in the file"),
             ExitCode.UNAVAILABLE, (ExitCode.IOERR, "a disk refused a write (the claimed file stays for the next retry)"),
             ExitCode.CONFIG))
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
