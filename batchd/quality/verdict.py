"""The master's judgement of a batch's data at its close: the hosts' measures read from the batch's counters,
the baseline from the records of the batches before, the flags, and the outcome the record carries.

The record keeps it all (its `outcome` and `quality` columns, written before `is_done`): `outcome` is
clean, flagged (some flag) or failed (no flag, some task failed), so a downstream job can wait for a batch
that is done and clean; `quality` is JSON

    {"outcome": ..., "flags": [{"host", "kind", "field", "now", "before", "message"}],
     "hosts": {host: HostMeasures}, "baseline": {host: Baseline}, "compared": [batch ids]}

which `batchd quality` and the next batches' baselines read back.
"""
import json
import logging
from dataclasses import dataclass, field
from typing import Optional

from ..backends.ports import BatchCounters
from ..backends.store import BatchStore
from ..config import Settings
from ..model import BatchRecord
from .measures import Baseline, HostMeasures, baselines
from .rules import flags_of

log = logging.getLogger("batchd.quality")

CLEAN, FLAGGED, FAILED = "clean", "flagged", "failed"
RECORDS_SEARCHED = 30      # the most recent records read for the baseline's batches of the same mode


def outcome_of(flags: int, failed: int) -> str:
    return FLAGGED if flags else FAILED if failed else CLEAN


@dataclass
class BatchQuality:
    """A closed batch's judgement, as its record keeps it."""

    outcome: str = CLEAN
    flags: list = field(default_factory=list)          # rules.Flag
    hosts: dict = field(default_factory=dict)          # host -> HostMeasures
    baseline: dict = field(default_factory=dict)       # host -> Baseline
    compared: list = field(default_factory=list)       # the batches of the baseline, newest first

    def to_json(self) -> dict:
        return {"outcome": self.outcome, "flags": [f.to_json() for f in self.flags],
                "hosts": {h: m.to_json() for h, m in self.hosts.items()},
                "baseline": {h: b.to_json() for h, b in self.baseline.items()}, "compared": self.compared}


def kept_quality(record: BatchRecord) -> Optional[dict]:
    """The JSON a closed batch's record keeps (None: judged by no batchd, or QUALITY_CHECKS off)."""
    if not record.quality:
        return None
    kept = json.loads(record.quality) if isinstance(record.quality, str) else record.quality
    return kept if isinstance(kept, dict) else None


def kept_measures(record: BatchRecord) -> Optional[dict]:
    """host -> HostMeasures of a closed batch, from its record; None when it keeps none."""
    kept = kept_quality(record)
    if kept is None:
        return None
    return {host: HostMeasures.from_json(data) for host, data in kept.get("hosts", {}).items()}


class QualityJudge:
    """Judges a batch at its close (master/patrol.py): built by assembly.py with the master's store and
    counters."""

    def __init__(self, settings: Settings, store: BatchStore, counters: BatchCounters):
        self.settings, self.store, self.counters = settings, store, counters

    def judge(self, batch: BatchRecord, failed: int) -> BatchQuality:
        hosts = {host: HostMeasures.from_counts(fields) for host, fields in self.counters.host_counts(batch.id).items()}
        hosts = {host: measures for host, measures in hosts.items() if _measured(measures)}
        before = self.batches_before(batch)
        base = baselines([measures for _, measures in before])
        for host, measures in hosts.items():
            measures.stand_for_kept(base.get(host, Baseline()))
        flags = flags_of(hosts, base, self.settings)
        return BatchQuality(outcome_of(len(flags), failed), flags, hosts,
                            {host: base.get(host, Baseline()) for host in hosts}, [b for b, _ in before])

    def batches_before(self, batch: BatchRecord) -> list:
        """[(batch id, {host: HostMeasures})] of the QUALITY_BASELINE closed batches before `batch` opened
        in its BATCH_MODE and judged, newest first."""
        mode = batch.how_opened.mode
        found = []
        for record in self.store.recent_batches(RECORDS_SEARCHED):
            if record.id >= batch.id or not record.is_done or record.how_opened.mode != mode:
                continue
            measures = kept_measures(record)
            if measures is not None:
                found.append((record.id, measures))
            if len(found) == self.settings.QUALITY_BASELINE:
                break
        return found


def _measured(measures: HostMeasures) -> bool:
    """Whether a host's counters hold any quality figure (a host met only by the downloader's counters,
    robots.txt say, has none)."""
    return bool(measures.items or measures.statuses or measures.bodies or measures.tasks or measures.kept)
