"""Failure records: why each failed task failed, kept by the store in `<task_table>_failure`, and the
operator's commands on them (`batchd failed`, `batchd requeue --failed`).

A record is one row per task and batch; a later failure of the task in the same batch replaces it.
Every path that fails a task makes one:

    path                                         reason                                   also
    a request failed for good (failed_request,   RequestFailed.reason: "HTTP 404",        url, status or error
      or an errback calling update_task(False))    "ConnectionError after 4 attempts: ..."  class, attempts
    an exception in the spider's code            "ValueError: its message"                url, error class
    an item its destination cannot store         "BadItem: ...", or the database's refusal url / error class
    TASK_TIMEOUT                                 "still being processed after ..."       url, TaskTimedOut
    BATCH_TASK_MAX_ATTEMPTS (the master)         "leased N times without a write-back"    attempts (leases)
    update_task(ok=False), no failure at hand    "marked failed by the spider"

A worker's lander writes them with the write-back of the failed tasks, one upsert for every failed
task of its turn, right before their move (pipeline.py); the master and update_task outside a worker
write theirs beside their own move. The records stay when a task is requeued (history): listings
show the tasks still failed unless asked for every record.
"""
import dataclasses
import json
import re
import socket
from collections import Counter
from typing import Optional

from .control import wake_master
from ..errors import BatchdError, ExitCode
from ..http import RequestFailed, Response
from ..model import CLASS_MOST, HOST_MOST, REASON_MOST, URL_MOST, BatchRecord, FailureGroup, FailureQuery, TaskFailure
from ..task import Move

MARKED = "marked failed by the spider"
REQUEUE_CHUNK = 500      # tasks moved back to pending per statement
ATTEMPTS_TAIL = re.compile(r" after \d+ attempts")


class NoSuchBatch(BatchdError):
    """--batch names a batch that has not been opened."""

    exit_code = ExitCode.FAILURE


# -- making records
def failure(task_id, batch_id: int, reason: str, url: Optional[str] = None, status: Optional[int] = None,
            error_class: Optional[str] = None, attempts: Optional[int] = None) -> TaskFailure:
    """A record from this host, each text bounded to what the table keeps, the reason on one line."""
    return TaskFailure(task_id=task_id, batch_id=batch_id, reason=_bounded(reason, REASON_MOST) or "(no reason)",
                       url=url[:URL_MOST] if url else None, status=status,
                       error_class=error_class[:CLASS_MOST] if error_class else None, attempts=attempts,
                       host=socket.gethostname()[:HOST_MOST])


def of_request(task_id, batch_id: int, failed: RequestFailed) -> TaskFailure:
    """A request that failed for good: its URL, the downloader's reason, the response's status or the
    exception's class, and its attempts."""
    outcome = failed.response_or_exception
    if isinstance(outcome, Response):
        status, error_class = outcome.status_code, None
    else:
        status, error_class = None, type(outcome).__name__
    return failure(task_id, batch_id, failed.reason, url=failed.request.url, status=status, error_class=error_class,
                   attempts=failed.attempts)


def of_exception(task_id, batch_id: int, error: BaseException, url: Optional[str] = None) -> TaskFailure:
    name = type(error).__name__
    message = str(error)
    return failure(task_id, batch_id, f"{name}: {message}" if message else name, url=url, error_class=name)


def marked(task_id, batch_id: int) -> TaskFailure:
    """update_task(ok=False) with no failed request at hand: the spider's own word."""
    return failure(task_id, batch_id, MARKED)


def _bounded(text: str, most: int) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= most else line[:most - 1] + "…"


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


# -- requeueing them
def requeue_failed(runtime, batch_id: Optional[int] = None, reason: Optional[str] = None) -> str:
    """`batchd requeue --failed`: the failed tasks of the open batch (those whose reason holds `reason`) back to
    pending, in chunks, each a compare-and-set from FAILED (Move.REQUEUE_FAILED); their attempts start afresh,
    the batch's tally loses them, and the master is woken to claim them. A closed batch is left alone: the next
    batch crawls every task again anyway."""
    store, backend = runtime.store, runtime.backend
    store.open(runtime.layout)
    asked, last = chosen_batch(store, batch_id)
    if asked is None:
        return "no batch has been opened yet: no task to requeue"
    if asked != last.id or last.is_done:
        return _closed(asked)
    query, requeued, after = FailureQuery(asked, reason), 0, None
    while chunk := store.failures(query, after=after, limit=REQUEUE_CHUNK):
        ids = [record.task_id for record in chunk]
        backend.leases.forget_attempts(ids)     # before the move: a claim right after it counts from 1
        moved = store.move(Move.REQUEUE_FAILED, ids)
        if moved:
            backend.tally.add_settled(asked, 0, -moved)
        requeued, after = requeued + moved, ids[-1]
    if requeued:
        wake_master(runtime)
    matching = f" whose reason holds {reason!r}" if reason else ""
    said = f"batch {asked}: {requeued} failed tasks{matching} back to pending"
    if requeued and _closed_meanwhile(store, last):
        return f"{said}; but {_closed(asked)}"
    return said + ("; the workers crawl them again" if requeued else "")


def _closed(batch_id: int) -> str:
    return (f"batch {batch_id} is closed; its failed tasks are crawled again in the next batch "
            "(batchd open-batch opens it now)")


def _closed_meanwhile(store, last: BatchRecord) -> bool:
    now = store.last_batch()
    return now is None or now.id != last.id or now.is_done
