"""`batchd export [--table T] [--format jsonl|csv|parquet] [-o FILE|-] [--batch N]`: an item table's rows out, to
a file or standard output, in constant memory. export/item_export.py picks the table and the rows and writes
them; this module reads the command line and says, on standard error, how many rows went where."""
import argparse
import os
import sys

from ..errors import ExitCode
from ..export.formats import FORMATS
from ..export.item_export import chosen_table, export_items, format_of, spider_item_tables
from ..reporting.failed_tasks import chosen_batch
from .arguments import NO_SUCH_BATCH, VerbGroup, batch_option, runtime_from_args, spider_and_config

VERBS = VerbGroup()
verb = VERBS.verb


def export_arguments(parser: argparse.ArgumentParser) -> None:
    spider_and_config(parser)
    parser.add_argument("--table", metavar="T", help="the item table (default: the spider's; when its items go to "
                                                     "several tables, the one holding rows)")
    parser.add_argument("--format", choices=FORMATS, help="jsonl, csv or parquet (default: the suffix of -o's FILE "
                                                          "when it is one of those, else jsonl); parquet needs "
                                                          "pyarrow: batchd[export]")
    parser.add_argument("-o", "--output", metavar="FILE", default="-",
                        help="the file, written whole or not at all (a temporary file renamed onto it); - for "
                             "standard output (default)")
    batch_option(parser, "every row of the table; a column table needs ITEM_BATCH_COLUMN")


@verb("export", "write an item table's rows as JSON lines, CSV or Parquet", export_arguments,
      examples=("batchd export crawl_task.py:CrawlTask -o items.jsonl",
                "batchd export --table products --batch 12 --format csv -o -"),
      exits=((ExitCode.OK, "written"), NO_SUCH_BATCH, ExitCode.UNAVAILABLE,
             (ExitCode.IOERR, "the file could not be written (it is left as it was)"),
             (ExitCode.CONFIG, "configuration error (a setting, the spider, the store, --table, pyarrow missing)")))
def export_verb(args: argparse.Namespace) -> int:
    runtime = runtime_from_args(args, read_only=True)
    store = runtime.store
    store.open(runtime.layout)
    if args.batch is not None:
        chosen_batch(store, args.batch)       # a batch never opened: one line, exit 1
    table = chosen_table(store, spider_item_tables(runtime.spider, runtime.layout), args.table, runtime.layout)
    fmt = format_of(args.format, args.output)
    try:
        done = export_items(store, table, fmt, args.output, args.batch, runtime.settings.ITEM_BATCH_COLUMN)
    except BrokenPipeError:       # `batchd export | head`: the reader had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.OK
    where = "standard output" if args.output == "-" else os.path.abspath(args.output)
    batch = f" of batch {args.batch}" if args.batch is not None else ""
    print(f"exported {done.rows} rows{batch} of table {done.table} to {where} as {fmt} in {done.seconds:.1f} s",
          file=sys.stderr)
    return ExitCode.OK
