"""render="auto" end to end, on real Chromium (issue 35, point 6): two loopback hosts (tests/httpserver.py), one
whose product a script writes from /data/<n>.json after the page loaded, one whose product is in its HTML (and
whose head loads the script /beacon/<n>: a beacon hit says a browser loaded the page). The shop spider asks
render="auto" (tests/spiders/shop.py). After a batch the script host is crawled rendered and the static host
plain, items are whole on both, the static host's later pages were fetched without a browser, the choice holds
in the next batch, and a coverage drop on the plain host sends it back to learning."""
import json
import logging

import pytest

from harness import next_batch, spider_factory
from httpserver import TestSite
from pacing import SEND_JITTER
from spiders.shop import AutoShopTask

from batchd.cli.quality_verb import render_json, render_quality
from batchd.hosts.render_choices import RenderMode
from batchd.reporting.quality_report import gather_quality
from batchd.web.html import quality_page

PAGES = 5          # per host; RENDER_AUTO_SAMPLE is 3
ONE_AT_A_TIME = {"SPIDER_THREAD_COUNT": 1}     # so that which pages were sampled is known: the first 3 of each


def host(site) -> str:
    return site.url("/").split("/")[2]


def product(site, n) -> dict:
    return {"url": site.url(f"/{'js-shop' if 'js' in site.kind else 'static'}/{n}"), "title": f"Product {n}",
            "price": f"{n}.99 EUR"}


def beacons(site) -> list:
    return [site.hits(f"/beacon/{n}") for n in range(1, PAGES + 1)]


@pytest.fixture
def two_hosts(shared_backend):
    """(backend, the script host, the static host), their tasks made: the static host's pages first."""
    with TestSite() as scripted, TestSite() as static:
        scripted.kind, static.kind = "js", "static"
        shared_backend.create_tasks([static.url(f"/static/{n}") for n in range(1, PAGES + 1)]
                                    + [scripted.url(f"/js-shop/{n}") for n in range(1, PAGES + 1)])
        yield shared_backend, scripted, static


def test_each_host_is_crawled_as_its_pages_need_and_the_choice_holds_across_batches(two_hosts, caplog):
    backend, scripted, static = two_hosts
    factory = spider_factory(backend, AutoShopTask, **ONE_AT_A_TIME)
    with caplog.at_level(logging.INFO, logger="batchd"):
        first = next_batch(backend, factory)
    items = sorted(backend.items(), key=lambda item: item["url"])
    assert items == sorted([product(s, n) for s in (scripted, static) for n in range(1, PAGES + 1)],
                           key=lambda item: item["url"])
    choices = factory().runtime.backend.renders
    assert choices.choice(host(scripted)).mode == RenderMode.RENDERED
    assert "plain gave 0 items for crawl_task_item, rendered 1" in choices.choice(host(scripted)).why
    assert choices.choice(host(static)).mode == RenderMode.PLAIN
    # The static host: its first 3 pages rendered (the beacon) and fetched plain, the other 2 plain only.
    assert beacons(static) == [1, 1, 1, 0, 0]
    assert [static.hits(f"/static/{n}") for n in range(1, PAGES + 1)] == [2, 2, 2, 1, 1]
    # The script host: decided at its first page; every page rendered (its data fetched), only the first twice.
    assert [scripted.hits(f"/data/{n}.json") for n in range(1, PAGES + 1)] == [1] * PAGES
    assert [scripted.hits(f"/js-shop/{n}") for n in range(1, PAGES + 1)] == [2, 1, 1, 1, 1]
    counters = json.loads(first["stats"])
    assert counters["render/auto_samples"] == 4
    assert counters["render/auto_decided/plain"] == 1 and counters["render/auto_decided/rendered"] == 1
    said = [r.getMessage() for r in caplog.records if "is crawled" in r.getMessage()]
    assert sorted(said) == sorted([f'render="auto": {host(static)} is crawled plain from now on (plain gave the '
                                   'same items on 3 sampled pages)',
                                   f'render="auto": {host(scripted)} is crawled rendered from now on (plain gave 0 '
                                   'items for crawl_task_item, rendered 1)'])

    shown_in_quality_and_on_the_dashboard(factory().runtime, scripted, static)

    second = next_batch(backend, factory)
    assert second["id"] == first["id"] + 1 and second["outcome"] == "clean"
    assert beacons(static) == [1, 1, 1, 0, 0]                          # no browser for the static host
    assert [static.hits(f"/static/{n}") for n in range(1, PAGES + 1)] == [3, 3, 3, 2, 2]
    assert [scripted.hits(f"/data/{n}.json") for n in range(1, PAGES + 1)] == [2] * PAGES
    assert [scripted.hits(f"/js-shop/{n}") for n in range(1, PAGES + 1)] == [3, 2, 2, 2, 2]   # no sample
    assert len(backend.items()) == 2 * 2 * PAGES and all(item["title"] and item["price"] for item in backend.items())


