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
from array import array
from dataclasses import dataclass, field, fields
from typing import Iterable, Iterator, Mapping, Optional
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
        return lean(self)

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
        return lean(self)


def lean(figures) -> dict:
    """A dataclass of figures as a record keeps it: without what reads back as its default (an empty table, a
    0, None), shares to 4 places. A batch of 10,000 hosts keeps 10,000 of them."""
    blank = type(figures)()
    return {figure.name: _rounded(getattr(figures, figure.name)) for figure in fields(figures)
            if getattr(figures, figure.name) != getattr(blank, figure.name)}


def _rounded(value):
    if isinstance(value, float):
        return round(value, 4)
    return {key: _rounded(n) for key, n in value.items()} if isinstance(value, dict) else value


# What a batch before gives a host's baseline, one slot each: ITEMS_OF and PER_TASK_OF name a table,
# COVERAGE_OF a table.field.
ITEMS_OF, PER_TASK_OF, COVERAGE_OF, NO_ITEM_SHARE = "items", "items_per_task", "coverage", "no_item_share"


class BaselineTable:
    """Every host's baseline, folded in from the batches before one batch at a time (`add`), and kept small:
    the master judges 10,000 hosts against 3 batches within a few MB. A host keeps, per batch that had it, one
    array of (slot, figure) pairs, a slot naming one figure the rules compare (the slots are shared by all
    hosts); its Baseline, the median of each figure over the batches that had it, is made when asked (`of`)."""

    def __init__(self) -> None:
        self.slots: dict = {}           # (ITEMS_OF, table) ... -> slot
        self._names: list = []          # slot -> (ITEMS_OF, table) ...
        self._seen: dict = {}           # host -> [array('d', [slot, figure, slot, figure, ...]), one a batch]

    def add(self, hosts: Iterable[tuple]) -> None:
        """One batch before's measures, (host, HostMeasures)."""
        for host, measures in hosts:
            pairs = array("d")
            for name, figure in _figures(measures):
                pairs.extend((self._slot(name), figure))
            self._seen.setdefault(host, []).append(pairs)

    def _slot(self, name: tuple) -> int:
        slot = self.slots.get(name)
        if slot is None:
            slot = self.slots[name] = len(self._names)
            self._names.append(name)
        return slot

    def of(self, host: str) -> Baseline:
        found: dict = {}
        batches = self._seen.get(host, ())
        for pairs in batches:
            for at in range(0, len(pairs), 2):
                found.setdefault(self._names[int(pairs[at])], []).append(pairs[at + 1])
        medians: dict = {ITEMS_OF: {}, PER_TASK_OF: {}, COVERAGE_OF: {}}
        for (kind, key), figures in found.items():
            medians.setdefault(kind, {})[key] = statistics.median(figures)
        return Baseline(items=medians[ITEMS_OF], items_per_task=medians[PER_TASK_OF], coverage=medians[COVERAGE_OF],
                        no_item_share=medians.get(NO_ITEM_SHARE, {}).get(None), batches=len(batches))


def _figures(measures: HostMeasures) -> Iterator[tuple]:
    """((kind, key), figure) of what one batch gives a host's baseline."""
    for table, n in measures.items.items():
        yield (ITEMS_OF, table), float(n)
        if measures.tasks:
            yield (PER_TASK_OF, table), n / measures.tasks
    for key, share in measures.coverage().items():
        yield (COVERAGE_OF, key), share
    share = measures.no_item_share()
    if share is not None:
        yield (NO_ITEM_SHARE, None), share

