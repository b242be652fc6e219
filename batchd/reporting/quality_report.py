"""A closed batch's data quality, gathered as plain data from its record (quality/verdict.py wrote it at the
close): `batchd quality` lays it out (cli/quality_verb.py), the dashboard's quality page too (web/html.py), and
`batchd status` says how many flags. (/metrics shows what the judge gathered as it went: quality/metric_figures.py.)

Nothing is measured or judged again here: the flags, each host's figures and its baseline are what the
master kept, so the report of an old batch reads as its close did. Beside them, the hosts' render="auto" choices
as they stand now (hosts/render_choices.py: kept across batches, not per batch).
"""
from datetime import datetime, timezone
from typing import Optional

from ..errors import BackendUnavailable

from ..model import BatchRecord
from ..quality.measures import Baseline, BaselineTable, HostMeasures
from ..quality.record_json import kept_flags, kept_measures, kept_quality
from .failed_tasks import NoSuchBatch, chosen_batch

def gather_quality(runtime, batch_id: Optional[int] = None, host: Optional[str] = None) -> dict:
    """`batchd quality`: the batch's flags, then a row per host (items, coverage of each field, the top body's
    share, each beside its baseline); `batch_id` None: the last closed batch; `host`: that host only."""
    store = runtime.store
    store.open(runtime.layout)
    record = _closed_record(store, batch_id)
    kept = kept_quality(store.batch_quality(record.id)) or {}
    flags = [f for f in kept.get("flags", []) if host is None or f["host"] == host]
    before = BaselineTable()            # folded again from the batches compared, as the judge did
    for compared in kept.get("compared", []):
        before.add(kept_measures(store.batch_quality(compared) or "{}"))
    hosts = [host_row(name, HostMeasures.from_json(data), before.of(name))
             for name, data in sorted(kept.get("hosts", {}).items()) if host is None or name == host]
    return {"batch": record.id, "reparse_of": record.how_opened.reparse_of, "outcome": record.outcome,
            "judged": bool(kept), "flags": flags, "hosts": hosts,
            "compared": kept.get("compared", []), "render": render_rows(runtime, host)}


RENDER_ROWS = 1000        # the hosts' render choices shown, the most recently changed first


def render_rows(runtime, host: Optional[str] = None) -> Optional[list]:
    """The hosts' render="auto" choices now, the most recently changed first (`host`: that host's only): each
    {"host", "choice", "since" (ISO 8601, UTC), "batch", "samples", "why"}; None when the backend holding them
    cannot be read now (Redis down: the rest of the report is the store's)."""
    try:
        choices = runtime.backend.renders.choices(RENDER_ROWS)
    except BackendUnavailable:
        return None
    return [{"host": name, "choice": choice.mode.value, "batch": choice.batch, "samples": choice.samples,
             "since": datetime.fromtimestamp(choice.since, timezone.utc).isoformat(timespec="seconds"),
             "why": choice.why} for name, choice in choices.items() if host is None or name == host]


def _closed_record(store, batch_id: Optional[int]) -> BatchRecord:
    asked, last = chosen_batch(store, batch_id)
    if last is None:
        raise NoSuchBatch("no batch has been opened yet")
    records = store.recent_batches(last.id - asked + 2 if batch_id is not None else 2)
    if batch_id is None:
        record = next((r for r in records if r.is_done), None)
    else:
        record = next((r for r in records if r.id == asked), None)
    if record is None or not record.is_done:
        raise NoSuchBatch(f"batch {asked} is not closed yet: its quality is judged at its close"
                          if record is not None or batch_id is not None else "no batch has closed yet")
    return record


def host_row(host: str, measures: HostMeasures, baseline: Baseline) -> dict:
    """One host's figures beside its baseline's (None where the batches before had none)."""
    coverage = measures.coverage()
    before = baseline.coverage
    return {"host": host, "items": sum(measures.items.values()), "items_before": _sum_or_none(baseline.items),
            "tasks": measures.tasks, "no_item": measures.no_item, "kept": measures.kept,
            "coverage": {key: round(share, 4) for key, share in sorted(coverage.items())},
            "coverage_before": {key: round(share, 4) for key, share in sorted(before.items())},
            "refused": measures.refused, "top_body_share": round(measures.top_body_share(), 4),
            "bodies": measures.bodies, "markers": measures.markers, "statuses": measures.statuses,
            "put_back": sum(measures.put_back.values())}


def _sum_or_none(items: dict) -> Optional[float]:
    return round(sum(items.values()), 1) if items else None


def outcome_line(report: dict) -> str:
    """The first line of a report: the outcome, the flags, the batches of the baseline."""
    of = report.get("reparse_of")
    batch = f"batch {report['batch']}" + (f" (a reparse of batch {of})" if of is not None else "")
    if not report["judged"]:
        return (f"{batch}: {report['outcome'] or 'closed'}; its data was not judged (QUALITY_CHECKS "
                "off, or closed by a batchd without quality checks)")
    compared = ", ".join(map(str, report["compared"]))
    flags = len(report["flags"])
    return (f"{batch}: {report['outcome']}, {flags} flag{'' if flags == 1 else 's'} "
            + (f"(baseline: the median of batches {compared})" if compared else "(no baseline: a first batch)"))


def against(now: Optional[float], before: Optional[float], shape: str) -> str:
    """A figure beside its baseline's, "70% (100%)"; "-" for one the batch did not measure."""
    shown = "-" if now is None else shape.format(now)
    return shown if before is None else f"{shown} ({shape.format(before)})"


def quality_line(store) -> Optional[dict]:
    """{batch, outcome, flags} of the last closed batch that was judged (None: none yet): `batchd status`."""
    for record in store.recent_batches(2):
        if record.is_done:
            flags = kept_flags(store.batch_quality(record.id))
            return None if flags is None else {"batch": record.id, "outcome": record.outcome, "flags": len(flags)}
    return None
