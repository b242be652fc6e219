"""Claiming across hosts (BATCH_TASK_HOST_FIELD): which pending tasks a claim takes, shared by every store.

A task table is often sorted by host: a site's million URLs were imported together and hold the first million
ids. A claim in id order would then fill the queue with that one site, and every worker would lease it alone.
With a host column named, a store's claim asks `HostClaim.pick` which ids to take instead:

1. The head: the first HEAD_FACTOR x limit pending rows in id order (id and host column only), so the oldest
   tasks always have their turn.
2. The stretches: STRETCHES reads of `limit` rows each, starting at ids spread evenly between the head's end
   and the last pending id. That is how hosts deep in the table are found in the first claim, whatever holds
   its head. Each claim shifts the starts (by the golden ratio of the gap, so that the gaps are read by the
   claims that follow). Each stretch ends where the next starts: no row is read twice. With ids that are not
   integers there is nothing to spread: one stretch of STRETCHES x limit rows follows the head.
3. The rows read are grouped by host (`host_of`) and taken round robin, hosts in the order they first appear,
   lowest ids first within a host, at most ceil(limit / hosts seen) from one host. Rows left stay pending for
   the next claim.

Every read goes through the state column's index in id order (never a scan of the table): 12 x limit rows and
10 statements a claim, where a claim in id order reads `limit` rows in one. The store then moves exactly the ids
picked with its compare-and-set claim. A claim takes fewer than `limit` tasks when a few hosts hold most of the
rows read, and at most MOST_PER_CLAIM (a BATCH_PUSH_LIMIT of a million would read 12 million rows into memory);
the next refill claims again.
"""
import math
import re
import typing
from typing import Callable, Optional, Sequence

HEAD_FACTOR = 4       # rows of the head read per task claimed
STRETCHES = 8         # reads of `limit` rows each past the head
MOST_PER_CLAIM = 20_000       # tasks one claim takes, at most: 240,000 rows read, a few tens of MB for a moment
GOLDEN = (math.sqrt(5) - 1) / 2     # the shift of the stretches' starts from one claim to the next, in gaps
# [scheme://][user@](host or [IPv6]): what comes before the first of : / ? # after the user.
HOST = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]*://)?(?:[^/?#@]*@)?(?:\[([^\]/?#]*)\]?|([^:/?#]*))")

# (after, upto, n) -> up to n pending rows as (id, host column value), in id order, after < id <= upto
# (either bound open when None).
PendingHosts = Callable[[object, object, int], Sequence[tuple]]
# upto -> the highest pending id (none past upto when it is not None), None when no row is pending.
LastPending = Callable[[object], object]


def host_of(value) -> str:
    """The host a task's column value names: the hostname of a URL (`https://Shop.example/a` -> `shop.example`),
    a bare host as written, lowercased (`Shop.example` -> `shop.example`). Empty or NULL values make one group.
    One regular expression, not urlsplit: a claim of 5,000 reads 60,000 values, and urlsplit took 0.5 s of them."""
    match = typing.cast(re.Match, HOST.match("" if value is None else str(value).strip()))   # every part optional
    bracketed, plain = match.groups()
    return (bracketed or plain or "").lower()


def interleave(rows: Sequence[tuple], limit: int, held: Optional[Callable[[str], bool]] = None) -> list:
    """The ids to claim from `rows` ((id, host value) in id order): round robin over their hosts, at most
    ceil(limit / hosts) from one host, at most `limit` in all, in the order they were picked; none of a host
    `held` says waits (CRAWL_HOURS)."""
    by_host: dict = {}
    for task_id, value in rows:
        by_host.setdefault(host_of(value), []).append(task_id)
    if held is not None:
        by_host = {host: ids for host, ids in by_host.items() if not held(host)}
    if not by_host:
        return []
    groups = list(by_host.values())
    picked: list = []
    for turn in range(math.ceil(limit / len(groups))):
        for ids in groups:
            if turn < len(ids):
                picked.append(ids[turn])
                if len(picked) == limit:
                    return picked
    return picked


class HostClaim:
    """The ids a store's claims take across hosts, from the store's two reads of its pending rows."""

    def __init__(self, pending_hosts: PendingHosts, last_pending: LastPending):
        self.pending_hosts, self.last_pending = pending_hosts, last_pending
        self.claims = 0      # claims so far: how far the stretches' starts are shifted
        self.held: Optional[Callable[[str], bool]] = None    # hosts whose tasks wait (BatchStore.hold_hosts)

    def pick(self, limit: int, upto=None) -> list:
        limit = min(limit, MOST_PER_CLAIM)
        rows = list(self.pending_hosts(None, upto, HEAD_FACTOR * limit))
        if len(rows) == HEAD_FACTOR * limit:         # else the head holds every pending row there is
            for after, until, n in self.stretches(rows[-1][0], upto, limit):
                rows += self.pending_hosts(after, until, n)
        return interleave(rows, limit, self.held)

    def stretches(self, after, upto, limit: int) -> list:
        """(after, until, rows) of each read past the head, which ends at id `after`."""
        last = self.last_pending(upto)
        if not (isinstance(after, int) and isinstance(last, int)):
            return [(after, upto, STRETCHES * limit)]
        shift, self.claims = (self.claims * GOLDEN) % 1, self.claims + 1
        starts = [after + int((last - after) * (k + shift) / STRETCHES) for k in range(STRETCHES)]
        return [(start, until, limit) for start, until in zip(starts, starts[1:] + [last]) if until > start]