@pytest.mark.parametrize("shared_backend", ["sqlite"], indirect=True)    # (the choice's store: the test above)
def test_a_coverage_drop_sends_a_plain_host_back_to_learning(two_hosts, caplog):
    backend, scripted, static = two_hosts
    factory = spider_factory(backend, AutoShopTask, **ONE_AT_A_TIME)
    next_batch(backend, factory)
    choices = factory().runtime.backend.renders
    assert choices.choice(host(static)).mode == RenderMode.PLAIN
    static.relaid.update(range(1, PAGES + 1))          # the titles move to <h2>: the spider finds none
    with caplog.at_level(logging.INFO, logger="batchd"):
        flagged = next_batch(backend, factory)
    assert flagged["outcome"] == "flagged"
    relearnt = choices.choice(host(static))
    assert relearnt.mode == RenderMode.LEARNING and relearnt.why.startswith("coverage_drop: ")
    assert relearnt.batch == flagged["id"] and relearnt.samples == 0
    assert choices.choice(host(scripted)).mode == RenderMode.RENDERED          # not flagged: left alone
    assert any(r.getMessage().startswith(f'render="auto": {host(static)} is learning again, its data fell in batch '
                                         f'{flagged["id"]}') for r in caplog.records)
    # The next batch samples it again: a browser loads its first 3 pages, once more.
    before = beacons(static)
    static.relaid.clear()
    next_batch(backend, factory)
    assert [now - then for now, then in zip(beacons(static), before)] == [1, 1, 1, 0, 0]
    assert choices.choice(host(static)).mode == RenderMode.PLAIN


def shown_in_quality_and_on_the_dashboard(runtime, scripted, static):
    """`batchd quality` (its text and its JSON) and the dashboard's quality page list each host's choice."""
    report = gather_quality(runtime)
    rows = {row["host"]: row for row in report["render"]}
    assert {name: row["choice"] for name, row in rows.items()} == {host(scripted): "rendered", host(static): "plain"}
    assert rows[host(static)]["samples"] == 3 and rows[host(static)]["since"].endswith("+00:00")
    text = render_quality(report)
    choices = text.split('render="auto" per host (now):\n', 1)[1].splitlines()
    assert choices[0].split() == ["host", "crawled", "since", "why"]
    line = next(line for line in choices if line.startswith(host(scripted)))
    assert "rendered" in line and "plain gave 0 items for crawl_task_item, rendered 1" in line
    assert json.loads(render_json(report))["render"] == report["render"]
    page = quality_page(runtime.namespace, report, [runtime.namespace])
    assert 'id="render-choices-table"' in page
    assert f'<tr data-host="{host(static)}"><td>{host(static)}</td><td class="choice">plain</td>' in page


@pytest.mark.parametrize("shared_backend", ["sqlite"], indirect=True)
def test_a_plain_sample_keeps_the_hosts_pace(shared_backend, sends):
    """The plain half of a sample is a request to the host like any other: DOWNLOAD_DELAY holds between it and
    the rendered page before it."""
    with TestSite() as static:
        shared_backend.create_tasks([static.url(f"/static/{n}") for n in range(1, 4)])
        factory = spider_factory(shared_backend, AutoShopTask, DOWNLOAD_DELAY=0.4, RANDOMIZE_DOWNLOAD_DELAY=False,
                                 **ONE_AT_A_TIME)
        next_batch(shared_backend, factory)
        assert len(sends.gaps("/static/")) == 5, "3 pages rendered, and 3 fetched plain"
        assert min(sends.gaps("/static/")) >= 0.4 - SEND_JITTER
