"""The failed tasks of a batch and why (the failure records settle/failures.py makes), gathered as plain data:
`batchd failed` (cli/failed_text.py lays them out) and the dashboard's failures page. control/requeue.py sends
them back to pending.

The records stay when a task is requeued (history): listings show the tasks still failed unless asked for
every record.
"""
import dataclasses
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
