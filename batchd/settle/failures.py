"""Failure records: why each failed task failed, kept by the store in `<task_table>_failure`.

A record is one row per task and batch; a later failure of the task in the same batch replaces it.
Every path that fails a task makes one, and hands it to the one settle path (settler.py) with the move:

    path                                         reason                                   also
    a request failed for good (failed_request,   RequestFailed.reason: "HTTP 404",        url, status or error
      or an errback calling update_task(False))    "ConnectionError after 4 attempts: ..."  class, attempts
    an exception in the spider's code            "ValueError: its message"                url, error class
    an item its destination cannot store         "BadItem: ...", or the database's refusal url / error class
    TASK_TIMEOUT                                 "still being processed after ..."       url, TaskTimedOut
    BATCH_TASK_MAX_ATTEMPTS (the master)         "leased N times without a write-back"    attempts (leases)
    update_task(ok=False), no failure at hand    "marked failed by the spider"

The records stay when a task is requeued (history): `batchd failed` (reporting/failed_tasks.py) shows the
tasks still failed unless asked for every record.
"""
import socket
from typing import Optional

from ..http import RequestFailed, Response
from ..model import CLASS_MOST, HOST_MOST, REASON_MOST, URL_MOST, TaskFailure

MARKED = "marked failed by the spider"


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
