"""The `batchd` command (console script, and `python -m batchd`).

    batchd run [SPIDER]      supervisor + master + N workers on this host
    batchd master [SPIDER]   supervisor + master          (batchd-master.service; batchd-master@.service: --instance %i)
    batchd worker [SPIDER]   supervisor + N workers       (batchd-worker@.service: --instance %i)
    batchd reload --pid PID  check the config and the spider, then SIGHUP the supervisor (ExecReload=)
    batchd status [SPIDER]   where the batch stands (--json for scripts; --history [N]: the last N batches;
                             --hosts: the busiest hosts)
    batchd check [SPIDER]    config, connections, task table and columns, index
    batchd pause|resume      stop / go on claiming and leasing tasks in the namespace
    batchd open-batch        open the next batch now (--force: close the open one first)
    batchd retry --items     store the items dumped to FAILED_ITEMS_PATH
    batchd failed [SPIDER]   the failed tasks of a batch and why (--json for scripts)
    batchd requeue --failed  the failed tasks of the open batch back to pending
    batchd demo              a whole batch on a bundled site: no network, no MySQL, no Redis
    batchd init [FOLDER]     a starter spider and config
    batchd tasks add|import  load tasks into the task table
    batchd web [SPIDER ...]  the dashboard and its JSON API (--listen ADDR:PORT; batchd-web.service)

SPIDER is `path/file.py:Class` or `module:Class`; when omitted, BATCHD_SPIDER or SPIDER in the
config file. Exit codes (docs/architecture.md, Exit codes): 0 done, 1 items still refused (retry),
3 a --once batch ended with failed tasks, 65 a --once batch's quality checks flagged it (batchd quality)
or `batchd tasks` was given bad rows and added nothing,
69 MySQL or Redis unreachable, 74 a disk refused a write (retry), 75 another master holds the lock,
78 configuration error; a BatchdError ends the command with one log line.

Each verb group is a module with its own VerbGroup (cli/arguments.py): serve (run, master, worker,
reload), status_verb (status), quality_verb (quality), check (check), operate (pause, resume, open-batch, failed, requeue, retry),
project (demo, init, tasks) and dashboard (web). This module only gathers them into the parser, in that order.
"""
import argparse
import logging
from typing import Optional

from ..release import VERSION
from . import check, dashboard, operate, project, quality_verb, serve, status_verb
from ..errors import BatchdError
from ..service.systemd import setup_logging

log = logging.getLogger("batchd")

VERBS = {entry.name: entry for group in (serve.VERBS, status_verb.VERBS, quality_verb.VERBS, check.VERBS, operate.VERBS,
                                        project.VERBS, dashboard.VERBS)
         for entry in group}


# -- the command
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="batchd", description="Periodic batch web crawling: a supervisor, "
                                     "a master and workers over a MySQL task table and Redis leases.")
    parser.add_argument("--version", action="version", version=f"batchd {VERSION}")
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
