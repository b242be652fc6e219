"""How the master words its log lines: what an opening resets, why a batch trusts no validator, a wall-clock
time, a few task ids of many. Kept apart from the patrol (master/patrol.py), which says when."""
import time
from typing import Optional

from ..model import BatchOpening, BatchRecord, SpiderPrint


def what_opens(opening: BatchOpening, table: str) -> str:
    if opening.mode == "incremental":
        return f"nothing is reset; the pending tasks of `{table}` are crawled"
    if opening.mode == "due":
        failed = "" if opening.reset_failed else " but the failed ones (BATCH_RESET_FAILED=false)"
        return f"resetting the tasks of `{table}` whose revisit is due{failed}"
    if not opening.reset_failed:
        return f"resetting every task of `{table}` to pending but the failed ones (BATCH_RESET_FAILED=false)"
    return f"resetting every task of `{table}` to pending"


def why_refetch(spider: SpiderPrint, before: Optional[BatchRecord]) -> str:
    """Why a batch trusts no validator, for its opening line."""
    reasons = []
    if spider.changed and before is not None:       # (a change is only ever judged against a batch before)
        reasons.append(f"the spider's {' and '.join(spider.changed)} changed since batch {before.id}")
    if spider.forced:
        reasons.append("--refetch asked for it")
    return ", and ".join(reasons)


def wall_time(unix: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(unix))


def some_of(ids: list, shown: int = 10) -> str:
    text = ", ".join(str(i) for i in ids[:shown])
    return text + (f" (+{len(ids) - shown} more)" if len(ids) > shown else "")
