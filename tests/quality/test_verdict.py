"""The master's judgement at close (batchd/quality/verdict.py) on the memory store: the baseline's batches are
the last QUALITY_BASELINE closed ones of the same BATCH_MODE that were judged, the hosts come from the
batch's per-host counters, and the outcome says flagged before failed."""
from batchd.backends.memory.memory_store import MemoryBatchStore
from batchd.config import load_settings
from batchd.model import BatchOpening, Progress
import json

from batchd.quality.measures import HostMeasures
from batchd.quality.record_json import kept_measures
from batchd.quality.verdict import QualityJudge, outcome_of


class Counters:
    """The per-host table of one batch, as a BatchCounters port would give it."""

    def __init__(self, hosts):
        self.hosts = hosts

    def host_counts(self, batch_id):
        return iter(self.hosts.items())


def closed(store, mode, items, judged=True):
    """A batch opened in `mode`, closed with `items` for host h (judged: its quality kept)."""
    record = store.insert_batch(1, "day", 1)
    store.record_reset(record.id, None, 1, finished=True, opening=BatchOpening(mode=mode))
    quality = {"outcome": "clean", "hosts": {"h": HostMeasures(items={"t": items}, tasks=items).to_json()}}
    store.record_outcome(record.id, "clean", json.dumps(quality) if judged else None)
    store.update_batch(record.id, Progress(total=1, done=1, failed=0, pending=0, processing=0), is_done=True)
    return record.id


def test_the_baseline_is_the_last_batches_of_the_same_mode_that_were_judged():
    store = MemoryBatchStore()
    first = closed(store, "full", 10)
    closed(store, "incremental", 99)
    second = closed(store, "full", 20)
    closed(store, "full", 98, judged=False)
    third, fourth = closed(store, "full", 30), closed(store, "full", 40)
    now = store.insert_batch(1, "day", 1)
    judge = QualityJudge(load_settings({}, environ={}), store, Counters({"h": {"q_i.t": 4, "q_tasks": 4}}))
    compared, baseline = judge.baseline_before(now)
    assert compared == [fourth, third, second] and baseline.of("h").items == {"t": 30}
    judged = judge.judge(now, failed=0)
    kept = json.loads(judged.record)
    assert judged.compared == kept["compared"] == [fourth, third, second]
    assert "baseline" not in kept and kept["hosts"]["h"] == {"items": {"t": 4}, "tasks": 4}
    assert [(f.host, f.kind, f.now, f.before) for f in judged.flags] == [("h", "items_drop", 4, 30)]
    assert kept["flags"] == [f.to_json() for f in judged.flags]
    assert judged.outcome == kept["outcome"] == "flagged" and first not in judged.compared
    assert judged.figures["flags"] == {"items_drop": 1} and judged.figures["hosts"] == {"h": {}}


def test_a_host_with_no_quality_figure_is_left_out_and_the_record_reads_back():
    store = MemoryBatchStore()
    closed(store, "full", 5)
    record = store.last_batch()
    assert dict(kept_measures(store.batch_quality(record.id)))["h"].items == {"t": 5}
    now = store.insert_batch(1, "day", 1)
    judged = QualityJudge(load_settings({}, environ={}), store, Counters({"robots": {"done": 1}})).judge(now, 0)
    assert json.loads(judged.record)["hosts"] == {} and judged.outcome == "clean"


def test_the_outcome_says_flagged_before_failed():
    assert (outcome_of(0, 0), outcome_of(0, 2), outcome_of(1, 2)) == ("clean", "failed", "flagged")
