"""render="auto"'s choice per host (batchd/hosts/render_choices.py): the comparison of a page's plain and rendered
yields, the one state machine (sample, relearn), and the RenderChoices port on every store, shared and kept."""
import threading

import pytest

import batchd as mw
from batchd.hosts.render_choices import (RELEARN, SAMPLE, PageYield, RenderChoice, RenderMode, choice_step,
                                         hosts_to_relearn, relearn_flagged, shortfall)
from batchd.quality.rules import Flag
from batchd.quality.tally import judged_fields

TABLE = "crawl_task_item"


class Product(mw.Item):
    title = mw.Field()
    price = mw.Field(pattern=r"\d+\.\d\d EUR")


def page(*items, follow_ups=0) -> PageYield:
    """A page's yield from its items (dicts or Items), measured as the quality counters measure them."""
    measured = PageYield(follow_ups=follow_ups)
    for item in items:
        table, judged = judged_fields(item, TABLE)
        measured.add_item(table, ((field, good) for field, good, _ in judged))
    return measured


def test_plain_is_enough_when_its_items_have_every_field_the_rendered_ones_have():
    rendered = page({"title": "A", "price": "1.99 EUR"})
    assert shortfall(page({"title": "A", "price": "1.99 EUR"}), rendered) == ""
    assert shortfall(page({"title": "A", "price": "1.99 EUR", "extra": 1}), rendered) == ""      # more is fine
    assert shortfall(page({"title": "B", "price": "2.99 EUR"}), rendered) == ""   # values differ: fields count


@pytest.mark.parametrize("plain, rendered, said", [
    (page(), page({"title": "A"}), "plain gave 0 items for crawl_task_item, rendered 1"),
    (page({"title": ""}), page({"title": "A"}), "plain gave crawl_task_item.title a value in 0 items, rendered in 1"),
    (page({"title": None, "price": "1"}), page({"title": "A", "price": "1"}), "crawl_task_item.title a value in 0"),
    (page({"title": "A"}), page({"title": "A"}, {"title": "B"}), "plain gave 1 items for crawl_task_item, rendered 2"),
    (page({"t": 1}, follow_ups=0), page({"t": 1}, follow_ups=3), "plain gave 0 follow-up requests, rendered 3"),
    # An Item's Field judges as the quality counters do: a price its pattern refuses is no price.
    (page(Product(title="A", price="N/A")), page(Product(title="A", price="1.99 EUR")), "crawl_task_item.price"),
])
def test_a_plain_page_that_yields_less_says_where(plain, rendered, said):
    assert said in shortfall(plain, rendered)


def test_a_host_is_decided_plain_after_the_sample_and_rendered_at_the_first_shortfall():
    record, changed = choice_step(None, SAMPLE, 10.0, 1, "", 3)
    assert (record.mode, record.samples, record.since, changed) == (RenderMode.LEARNING, 1, 10.0, True)
    record, changed = choice_step(record, SAMPLE, 11.0, 1, "", 3)
    assert (record.mode, record.samples, record.since, changed) == (RenderMode.LEARNING, 2, 10.0, False)
    decided, changed = choice_step(record, SAMPLE, 12.0, 1, "", 3)
    assert (decided.mode, decided.samples, decided.since, changed) == (RenderMode.PLAIN, 3, 12.0, True)
    assert "3 sampled pages" in decided.why
    # A host decided already ignores a late sample (another worker's, say).
    assert choice_step(decided, SAMPLE, 13.0, 1, "plain gave 0 items", 3) == (decided, False)
    rendered, changed = choice_step(record, SAMPLE, 12.0, 2, "plain gave 0 items", 3)
    assert (rendered.mode, rendered.why, rendered.batch, changed) == \
        (RenderMode.RENDERED, "plain gave 0 items", 2, True)


def test_only_a_plain_host_relearns():
    plain = RenderChoice(RenderMode.PLAIN, 1.0, 1, 3, "")
    learning, changed = choice_step(plain, RELEARN, 5.0, 2, "coverage_drop: ...", 3)
    assert (learning.mode, learning.samples, learning.since, learning.why, changed) == \
        (RenderMode.LEARNING, 0, 5.0, "coverage_drop: ...", True)
    rendered = RenderChoice(RenderMode.RENDERED, 1.0, 1, 1, "")
    assert choice_step(rendered, RELEARN, 5.0, 2, "x", 3) == (rendered, False)
    assert choice_step(None, RELEARN, 5.0, 2, "x", 3) == (None, False)
    with pytest.raises(ValueError):
        choice_step(None, "forget", 5.0, 2, "", 3)


def test_the_flags_that_send_a_host_back_are_those_of_its_data_falling():
    def flag(host, kind):
        return Flag(host, kind, None, 0.0, None, f"{host}: {kind}")
    flags = [flag("a", "soft_block"), flag("a", "coverage_drop"), flag("a", "items_drop"), flag("b", "block_marker"),
             flag("c", "coverage_floor"), flag("d", "no_items")]
    assert hosts_to_relearn(flags) == {"a": "coverage_drop: a: coverage_drop", "c": "coverage_floor: c: coverage_floor",
                                       "d": "no_items: d: no_items"}


def test_the_record_reads_back_as_written():
    record = RenderChoice(RenderMode.RENDERED, 1765000000.5, 7, 2, "plain gave 0 items for t, rendered 1")
    assert RenderChoice.from_json(record.to_json()) == record
    assert RenderChoice.from_json(record.to_json().encode()) == record      # as Redis answers


def test_the_port_keeps_each_hosts_choice_for_every_worker_and_every_batch(backend):
    """On every store: the steps change the one record per host, a spider's later runtime reads it back, and
    samples racing from several threads count each once."""
    from harness import spider_factory
    from spiders.shop import AutoShopTask
    backend.create_tasks(["http://a.example/"])
    factory = spider_factory(backend, AutoShopTask)
    choices = factory().runtime.backend.renders
    assert choice_of(choices, "a.example") is None
    threads = [threading.Thread(target=choices.step, args=("a.example", SAMPLE, 1.0, 1, "", 8)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert choices.choice("a.example").samples == 4
    choices.step("b.example", SAMPLE, 2.0, 1, "plain gave 0 items", 8)
    later = factory().runtime.backend.renders           # another runtime: a worker elsewhere, the next batch
    assert choice_of(later, "b.example").mode == RenderMode.RENDERED
    assert list(later.choices()) == ["b.example", "a.example"]
    for _ in range(4):
        later.step("a.example", SAMPLE, 3.0, 2, "", 8)
    assert choice_of(choices, "a.example").mode == RenderMode.PLAIN
    sent = relearn_flagged(later, [Flag("a.example", "coverage_drop", "t.title", 0.5, 1.0, "m"),
                                   Flag("b.example", "items_drop", "t", 0.0, 1.0, "m")], 3, 4.0)
    assert sent == {"a.example": "coverage_drop: m"}       # b.example is rendered already: left alone
    assert choice_of(choices, "a.example").mode == RenderMode.LEARNING


def choice_of(choices, host):
    return choices.choice(host)
