"""`batchd quality [--batch N] [--host H] [--json]`: a closed batch's data quality, from its record: the flags
first (one line each, as the master logged them), then a row per host: items, the coverage of each field,
the share of the top body, each against the baseline (the median of the batches before); last, the hosts'
render="auto" choices as they stand now (crawled plain or rendered, since when and why). It changes nothing:
reporting/quality_report.py gathers, this module lays out. Text from the crawl (hosts, fields, markers) is shown
with its control characters escaped.

The exit code says what the batch was, as `batchd run --once` does: 0 clean, 65 flagged, 1 tasks failed.
"""
import argparse
import json

from ..errors import ExitCode
from ..reporting.quality_report import against, gather_quality, outcome_line
from ..service.systemd import escape_controls
from .arguments import VerbGroup, batch_option, json_option, runtime_from_args, spider_and_config
from .status_text import render_table

VERBS = VerbGroup()
verb = VERBS.verb

EXIT_OF = {"flagged": ExitCode.DATAERR, "failed": ExitCode.FAILURE}


def quality_arguments(parser: argparse.ArgumentParser) -> None:
    spider_and_config(parser)
    parser.add_argument("--host", metavar="HOST", help="this host only (as the table names it: host[:port])")
    batch_option(parser, "the last one closed")
    json_option(parser)


@verb("quality", "a closed batch's data quality per host, against the baseline", quality_arguments,
      examples=("batchd quality crawl_task.py:CrawlTask", "batchd quality --batch 12 --host shop.example --json"),
      exits=((ExitCode.OK, "the batch is clean"),
             (ExitCode.FAILURE, "the batch ended with failed tasks, or there is no such batch closed"),
             (ExitCode.DATAERR, "the batch's quality checks flagged it"),
             ExitCode.UNAVAILABLE, ExitCode.CONFIG))
def quality_verb(args: argparse.Namespace) -> int:
    report = gather_quality(runtime_from_args(args, read_only=True), args.batch, args.host)
    print(render_json(report) if args.json else render_quality(report))
    return EXIT_OF.get(report["outcome"] or "", ExitCode.OK)


def render_json(report: dict) -> str:
    return json.dumps({key: report[key] for key in ("batch", "reparse_of", "outcome", "flags", "hosts", "compared",
                                                    "render")},
                      indent=2, sort_keys=True)


def render_quality(report: dict) -> str:
    return "\n".join([_judgement(report), *_render_choices(report["render"])])


def _render_choices(rows) -> list:
    """The lines of the hosts' render="auto" choices (none when no host was learnt)."""
    if rows is None:
        return ["", 'render="auto": the hosts\' choices cannot be read now (the backend is unreachable)']
    if not rows:
        return []
    table = [[escape_controls(row["host"]), row["choice"], row["since"].replace("+00:00", "Z"),
              escape_controls(row["why"])] for row in rows]
    return ["", 'render="auto" per host (now):',
            render_table(("host", "crawled", "since", "why"), table, (0, 1, 2, 3))]


def _judgement(report: dict) -> str:
    if not report["judged"]:
        return outcome_line(report)
    lines = [outcome_line(report)]
    lines += [f"FLAG  {f['kind']}  {escape_controls(f['message'])}" for f in report["flags"]]
    rows = [[escape_controls(row["host"]), against(row["items"], row["items_before"], "{:.0f}"),
             against(row["top_body_share"], None, "{:.0%}"), str(row["kept"]),
             "; ".join(f"{escape_controls(key.partition('.')[2])} "
                       f"{against(share, row['coverage_before'].get(key), '{:.0%}')}"
                       for key, share in row["coverage"].items())] for row in report["hosts"]]
    if rows:
        lines += ["", render_table(("host", "items (before)", "top body", "unchanged", "coverage (before)"), rows,
                                   (0, 4))]
    return "\n".join(lines)

