"""What /metrics shows of a judged batch (reporting/metrics.py QualityCollector), gathered by the judge host by
host as it goes (quality/verdict.py), so that the master never holds every host's figures at once:

    {"batch": N, "flags": {kind: n}, "coverage": {table.field: the share of every host's items with a good
     value there}, "hosts": {host: {table.field: share}}}

The hosts labelled are the flagged ones and those with the most items, HOSTS_LABELLED of each at most: a
label's values stay within 2 × HOSTS_LABELLED however many hosts the batch met.
"""
import heapq
from collections import Counter

from .measures import HostMeasures

HOSTS_LABELLED = 10      # the flagged hosts and the hosts with the most items, this many of each at most
FIELDS_LABELLED = 100    # the fields (table.field) shown at most, a dict item's keys being the crawl's


class MetricFigures:
    def __init__(self, labelled: int = HOSTS_LABELLED):
        self.labelled = labelled
        self.items: Counter = Counter()     # table -> every host's items
        self.good: Counter = Counter()      # table.field -> every host's items with a good value there
        # The busiest hosts, all and flagged: min-heaps of (items, _last_first(host), host, coverage), so that
        # of two hosts as busy the one first by name stays.
        self.busiest: list = []
        self.busiest_flagged: list = []

    def add(self, host: str, measures: HostMeasures, flagged: bool) -> None:
        self.items.update(measures.items)
        self.good.update(measures.good)
        entry = (sum(measures.items.values()), _last_first(host), host, measures.coverage())
        for heap in (self.busiest, self.busiest_flagged) if flagged else (self.busiest,):
            (heapq.heappush if len(heap) < self.labelled else heapq.heappushpop)(heap, entry)

    def figures(self, batch_id: int, flags: list) -> dict:
        coverage = {key: round(n / self.items[key.partition(".")[0]], 4) for key, n in self.good.items()
                    if self.items[key.partition(".")[0]]}
        keys = sorted(coverage)[:FIELDS_LABELLED]
        shown = {host: host_coverage for heap in (self.busiest_flagged, self.busiest)
                 for _, _, host, host_coverage in sorted(heap, reverse=True)}
        return {"batch": batch_id, "flags": dict(Counter(flag.kind for flag in flags)),
                "coverage": {key: coverage[key] for key in keys},
                "hosts": {host: {key: round(share, 4) for key, share in host_coverage.items() if key in keys}
                          for host, host_coverage in shown.items()}}


def _last_first(name: str) -> list:
    """A key under which names sort in reverse ("b" before "a", "ab" before "a")."""
    return [-ord(c) for c in name] + [1]
