"""How the master words its log lines: what an opening resets, why a batch trusts no validator, a forced close,
an idle master, a wall-clock time, a few task ids of many. Kept apart from the patrol (master/patrol.py), which says when."""
import time
from typing import Optional

from ..model import BatchOpening, BatchRecord, SpiderPrint
from .reparse_opening import what_reparses


def what_opens(opening: BatchOpening, table: str) -> str:
    """What a batch's opening line says it does: `(BATCH_MODE=full): resetting every task of ...`."""
    if opening.is_reparse:
        missing = " (what it lacks is fetched)" if opening.fetch_missing else ""
        return (f"(a reparse of batch {opening.reparse_of}): {what_reparses(opening)} of `{table}` parsed again from "
                f"its archive{missing}")
    return f"(BATCH_MODE={opening.mode}): {what_a_mode_opens(opening, table)}"


def what_a_mode_opens(opening: BatchOpening, table: str) -> str:
    if opening.mode == "incremental":
        return f"nothing is reset; the pending tasks of `{table}` are crawled"
    if opening.mode == "due":
        failed = "" if opening.reset_failed else " but the failed ones (BATCH_RESET_FAILED=false)"
        return f"resetting the tasks of `{table}` whose revisit is due{failed}"
    if not opening.reset_failed:
        return f"resetting every task of `{table}` to pending but the failed ones (BATCH_RESET_FAILED=false)"
    return f"resetting every task of `{table}` to pending"


def forced_close_words(batch_id: int, total: int, done: int, failed: int) -> str:
    return (f"batch {batch_id} closed by batchd open-batch --force: {done} done, {failed} failed of {total}; the "
            f"{total - done - failed} others are crawled in the next batch")


def idle_words(batch_id: int, due: str) -> str:
    return f"no batch due: batch {batch_id} has finished; the next is due at {due} (batchd open-batch opens one now)"


def refetch_words(batch_id: int, spider: SpiderPrint, before: Optional[BatchRecord], across: bool) -> str:
    """The opening line of a batch that trusts no validator: why, and what it does (`across`:
    REQUEST_FILTER_ACROSS_BATCHES, whose filter it forgets)."""
    links = ", and the links earlier batches followed are followed again" if across else ""
    return (f"batch {batch_id} trusts no validator: {why_refetch(spider, before)}; every page is fetched whole and "
            f"every callback runs{links}")


def why_refetch(spider: SpiderPrint, before: Optional[BatchRecord]) -> str:
    """Why a batch trusts no validator."""
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
