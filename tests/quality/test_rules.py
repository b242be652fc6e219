"""The rules of batchd/quality/rules.py on measures made by hand, and the baseline of quality/measures.py:
each rule's threshold, the median of the batches before, a host all of whose pages answer 304, floors per
table, rules turned off, and the crawl's text escaped in a flag's message."""
from batchd.config import load_settings
from batchd.hosts.counts import OTHER
from batchd.quality.measures import Baseline, BaselineTable, HostMeasures
from batchd.quality.rules import host_flags, in_order, shown

T = "items"


def measures(items=10, title=10, tasks=10, no_item=0, kept=0, bodies=10, top_body=0, markers=None):
    return HostMeasures(items={T: items} if items else {}, good={f"{T}.title": title} if items else {},
                        tasks=tasks, no_item=no_item, kept=kept, bodies=bodies, top_body=top_body,
                        markers=markers or {}, statuses={"200": bodies})


def baselines(before) -> BaselineTable:
    table = BaselineTable()
    for batch in before:
        table.add(batch.items())
    return table


def flags_of(hosts, before=(), **settings) -> list:
    """The batch's flags, as the judge finds them (quality/verdict.py)."""
    base, found = baselines(before), []
    for host, m in hosts.items():
        m.stand_for_kept(base.of(host))
        found += host_flags(host, m, base.of(host), load_settings(settings, environ={}))
    return in_order(found)


def kinds(hosts, before=(), **settings) -> set:
    return {(f.host, f.kind, f.field) for f in flags_of(hosts, before, **settings)}


def test_the_baseline_is_the_median_of_the_batches_before_and_a_fall_beyond_quality_drop_flags():
    before = [{"h": measures(items=10, title=10)}, {"h": measures(items=30, title=30)},
              {"h": measures(items=12, title=6)}]
    base = baselines(before).of("h")
    assert base.items == {T: 12} and base.coverage == {f"{T}.title": 1.0} and base.batches == 3
    assert kinds({"h": measures(items=10, title=8)}, before) == set()          # 0.8: a fall of 0.2, not more
    assert kinds({"h": measures(items=10, title=7)}, before) == {("h", "coverage_drop", f"{T}.title")}
    assert kinds({"h": measures(items=9, title=9)}, before) == {("h", "items_drop", T)}     # 9 of 12: a fall of 25 %
    assert kinds({"h": measures(items=9, title=9)}, before, QUALITY_DROP=0.3) == set()
    assert kinds({"h": measures(items=6, title=6)}, before) == {("h", "items_drop", T)}


def test_more_tasks_with_no_item_than_the_baseline_allows():
    before = [{"h": measures(tasks=10, no_item=1)}]
    assert kinds({"h": measures(tasks=10, no_item=3)}, before) == set()        # 0.3 against 0.1
    assert kinds({"h": measures(tasks=10, no_item=4)}, before) == {("h", "no_items", None)}


def test_a_first_batch_is_judged_by_markers_soft_blocks_and_floors_only():
    hosts = {"blocked": measures(items=0, tasks=10, no_item=10, bodies=10, top_body=10,
                                 markers={"g-recaptcha": 10}),
             "few": measures(bodies=9, top_body=9), "thin": measures(items=10, title=5)}
    assert kinds(hosts) == {("blocked", "soft_block", None), ("blocked", "block_marker", "g-recaptcha")}
    assert kinds(hosts, QUALITY_MIN_COVERAGE={"title": 0.9}) - kinds(hosts) == {("thin", "coverage_floor",
                                                                                   f"{T}.title")}
    assert kinds(hosts, QUALITY_MIN_COVERAGE={"other.title": 0.9}) == kinds(hosts)     # another table's floor
    assert kinds(hosts, QUALITY_SOFT_BLOCK_PAGES=9) >= {("few", "soft_block", None)}


def test_a_host_all_of_whose_pages_answer_304_keeps_what_it_measured_and_is_never_flagged():
    before = [{"h": measures(items=20, title=20, tasks=10)}]
    unchanged = HostMeasures(kept=10, statuses={"304": 10})
    assert kinds({"h": unchanged}, before) == set()
    half = HostMeasures(items={T: 10}, good={f"{T}.title": 10}, tasks=5, kept=5, bodies=5, statuses={"200": 5})
    assert kinds({"h": half}, before) == set()         # 10 items and 5 tasks kept at 2 a task: 20


