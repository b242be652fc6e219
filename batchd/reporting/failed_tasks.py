"""The failed tasks of a batch and why (the failure records settle/failures.py makes): `batchd failed`, and
the dashboard's failures page. control/requeue.py sends them back to pending.

The records stay when a task is requeued (history): listings show the tasks still failed unless asked for
every record.
"""
import dataclasses
import json
import re
from collections import Counter
from typing import Optional

from ..errors import BatchdError, ExitCode
from ..model import FailureGroup, FailureQuery

ATTEMPTS_TAIL = re.compile(r" after \d+ attempts")


class NoSuchBatch(BatchdError):
    """--batch names a batch that has not been opened."""

    exit_code = ExitCode.FAILURE


# -- reading them
def kind(group: FailureGroup) -> str:
    """What a summary calls a group: "HTTP 404", "ReadTimeout", "rejected by validate()"..."""
    if group.status is not None and not 200 <= group.status < 300:
        return f"HTTP {group.status}"
    if group.error_class:
        return group.error_class
    return ATTEMPTS_TAIL.sub("", group.sample).split(": ")[0]


def summary(groups: list) -> list:
    """[(kind, count)], the largest first: groups of one kind counted together."""
    counts: Counter = Counter()
    for group in groups:
        counts[kind(group)] += group.count
    return counts.most_common()


def chosen_batch(store, batch_id: Optional[int]) -> tuple:
    """(the batch asked for: --batch, else the last; the last batch record, or None before the first)."""
    last = store.last_batch()
    if batch_id is None:
        return (last.id if last else None), last
    if last is None or batch_id > last.id:
        raise NoSuchBatch(f"--batch {batch_id}: no such batch ("
                          + (f"the last is {last.id})" if last else "no batch has been opened yet)"))
    return batch_id, last


def failed_tasks(runtime, batch_id: Optional[int] = None, reason: Optional[str] = None, limit: int = 50,
                 every: bool = False) -> dict:
    """`batchd failed`: the failure records of a batch (the last by default), with `reason` in their reason: of
    the last batch those of tasks still failed unless `every`, of an earlier one all; at most `limit` listed,
    every one counted by kind."""
    store = runtime.store
    store.open(runtime.layout)
    asked, last = chosen_batch(store, batch_id)
    latest = last is not None and asked == last.id
    # The task table's states are the last batch's: of an earlier batch every record is its last word.
    still_failed = latest and not every
    report: dict = {"batch": asked, "open": bool(latest and not last.is_done), "reason": reason,
                    "still_failed": still_failed, "total": 0, "kinds": [], "failures": []}
    if asked is None:
        return report
    query = FailureQuery(asked, reason, still_failed=still_failed)
    kinds = summary(store.failure_groups(query))
    report.update(total=sum(n for _, n in kinds), kinds=[{"kind": k, "count": n} for k, n in kinds],
                  failures=[dataclasses.asdict(f) for f in store.failures(query, limit=limit)])
    return report


def render_json(report: dict) -> str:
    return json.dumps(report, default=str, indent=2)


# (title, field, widest): a column is as wide as its widest cell, up to `widest`
COLUMNS = (("id", "task_id", 20), ("time", "time", 19), ("tries", "attempts", 5), ("host", "host", 24),
           ("url", "url", 60), ("reason", "reason", 100))


def render_text(report: dict) -> str:
    if report["batch"] is None:
        return "no batch has been opened yet: no task has failed"
    which = "failed tasks" if report["still_failed"] else "failure records"
    matching = f" whose reason holds {report['reason']!r}" if report["reason"] else ""
    state = "open" if report["open"] else "closed"
    head = f"batch {report['batch']} ({state}): {report['total']} {which}{matching}"
    if not report["total"]:
        return head
    lines = [head + ": " + ", ".join(f"{k['count']} {k['kind']}" for k in report["kinds"]), ""]
    lines += _table([title for title, _, _ in COLUMNS],
                    [[_cell(record[field], widest) for _, field, widest in COLUMNS] for record in report["failures"]])
    if report["total"] > len(report["failures"]):
        lines.append(f"... {report['total'] - len(report['failures'])} more (--limit N shows more, --json for "
                     "scripts)")
    return "\n".join(lines)


def _table(titles: list, rows: list) -> list:
    widths = [max(len(text) for text in column) for column in zip(titles, *rows)]
    return ["  ".join(text.ljust(width) for text, width in zip(row, widths)).rstrip() for row in [titles, *rows]]


def _cell(value, widest: int) -> str:
    text = "-" if value is None else (f"{value:%Y-%m-%d %H:%M:%S}" if hasattr(value, "strftime") else str(value))
    return text if len(text) <= widest else text[:widest - 1] + "…"
