"""A block page is not data (issue 33, point 4), on every store: a host found serving a block page mid-batch (a
block marker, or one body for most of its last pages) is held behind its breaker; the task whose page it was goes
back to pending with no item stored, the host's other tasks wait for a probe, and the flag at the close says how
many tasks were put back. The sites are loopback shops (tests/httpserver.py, /shop/<n>) crawled by
tests/spiders/shop.py; each serves good pages, then its block page from /shop/<blocked_from> on, until the test
lifts it."""
from harness import InProcessBatch, quality_in_full, spider_factory, wait_for
from httpserver import TestSite
from spiders.shop import ShopTask

from batchd.hosts.breakers import BreakerPhase
from batchd.quality.measures import HostMeasures
from batchd.task import TaskState

GOOD = 12
DOWN_PAGE = "<html><head><title>Back soon</title></head><body><p>We are down for maintenance.</p></body></html>"
# Probes come quickly and often while the block lasts; no task is failed for the leases they cost it.
HOLD = {"HOST_BREAKER_PROBE": 0.2, "HOST_BREAKER_PROBE_MAX": 0.5, "BATCH_TASK_MAX_ATTEMPTS": 1000,
        "STATS_FLUSH_INTERVAL": 0.1}


def host(site) -> str:
    return site.url("/").split("/")[2]


def measures(runtime, site) -> HostMeasures:
    """The site's figures in the open batch, as the workers flushed them."""
    batch = runtime.store.last_batch()
    counts = dict(runtime.backend.counters.host_counts(batch.id)) if batch is not None else {}
    return HostMeasures.from_counts(counts.get(host(site), {}))


def stored_urls(backend) -> set:
    return {item["url"] for item in backend.items()}


def hold_then_lift(backend, site, pages: int, **settings) -> tuple:
    """Crawl `pages` shop pages of `site`, which serves its block page from GOOD + 1 on: once a task was put back,
    the host held and a probe met the block page again, check what is true while it is held, then lift the block
    and run the batch to its close. (the figures while held, the closed batch's record)."""
    backend.create_tasks([site.url(f"/shop/{n}") for n in range(1, pages + 1)])
    site.blocked_from = GOOD + 1
    blocked = set(range(GOOD + 1, pages + 1))
    factory = spider_factory(backend, ShopTask, **HOLD, **settings)
    runtime = factory().runtime
    runtime.store.open(runtime.layout)
    breakers = runtime.backend.host_breakers(runtime.namespace)
    with InProcessBatch(factory):
        # A failed probe doubles the wait (0.2 s, then 0.4 s) and keeps `since`: HOST_DOWN_GIVE_UP counts on.
        state = wait_for(lambda: (s := breakers.look(host(site))) is not None and s.next_probe - s.since > 0.5 and s,
                         message="a probe met the block page again")
        assert state.phase in (BreakerPhase.OPEN, BreakerPhase.PROBING)
        held = wait_for(lambda: sum(measures(runtime, site).put_back.values()) >= 2 and measures(runtime, site),
                        message="the probe's task put back too")
        states = backend.states()
        put_back = [n for n in blocked if states[n] != TaskState.DONE]
        assert put_back and all(states[n] in (TaskState.PENDING, TaskState.PROCESSING) for n in put_back)
        assert not {site.url(f"/shop/{n}") for n in put_back} & stored_urls(backend)
        site.blocked_from = None
        wait_for(lambda: backend.records() and backend.records()[-1]["is_done"], message="the batch closed")
    assert set(backend.states().values()) == {TaskState.DONE}
    assert breakers.look(host(site)) is None
    return held, backend.records()[-1]


def test_a_captcha_page_puts_its_task_back_and_holds_its_host_until_a_probe_answers_a_good_page(backend):
    with TestSite() as site:
        held, record = hold_then_lift(backend, site, GOOD + 6)
    assert set(held.put_back) == {"marker"} and held.markers["g-recaptcha"] >= 1
    # Every item stored came from a good page: the captcha pages' tasks were put back, then crawled whole.
    assert stored_urls(backend) == {site.url(f"/shop/{n}") for n in range(1, GOOD + 7)}
    figures = quality_in_full(record)
    put_back = figures["hosts"][host(site)]["put_back"]["marker"]
    flag = next(f for f in figures["flags"] if f["kind"] == "block_marker")
    assert f"; {put_back} task{'' if put_back == 1 else 's'} put back to pending, the host held" in flag["message"]
    assert record["outcome"] == "flagged"


def test_one_body_for_most_of_a_hosts_last_pages_puts_its_tasks_back_too(backend):
    with TestSite() as site:
        site.block_page = DOWN_PAGE
        held, record = hold_then_lift(backend, site, GOOD + 18)
    assert set(held.put_back) == {"body"} and not held.markers
    figures = quality_in_full(record)
    put_back = figures["hosts"][host(site)]["put_back"]["body"]
    flag = next(f for f in figures["flags"] if f["kind"] == "soft_block")
    assert f"; {put_back} task{'' if put_back == 1 else 's'} put back to pending, the host held" in flag["message"]
    # The pages served before the rule could tell (5 of the host's last 10 pages) were done with it, with no item.
    done_blocked = figures["hosts"][host(site)]["no_item"]
    assert 1 <= done_blocked < 18


def test_a_site_of_distinct_good_pages_is_never_held(backend):
    with TestSite() as site:
        backend.create_tasks([site.url(f"/shop/{n}") for n in range(1, 41)])
        factory = spider_factory(backend, ShopTask, **HOLD)
        runtime = factory().runtime
        with InProcessBatch(factory):
            wait_for(lambda: backend.records() and backend.records()[-1]["is_done"], message="the batch closed")
        assert runtime.backend.host_breakers(runtime.namespace).look(host(site)) is None
    figures = quality_in_full(backend.records()[-1])
    assert figures["hosts"][host(site)]["put_back"] == {} and figures["flags"] == []
    assert len(stored_urls(backend)) == 40


def test_the_hold_can_be_turned_off_and_needs_the_host_breaker(backend):
    with TestSite() as site:
        site.blocked_from = 1
        backend.create_tasks([site.url(f"/shop/{n}") for n in range(1, 11)])
        for off in ({"QUALITY_BLOCK_HOLD": False}, {"HOST_BREAKER_FAILURES": 0}, {"QUALITY_RULES_OFF": ["block_marker", "soft_block"]}):
            factory = spider_factory(backend, ShopTask, **HOLD, **off)
            if backend.records():
                backend.age_last_batch(days=7)
            before = len(backend.records())
            with InProcessBatch(factory):
                wait_for(lambda: len(backend.records()) == before + 1 and backend.records()[-1]["is_done"],
                         message=f"the batch closed with {off}")
            figures = quality_in_full(backend.records()[-1])
            assert figures["hosts"][host(site)]["put_back"] == {}, off
            assert set(backend.states().values()) == {TaskState.DONE}