def test_a_host_that_laid_out_anew_a_few_pages_is_judged_on_all_of_them():
    """3 of 60 pages changed (their title gone), 57 answered 304: 57 of 60 items keep their title, 95 %. Judged on
    the 3 new pages alone it would read 0 % and flag a site that is fine."""
    before = [{"h": measures(items=60, title=60, tasks=60)}]
    few = HostMeasures(items={T: 3}, good={}, tasks=3, kept=57, bodies=3, statuses={"200": 3, "304": 57})
    assert kinds({"h": few}, before) == set()
    assert few.coverage() == {f"{T}.title": 0.95}
    many = HostMeasures(items={T: 18}, good={}, tasks=18, kept=42, bodies=18, statuses={"200": 18, "304": 42})
    assert kinds({"h": many}, before) == {("h", "coverage_drop", f"{T}.title")}      # 70 %: the 30 %
    assert round(many.coverage()[f"{T}.title"], 4) == 0.7


def test_the_others_entry_is_not_judged_for_its_items_nor_its_bodies():
    before = [{OTHER: measures(items=100, title=100)}]
    assert kinds({OTHER: measures(items=10, title=10, bodies=10, top_body=10)}, before) == set()


def test_every_rule_can_be_turned_off():
    before = [{"h": measures(items=10, title=10, tasks=10)}]
    hosts = {"h": measures(items=5, title=1, tasks=10, no_item=5, top_body=10, markers={"cf-chl-": 1})}
    everything = kinds(hosts, before, QUALITY_MIN_COVERAGE={"title": 0.9})
    assert {kind for _, kind, _ in everything} == {"coverage_drop", "items_drop", "no_items", "soft_block",
                                                   "block_marker", "coverage_floor"}
    for rule in ("coverage_drop", "items_drop", "no_items", "soft_block", "block_marker", "coverage_floor"):
        left = kinds(hosts, before, QUALITY_MIN_COVERAGE={"title": 0.9}, QUALITY_RULES_OFF=[rule])
        assert {kind for _, kind, _ in left} == {kind for _, kind, _ in everything} - {rule}


def test_a_flag_escapes_the_crawls_text_and_stays_short():
    evil = "evil\x1b[2J.example" + "x" * 500
    flag = flags_of({evil: measures(markers={"\u202egnp.": 3})})[0]
    assert "\x1b" not in flag.message and "\\x1b[2J" in flag.message and "\u202e" not in flag.message
    assert len(f"batch 1 quality: {flag.message}") <= 300 and flag.host == evil
    assert shown("a\nb") == "a\\nb"


def test_measures_read_back_from_counters_and_json():
    counts = {"q_i.items": 3, "q_f.items.title": 2, "q_f.items.a%2Fb": 1, "q_x.items.price": 1, "q_body": 3,
              "q_d.0abc": 2, "q_d.0def": 3, "q_m.please%20verify": 1, "q_s.200": 3, "q_tasks": 3, "q_noitem": 1,
              "done": 3, "le1": 3}
    m = HostMeasures.from_counts(counts)
    assert (m.items, m.good, m.refused, m.top_body, m.markers) == (
        {"items": 3}, {"items.title": 2, "items.a/b": 1}, {"items.price": 1}, 3, {"please verify": 1})
    assert HostMeasures.from_json(m.to_json()) == m
    base = baselines([{"h": m}]).of("h")
    assert Baseline(**base.to_json()) == Baseline(**{**base.to_json(), "no_item_share": round(1 / 3, 4)})
    every_task_yielded = baselines([{"h": HostMeasures(items={"t": 1}, tasks=1)}]).of("h")
    assert every_task_yielded.to_json()["no_item_share"] == 0.0, "a share of 0 is no default: it is kept"
    assert m.to_json() == {"items": {"items": 3}, "good": {"items.title": 2, "items.a/b": 1},
                           "refused": {"items.price": 1}, "markers": {"please verify": 1}, "statuses": {"200": 3},
                           "bodies": 3, "top_body": 3, "tasks": 3, "no_item": 1}, "what is at its default is left out"


def test_the_block_rules_say_how_many_tasks_were_put_back_and_one_body_put_back_flags_however_few_pages():
    few = measures(bodies=30, top_body=6)
    few.put_back = {"body": 3}
    blocked = measures(items=0, bodies=12, markers={"g-recaptcha": 12})
    blocked.put_back = {"marker": 1}
    found = flags_of({"few": few, "blocked": blocked})
    messages = {(f.host, f.kind): f.message for f in found}
    assert messages[("few", "soft_block")] == ("few: 6 of 30 pages had one body (20%), most of its last pages for a "
                                               "while; 3 tasks put back to pending, the host held")
    assert messages[("blocked", "block_marker")].endswith("(most: 'g-recaptcha'); 1 task put back to pending, "
                                                          "the host held")
    assert kinds({"few": measures(bodies=30, top_body=6)}) == set(), "no task put back: 20 % is no soft block"
    assert HostMeasures.from_counts({"q_b.marker": 2, "q_b.body": 1}).put_back == {"marker": 2, "body": 1}
