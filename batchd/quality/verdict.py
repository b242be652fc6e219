"""The master's judgement of a batch's data at its close: the hosts' measures read from the batch's counters,
the baseline from the records of the batches before, the flags, and the outcome the record carries.

The record keeps it all (its `outcome` and `quality` columns, written before `is_done`): `outcome` is
clean, flagged (some flag) or failed (no flag, some task failed), so a downstream job can wait for a batch
that is done and clean; `quality` is JSON

    {"outcome": ..., "flags": [{"host", "kind", "field", "now", "before", "message"}],
     "hosts": {host: HostMeasures}, "compared": [batch ids]}

which `batchd quality` and the next batches' baselines read back (a host's figures leave out those at their
default: measures.lean). The baseline is not kept: it is the batches `compared`'s hosts, which `batchd quality`
folds again as the judge did. A record holds a line of figures per host, and a batch of 10,000 hosts makes
a few MB of it, which the master writes and the next closes read.
"""
import logging
from dataclasses import dataclass, field

from ..backends.ports import BatchCounters
from ..backends.store import BatchStore
from ..codec import plain_json
from ..config import Settings
from ..model import BatchRecord
from .measures import BaselineTable, HostMeasures
from .metric_figures import MetricFigures
from .record_json import kept_measures
from .rules import host_flags, in_order

log = logging.getLogger("batchd.quality")

CLEAN, FLAGGED, FAILED = "clean", "flagged", "failed"
RECORDS_SEARCHED = 30      # the most recent records searched for the baseline's batches of the same mode


def outcome_of(flags: int, failed: int) -> str:
    return FLAGGED if flags else FAILED if failed else CLEAN


@dataclass
class BatchQuality:
    """A closed batch's judgement: what the master logs and tells, and the JSON its record keeps."""

    outcome: str = CLEAN
    flags: list = field(default_factory=list)          # rules.Flag, in the order of their hosts
    compared: list = field(default_factory=list)       # the batches of the baseline, newest first
    record: str = "{}"                                 # the record's JSON (the module's doc)
    figures: dict = field(default_factory=dict)        # what /metrics shows of it (metric_figures.py)


class QualityJudge:
    """Judges a batch at its close (master/patrol.py): built by assembly.py with the master's store and
    counters. It goes host by host and keeps no host's figures once written into the record's JSON: the
    baseline's batches are folded into a BaselineTable one record at a time, so 10,000 hosts against 3 batches
    cost the master a few tens of MB for a moment (docs/quality.md, Cost)."""

    def __init__(self, settings: Settings, store: BatchStore, counters: BatchCounters):
        self.settings, self.store, self.counters = settings, store, counters

    def judge(self, batch: BatchRecord, failed: int) -> BatchQuality:
        compared, before = self.baseline_before(batch)
        flags: list = []
        hosts = []          # "host": {...} of the record's JSON
        figures = MetricFigures()
        for host, counts in self.counters.host_counts(batch.id):
            measures = HostMeasures.from_counts(counts)
            if not _measured(measures):
                continue
            baseline = before.of(host)
            measures.stand_for_kept(baseline)
            found = host_flags(host, measures, baseline, self.settings)
            flags += found
            figures.add(host, measures, flagged=bool(found))
            hosts.append(f"{plain_json(host)}:{plain_json(measures.to_json())}")
        flags = in_order(flags)
        outcome = outcome_of(len(flags), failed)
        record = (f'{{"outcome":{plain_json(outcome)},"flags":{plain_json([f.to_json() for f in flags])},'
                  f'"hosts":{{{",".join(hosts)}}},"compared":{plain_json(compared)}}}')
        return BatchQuality(outcome, flags, compared, record, figures.figures(batch.id, flags))

    def baseline_before(self, batch: BatchRecord) -> tuple:
        """([batch id], BaselineTable) of the QUALITY_BASELINE closed batches before `batch` opened in its
        BATCH_MODE and judged, newest first: the records are searched without their quality, then the
        chosen ones' read one at a time. A reparse is judged against the batch it parsed again and the batches
        of that one's mode before it: what the corrected spider finds in the same pages, beside what the crawl
        found."""
        records = self.store.recent_batches(RECORDS_SEARCHED)
        mode, before = batch.how_opened.mode, batch.id
        reparse_of = batch.how_opened.reparse_of
        if reparse_of is not None:
            crawl = next((record for record in records if record.id == reparse_of), None)
            mode, before = crawl.how_opened.mode if crawl is not None else "full", reparse_of + 1
        compared: list = []
        table = BaselineTable()
        for record in records:
            if record.id >= before or not record.is_done or record.how_opened.mode != mode:
                continue
            kept = self.store.batch_quality(record.id)
            if not kept:
                continue
            table.add(kept_measures(kept))
            compared.append(record.id)
            if len(compared) == self.settings.QUALITY_BASELINE:
                break
        return compared, table


def _measured(measures: HostMeasures) -> bool:
    """Whether a host's counters hold any quality figure (a host met only by the downloader's counters,
    robots.txt say, has none)."""
    return bool(measures.items or measures.statuses or measures.bodies or measures.tasks or measures.kept)
