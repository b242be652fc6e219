"""The `batchd` command (console script, and `python -m batchd`).

`batchd --help` lists the verbs in SECTIONS, as README.md ("The commands") groups them; `batchd VERB --help`
gives a verb's summary, its arguments, an example and the exit codes it can return (cli/arguments.py).
SPIDER is `path/file.py:Class` or `module:Class`; when omitted, BATCHD_SPIDER or SPIDER in the config file.
Exit codes (docs/architecture.md, Exit codes): 0 done, 1 a --once batch ended with failed tasks, items still
refused (retry), a check failed, no such batch; 65 a --once batch's quality checks flagged it (batchd quality)
or `batchd tasks` was given bad rows and added nothing; 69 MySQL or Redis unreachable; 74 a disk refused a
write (retry); 75 another master holds the lock; 78 configuration error; a BatchdError ends the command with
one log line. A usage error is argparse's: one line after the usage, exit 2; Ctrl-C ends a verb with 130.

Each verb group is a module with its own VerbGroup (cli/arguments.py): serve (run, master, worker,
reload), status_verb (status), quality_verb (quality), check (check), operate (pause, resume, open-batch, failed,
requeue, retry), project (demo, init, tasks), dashboard (web), reparse_verb (reparse) and export_verb (export). This module only gathers
them into the parser.
"""
import argparse
import logging
import textwrap
from typing import Optional

from ..release import VERSION
from . import check, dashboard, export_verb, operate, project, quality_verb, reparse_verb, serve, status_verb
from .arguments import EXIT_CODES_TITLE, HELP_WIDTH, SPIDER_HELP, add_verbs
from ..errors import BatchdError
from ..service.systemd import setup_logging

log = logging.getLogger("batchd")

VERBS = {entry.name: entry for group in (serve.VERBS, status_verb.VERBS, quality_verb.VERBS, check.VERBS, operate.VERBS,
                                        project.VERBS, dashboard.VERBS, reparse_verb.VERBS, export_verb.VERBS)
         for entry in group}


# What `batchd --help` lists, in README.md's groups ("The commands"): every verb once.
SECTIONS = (("run a crawl", ("run", "master", "worker", "reload")),
            ("watch it", ("status", "failed", "quality", "web")),
            ("operate it", ("pause", "resume", "open-batch", "requeue", "retry")),
            ("set up a project", ("demo", "init", "tasks", "check")),
            ("keep what you fetched", ("reparse", "export")))
# The codes every verb may end with besides its own (`batchd VERB --help` lists those).
COMMON_EXITS = ((2, "usage error: the usage, then one line on what is wrong"), (130, "interrupted (Ctrl-C)"))
EXAMPLES = ("batchd demo", "batchd status crawl_task.py:CrawlTask --why")


# -- the command
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="batchd", description="Periodic batch web crawling: a supervisor, "
                                     "a master and workers over a MySQL task table and Redis leases.",
                                     epilog=verbs_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"batchd {VERSION}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True,
                                  help="one of the verbs below; `batchd VERB --help` tells more")
    add_verbs(verbs, VERBS.values(), listed=False)
    return parser


def verbs_epilog() -> str:
    """The verbs grouped as SECTIONS says, one summary line each, then examples, SPIDER and the exit codes."""
    width = max(len(name) for name in VERBS) + 2
    lines: list = []
    for title, names in SECTIONS:
        lines.append(f"{title}:")
        for name in names:
            lines += textwrap.wrap(VERBS[name].help, HELP_WIDTH, initial_indent=f"  {name:<{width}}",
                                   subsequent_indent=" " * (width + 2))
        lines.append("")
    lines += ["examples:"] + [f"  {line}" for line in EXAMPLES] + [""]
    lines += textwrap.wrap(f"SPIDER is {SPIDER_HELP}.", HELP_WIDTH) + [""]
    lines += [EXIT_CODES_TITLE, "  each verb's --help lists its own; every verb may also end with"]
    lines += [f"  {code:<3} {meaning}" for code, meaning in COMMON_EXITS]
    return "\n".join(lines)


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
