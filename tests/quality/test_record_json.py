"""Reading back a batch's quality JSON a part at a time (batchd/quality/record_json.py): the hosts one by one,
the flags alone, whatever blanks the database put in (MySQL's JSON type writes its own), and a clear error
for a text that is not what the judge wrote."""
import json

import pytest

from batchd.quality.measures import HostMeasures
from batchd.quality.record_json import kept_flags, kept_measures, kept_quality

FLAG = {"host": "hosts", "kind": "items_drop", "field": "t", "now": 1, "before": 9, "message": 'a "hosts": {'}
KEPT = {"outcome": "flagged", "flags": [FLAG],
        "hosts": {"a.example": {"items": {"t": 1}, "tasks": 1}, "hosts": {"bodies": 2, "good": {"t.x": 1}},
                  "{}": {}},
        "compared": [3, 2]}


@pytest.mark.parametrize("text", [json.dumps(KEPT, separators=(",", ":")), json.dumps(KEPT, indent=2),
                                  " " + json.dumps(KEPT, indent="\t", separators=(" ,", " :\r\n")) + "\n"],
                         ids=["compact", "indented", "blanks everywhere"])
def test_the_hosts_and_the_flags_read_back_one_part_at_a_time(text):
    assert list(kept_measures(text)) == [("a.example", HostMeasures(items={"t": 1}, tasks=1)),
                                         ("hosts", HostMeasures(bodies=2, good={"t.x": 1})), ("{}", HostMeasures())]
    assert kept_flags(text) == [FLAG] and kept_quality(text) == KEPT


def test_a_record_without_quality_or_without_hosts():
    assert kept_flags(None) is None and kept_quality("") is None and kept_flags('{"outcome": "clean"}') == []
    assert list(kept_measures("{}")) == [] and list(kept_measures('{"hosts": {}, "compared": []}')) == []


def test_a_text_the_judge_did_not_write_is_refused_with_where():
    with pytest.raises(ValueError, match=r"':' expected at character 16"):
        list(kept_measures('{"hosts": {"a"  , 1}}'))
    with pytest.raises(ValueError):
        list(kept_measures('{"hosts": {"a": {"items": '))
