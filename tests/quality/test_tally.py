"""A worker's quality tally (batchd/quality/tally.py) on its own: what is empty, what a Field refuses, the
bounded table of body digests, the block markers and BLOCK_MARKERS, and what a 304 counts."""
import types

import batchd as mw
from batchd.quality import tally as quality_tally
from batchd.quality.tally import BlockMarkers, DigestTable, QualityTally, empty
from batchd.settle.batch_stats import BatchStats


class Priced(mw.Item):
    title = mw.Field()
    price = mw.Field(pattern=r"\d+\.\d\d")
    stock = mw.Field(type=int, check=lambda n: n >= 0)


def run(batch_id=1):
    return types.SimpleNamespace(lease=types.SimpleNamespace(batch_id=batch_id), quality_host=None, items_yielded=0,
                                 page_items=0, page_gaps=False, url="http://shop.example/1")


def page(body=b"<h1>x</h1>", status=200, url="http://shop.example/1"):
    return types.SimpleNamespace(content=body, status_code=status, url=url)


def counted(stats) -> dict:
    return stats.take().get(1, {})


def tally(extra=None):
    stats = BatchStats()
    return QualityTally(stats.inc, BlockMarkers(extra), "crawl_task_item"), stats


def test_empty_is_none_an_empty_text_list_or_table():
    assert all(empty(v) for v in (None, "", [], {}, (), set()))
    assert not any(empty(v) for v in (0, False, " ", [None], {"a": 1}))


def test_an_item_counts_its_table_and_each_field_with_a_good_value_and_what_its_field_refused():
    quality, stats = tally()
    r = run()
    quality.answered(r, page())
    quality.item(r, Priced(title="A", price="N/A", stock=-1))
    quality.item(r, Priced(title="", price="2.50", stock=3))
    quality.item(r, {"title": "B", "extra/key": None})
    assert counted(stats) == {
        "host/q_s.200/shop.example": 1, "host/q_body/shop.example": 1,
        "host/q_i.crawl_task_item/shop.example": 3,
        "host/q_f.crawl_task_item.title/shop.example": 2, "host/q_f.crawl_task_item.price/shop.example": 1,
        "host/q_f.crawl_task_item.stock/shop.example": 1, "host/q_x.crawl_task_item.price/shop.example": 1,
        "host/q_x.crawl_task_item.stock/shop.example": 1, "host/q_f.crawl_task_item.extra%2Fkey/shop.example": 0}
    assert r.items_yielded == 3 and r.page_gaps


def test_a_task_done_is_counted_with_or_without_items_and_one_kept_unchanged_apart():
    quality, stats = tally()
    empty_run, full_run, kept_run = run(), run(), run()
    for r in (empty_run, full_run, kept_run):
        quality.answered(r, page())
    quality.item(full_run, {"title": "x"})
    quality.task_done(empty_run, unchanged=False)
    quality.task_done(full_run, unchanged=False)
    quality.task_done(kept_run, unchanged=True)
    counts = counted(stats)
    assert (counts["host/q_tasks/shop.example"], counts["host/q_noitem/shop.example"],
            counts["host/q_kept/shop.example"]) == (2, 1, 1)


def test_a_304_counts_its_status_and_no_body():
    quality, stats = tally()
    quality.answered(run(), page(b"", status=304))
    assert counted(stats) == {"host/q_s.304/shop.example": 1}


def test_a_digest_is_sent_once_seen_twice_and_a_host_keeps_a_few():
    quality, stats = tally()
    for n in range(100):                                  # distinct pages: no digest leaves the worker
        quality.answered(run(), page(f"page {n}".encode()))
    assert not [name for name in counted(stats) if "q_d." in name]
    for _ in range(3):
        quality.answered(run(), page(b"blocked"))
    digests = {name: n for name, n in counted(stats).items() if "q_d." in name}
    assert list(digests.values()) == [3]
    table = DigestTable()
    for n in range(quality_tally.DIGESTS_PER_HOST):
        table.add(f"d{n}")
        table.add(f"d{n}")                                # every place taken by a digest seen twice
    assert table.add("new") == 0 and table.add("new") == 0 and len(table.seen) == quality_tally.DIGESTS_PER_HOST


def test_markers_are_searched_after_a_callback_that_yielded_nothing_whole():
    quality, stats = tally(["Unusual Traffic"])
    captcha = page(b"<div class='g-recaptcha'></div>")
    r = run()
    quality.answered(r, captcha)
    quality.item(r, {"title": "whole"})
    quality.parsed(r, captcha)                  # an item with every field: not searched
    assert not [name for name in counted(stats) if "q_m." in name]
    for body in (b"<div class='g-recaptcha'></div>", b"We saw UNUSUAL traffic from your network"):
        r = run()
        quality.answered(r, page(body))
        quality.parsed(r, page(body))
    assert {name: n for name, n in counted(stats).items() if "q_m." in name} == {
        "host/q_m.g-recaptcha/shop.example": 1, "host/q_m.unusual%20traffic/shop.example": 1}


def test_a_block_page_mid_batch_is_told_by_its_marker_or_by_one_body_for_most_of_its_hosts_last_pages():
    stats = BatchStats()
    quality = QualityTally(stats.inc, BlockMarkers(), "crawl_task_item", frozenset({"marker", "body"}), pages=10,
                           share=0.5)

    def judged(body, whole=False):
        r = run()
        quality.answered(r, page(body))
        if whole:
            quality.item(r, {"title": "x"})
        return quality.parsed(r, page(body))

    assert [judged(f"<h1>{n}</h1>".encode()) for n in range(6)] == [None] * 6
    down = b"<p>down for maintenance</p>"
    assert [judged(down) for _ in range(4)] == [None] * 4, "4 of the last 10 pages: not most of them yet"
    assert judged(down) == "body" and judged(down, whole=True) is None, "a page with a whole item is data"
    assert judged(b"<h1>new</h1>") is None, "another body is no block page, whatever the last pages had"
    assert judged(b"<div class='g-recaptcha'></div>") == "marker"
    r = run()
    quality.put_back(r, "marker")
    assert counted(stats)["host/q_b.marker/shop.example"] == 1
    off = QualityTally(stats.inc, BlockMarkers(), "crawl_task_item")       # the hold off: counted, never told
    r = run()
    off.answered(r, page(b"<div class='g-recaptcha'></div>"))
    assert off.parsed(r, page(b"<div class='g-recaptcha'></div>")) is None
