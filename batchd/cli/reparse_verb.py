"""`batchd reparse --batch N`: the current spider over batch N's archive, with no network, as a batch of its own
(control/reparse.py does it: under the daemon its workers, else this process). On a terminal a bar shows the
tasks settled as they go; at the end, the responses replayed, the items stored and the requests not archived.
"""
import argparse
import sys

from ..control.reparse import ReparseFigures, reparse
from ..errors import ExitCode
from .arguments import EXIT_WORDS, NO_SUCH_BATCH, VerbGroup, batch_option, runtime_from_args, spider_and_config
from .demo.run import Terminal
from .status_text import bar

VERBS = VerbGroup()
verb = VERBS.verb


def reparse_arguments(parser: argparse.ArgumentParser) -> None:
    spider_and_config(parser)
    parser.add_argument("--host", metavar="HOST",
                        help="only the tasks of this host (needs BATCH_TASK_HOST_FIELD, the column of each task's URL "
                             "or host)")
    parser.add_argument("--task", metavar="ID", help="only this task")
    parser.add_argument("--fetch-missing", action="store_true",
                        help="fetch a request the archive lacks (default: count it and skip it)")
    batch_option(parser, "the last one; its archive, ARCHIVE = \"warc\", is parsed again")


@verb("reparse", "the current spider over a batch's archive, with no network",
      reparse_arguments,
      examples=("batchd reparse crawl_task.py:CrawlTask --batch 12",
                "batchd reparse --batch 12 --host shop.example --fetch-missing"),
      exits=((ExitCode.OK, "reparsed: every task done, no quality flag"),
             (ExitCode.FAILURE, "some tasks failed (batchd failed); or a batch is open, or the namespace paused; or "
                                f"{NO_SUCH_BATCH[1]}"),
             (ExitCode.DATAERR, "its quality checks flagged it (batchd quality)"),
             (ExitCode.UNAVAILABLE, f"the daemon's master did not open it within 30 s; or "
                                    f"{EXIT_WORDS[ExitCode.UNAVAILABLE]}"),
             (ExitCode.CONFIG, "configuration error (a setting, the spider, the store, no archive of the batch, "
                               "--host without BATCH_TASK_HOST_FIELD)")))
def reparse_verb(args: argparse.Namespace) -> int:
    terminal = Terminal(sys.stdout)

    def show(figures: ReparseFigures) -> None:
        terminal.progress(progress_line(figures), key=(figures.done, figures.failed))

    figures = reparse(runtime_from_args(args), args.batch, args.host, args.task, args.fetch_missing,
                      on_progress=show)
    terminal.end_progress()
    for line in summary(figures):
        terminal.say(line)
    return figures.exit_code


def progress_line(figures: ReparseFigures) -> str:
    return (f"{bar(figures.done, figures.failed, figures.total)} {figures.done + figures.failed}/{figures.total} "
            f"tasks  {figures.replayed} replayed, {figures.stored} items, {figures.not_archived} not archived")


def summary(figures: ReparseFigures) -> list:
    """What a reparse did, in a few lines."""
    lines = [f"batch {figures.batch_id}, a reparse of batch {figures.reparse_of}: {figures.total} tasks, "
             f"{figures.done} done, {figures.failed} failed ({figures.outcome or 'still open'})",
             f"  responses replayed     {figures.replayed}",
             f"  items stored           {figures.stored}",
             f"  requests not archived  {figures.not_archived}" + (" (skipped; --fetch-missing fetches them)"
                                                                   if figures.not_archived else "")]
    if figures.fetched:
        lines.append(f"  fetched (not archived) {figures.fetched}")
    if figures.failed:
        lines.append(f"the failed tasks: batchd failed --batch {figures.batch_id}")
    lines.append(f"its data against batch {figures.reparse_of}'s: batchd quality --batch {figures.batch_id}")
    return lines
