"""What a batch measured of each host's data: the counter names the workers count under, read back per host
at close, and the baseline the batches before make.

The workers count as host counters (hosts/counts.py: `host/<field>/<host>`, flushed with the batch's other
counters, exactly once, into batchd's own keys or tables), under these fields (a field never holds "/"; a
table is an identifier, so the first "." after it ends it; the rest is quoted):

    q_body               pages answered with a body (a 304 has none), whose digest was taken
    q_d.<digest>         pages of one body; a worker sends a digest once it has seen it twice, so a site of
                         distinct pages sends none (quality/tally.py bounds what it keeps per host)
    q_m.<marker>         pages matching a block marker
    q_b.<cause>          tasks put back to pending for a block page found mid-batch (quality/tally.py), by what
                         gave it away: `marker`, or `body` (one body for most of the host's last pages)
    q_s.<status>         requests by the status they ended with (`error`: no answer at all)
    q_tasks              tasks done whose callbacks ran
    q_noitem             of them, those that yielded no item
    q_kept               tasks done unchanged (a 304, or the same body: no callback ran, the items stand)
    q_i.<table>          items yielded for a table
    q_f.<table>.<field>  of them, those with a good value in the field (not empty, and as its Field says)
    q_x.<table>.<field>  of them, those whose value the Field refused (not empty, but not good)

The record of a closed batch keeps each host's `HostMeasures` (as JSON, quality/verdict.py), so the next
batches compare with it without reading any counter again.
"""
import statistics
from dataclasses import asdict, dataclass, field
from typing import Mapping, Optional
from urllib.parse import quote, unquote

BODIES, TASKS, NO_ITEM, KEPT = "q_body", "q_tasks", "q_noitem", "q_kept"
DIGEST, MARKER, STATUS, ITEMS, GOOD, REFUSED, PUT_BACK = "q_d.", "q_m.", "q_s.", "q_i.", "q_f.", "q_x.", "q_b."
BY_MARKER, BY_BODY = "marker", "body"     # what gave a block page away (PUT_BACK's causes)
BLOCK_REASONS = {BY_MARKER: "a block marker", BY_BODY: "one body for most of its host's last pages"}
NO_ANSWER = "error"      # the status of a request that got no response


def quoted(text: str) -> str:
    """Text from the crawl or the spider as part of a counter's field: no "/" (it ends a host counter's field)."""
    return quote(text, safe="")


def field_key(table: str, name: str) -> str:
    """How a field of a table is named in the measures and the flags: `table.field`."""
    return f"{table}.{name}"


@dataclass
class HostMeasures:
    """One host's figures in one batch."""

    items: dict = field(default_factory=dict)      # table -> items yielded
    good: dict = field(default_factory=dict)       # table.field -> items with a good value there
    refused: dict = field(default_factory=dict)    # table.field -> items whose value the Field refused
    markers: dict = field(default_factory=dict)    # block marker -> pages matching it
    put_back: dict = field(default_factory=dict)   # BY_MARKER or BY_BODY -> tasks put back for a block page
    statuses: dict = field(default_factory=dict)   # status -> requests
    bodies: int = 0
    top_body: int = 0         # pages of the body most pages had (among those a worker saw twice)
    tasks: int = 0
    no_item: int = 0
    kept: int = 0
    # What its pages kept unchanged (304s) stand for, from the baseline it was judged against (stand_for_kept):
    kept_items: dict = field(default_factory=dict)   # table -> items
    kept_good: dict = field(default_factory=dict)    # table.field -> of them, items with a good value

    @classmethod
    def from_counts(cls, counts: Mapping[str, int]) -> "HostMeasures":
        """A host's measures from its counter fields (any field not named above is left alone)."""
        measures = cls()
        singles = {BODIES: "bodies", TASKS: "tasks", NO_ITEM: "no_item", KEPT: "kept"}
        tables = {ITEMS: measures.items, GOOD: measures.good, REFUSED: measures.refused,
                  MARKER: measures.markers, STATUS: measures.statuses, PUT_BACK: measures.put_back}
        for name, n in counts.items():
            if name in singles:
                setattr(measures, singles[name], int(n))
            elif name.startswith(DIGEST):
                measures.top_body = max(measures.top_body, int(n))
            else:
                prefix = name[:4]
                if prefix in tables:
                    tables[prefix][unquote(name[4:])] = int(n)
        return measures

    @classmethod
    def from_json(cls, data: Mapping) -> "HostMeasures":
        return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name in data})

    def to_json(self) -> dict:
        return asdict(self)

    def stand_for_kept(self, baseline: "Baseline") -> None:
        """Count its pages kept unchanged as what they had in the batches before: as many items a page, with
        the coverage they had. A site that laid out anew 3 pages of 60 (the rest 304s) is judged on 60 pages,
        not on its 3 new ones alone."""
        self.kept_items = {table: self.kept * per_task for table, per_task in baseline.items_per_task.items()
                           if self.kept}
        self.kept_good = {key: self.kept_items.get(key.partition(".")[0], 0.0) * share
                          for key, share in baseline.coverage.items() if self.kept}

    def coverage(self) -> dict:
        """table.field -> the share of the table's items with a good value there (tables with items only), the
        items its unchanged pages stand for included."""
        items = {table: self.items.get(table, 0) + self.kept_items.get(table, 0.0)
                 for table in {*self.items, *self.kept_items}}
        good = {key: self.good.get(key, 0) + self.kept_good.get(key, 0.0) for key in {*self.good, *self.kept_good}}
        return {key: n / items[key.partition(".")[0]] for key, n in good.items() if items.get(key.partition(".")[0])}

    def no_item_share(self) -> Optional[float]:
        """The share of the tasks done (callbacks run) that yielded no item; None when none was."""
        return self.no_item / self.tasks if self.tasks else None

    def top_body_share(self) -> float:
        return self.top_body / self.bodies if self.bodies else 0.0


@dataclass
class Baseline:
    """One host's figures in the batches before: the median of each, over the batches that had it."""

    items: dict = field(default_factory=dict)          # table -> items
    items_per_task: dict = field(default_factory=dict)  # table -> items per task done whose callbacks ran
    coverage: dict = field(default_factory=dict)       # table.field -> share
    no_item_share: Optional[float] = None
    batches: int = 0

    def to_json(self) -> dict:
        return asdict(self)


def baselines(batches: list) -> dict:
    """host -> Baseline from the measures of the batches before ([{host: HostMeasures}], any order)."""
    hosts = {host for measures in batches for host in measures}
    return {host: _baseline([measures[host] for measures in batches if host in measures]) for host in hosts}


def _baseline(seen: list) -> Baseline:
    items: dict = {}
    per_task: dict = {}
    coverage: dict = {}
    for measures in seen:
        for table, n in measures.items.items():
            items.setdefault(table, []).append(n)
            if measures.tasks:
                per_task.setdefault(table, []).append(n / measures.tasks)
        for key, share in measures.coverage().items():
            coverage.setdefault(key, []).append(share)
    shares = [share for share in (m.no_item_share() for m in seen) if share is not None]
    return Baseline(items=_medians(items), items_per_task=_medians(per_task), coverage=_medians(coverage),
                    no_item_share=statistics.median(shares) if shares else None, batches=len(seen))


def _medians(values: dict) -> dict:
    return {key: statistics.median(found) for key, found in values.items()}
