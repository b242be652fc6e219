"""Data quality on every store (issue 33, points 1-3): what the workers measure per host while they store,
the flags the master raises at close against the batches before, and what the batch record keeps. The
sites are loopback shops (tests/httpserver.py, /shop/<n>), one host each (its port), crawled by
tests/spiders/shop.py."""
import logging


from harness import next_batch, quality_in_full, spider_factory
from httpserver import TestSite
from spiders.shop import ShopTask

PAGES = 12
TITLE, PRICE = "crawl_task_item.title", "crawl_task_item.price"


def shop_pages(backend, *sites):
    backend.create_tasks([site.url(f"/shop/{n}") for site in sites for n in range(1, PAGES + 1)])


def crawl(backend, **settings) -> dict:
    """One batch of the shop spider, opened (the last one aged a week) and run to its close in-process; its
    record, the quality JSON read back."""
    record = next_batch(backend, spider_factory(backend, ShopTask, **settings))
    record["quality"] = quality_in_full(record)
    return record


def host(site) -> str:
    return site.url("/").split("/")[2]


def flags(record) -> set:
    """(host, kind, field) of the record's flags."""
    return {(f["host"], f["kind"], f["field"]) for f in record["quality"]["flags"]}


def test_a_first_batch_is_measured_per_host_and_flagged_only_by_markers_soft_blocks_and_floors(backend, site, caplog):
    """With QUALITY_BLOCK_HOLD off, the captcha site's tasks are done with its page (test_block_pages.py holds it)."""
    with TestSite() as captcha, TestSite() as odd:
        captcha.captcha, odd.price_text = True, "N/A"
        site.relaid.update({1, 2, 3})
        shop_pages(backend, site, captcha, odd)
        with caplog.at_level(logging.INFO, logger="batchd"):
            record = crawl(backend, QUALITY_MIN_COVERAGE={"price": 0.9}, QUALITY_BLOCK_HOLD=False)
    hosts = record["quality"]["hosts"]
    good = hosts[host(site)]
    assert good["items"] == {"crawl_task_item": PAGES} and good["tasks"] == PAGES and good["no_item"] == 0
    assert good["good"] == {"crawl_task_item.url": PAGES, TITLE: PAGES - 3, PRICE: PAGES}
    assert good["statuses"] == {"200": PAGES} and good["bodies"] == PAGES and good["top_body"] == 0
    blocked = hosts[host(captcha)]
    assert (blocked["items"], blocked["no_item"], blocked["top_body"]) == ({}, PAGES, PAGES)
    assert blocked["markers"] == {"g-recaptcha": PAGES}
    assert hosts[host(odd)]["refused"] == {PRICE: PAGES} and hosts[host(odd)]["good"][PRICE] == 0
    # No baseline: the changed titles and the captcha site's tasks without items are not flagged yet.
    assert flags(record) == {(host(captcha), "soft_block", None), (host(captcha), "block_marker", "g-recaptcha"),
                             (host(odd), "coverage_floor", PRICE)}
    assert record["outcome"] == "flagged"
    warnings = [r.getMessage() for r in caplog.records                # (the quality alert's line aside)
                if r.levelno == logging.WARNING and r.getMessage().startswith("batch 1 quality: ")]
    assert len(warnings) == 3 and all(len(line) <= 300 for line in warnings)
    assert any(r.getMessage().startswith("batch 1 done:") and r.getMessage().endswith(
        "3 quality flags (batchd quality)") for r in caplog.records)


def test_a_second_batch_is_flagged_against_the_first_and_unchanged_pages_keep_what_they_measured(backend, site):
    with TestSite() as emptied, TestSite() as unchanged:
        unchanged.shop_validators = True
        shop_pages(backend, site, emptied, unchanged)
        first = crawl(backend, REVALIDATE=True)
        assert first["outcome"] == "clean" and flags(first) == set()
        site.relaid.update({1, 2, 3, 4})                 # a third of the titles gone: coverage 1.0 -> 0.67
        emptied.sold_out.update(range(1, PAGES // 2 + 1))     # half the items gone, half the tasks empty
        second = crawl(backend, REVALIDATE=True)
    assert flags(second) == {(host(site), "coverage_drop", TITLE), (host(emptied), "items_drop", "crawl_task_item"),
                             (host(emptied), "no_items", None)}
    drop = next(f for f in second["quality"]["flags"] if f["kind"] == "coverage_drop")
    assert (drop["now"], drop["before"]) == (round(8 / 12, 4), 1.0)
    kept = second["quality"]["hosts"][host(unchanged)]
    assert (kept["kept"], kept["tasks"], kept["items"], kept["statuses"]) == (PAGES, 0, {}, {"304": PAGES})
    assert second["outcome"] == "flagged" and second["quality"]["compared"] == [first["id"]]


def test_every_rule_can_be_turned_off_and_the_checks_as_a_whole(backend, site):
    site.captcha = True
    shop_pages(backend, site)
    record = crawl(backend, QUALITY_RULES_OFF=["soft_block", "block_marker"])
    assert flags(record) == set() and record["outcome"] == "clean"
    record = crawl(backend, QUALITY_CHECKS=False)
    assert record["quality"] is None and record["outcome"] == "clean"
