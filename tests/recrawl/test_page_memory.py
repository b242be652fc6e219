"""Re-crawls on every store (issue 21): conditional requests (REVALIDATE), change detection by the items'
or the body's signature, gone pages, Vary and redirects as a browser cache, the revisit schedule of a due
batch, and the write-back gate: what is remembered of a page is kept only once its items landed."""
import json
import os

import pytest

import batchd as mw
from batchd.recrawl.pages import CONDITIONAL_META
from batchd.model import TaskLayout
from batchd.task import TaskState
from harness import InProcessBatch, next_batch, wait_for
from spiders.seed import CrawlTask

D, F = TaskState.DONE, TaskState.FAILED
REVALIDATING = {"REVALIDATE": True}


def factory(backend, cls, **settings):
    return lambda: cls(batch_store=backend.store(), settings=backend.settings(**settings))


def crawl(backend, cls=CrawlTask, **settings) -> dict:
    """One batch, opened (the last one aged a week) and run to its close in-process; its counters."""
    stats = next_batch(backend, factory(backend, cls, **settings))["stats"]
    return json.loads(stats) if isinstance(stats, str) else dict(stats or {})


def found(counters: dict) -> tuple:
    return tuple(counters.get(f"recrawl/{verdict}", 0) for verdict in ("new", "changed", "unchanged", "gone"))


def pages(backend, site, *numbers) -> None:
    backend.create_tasks([site.url(f"/versioned/{n}") for n in numbers])


def opened(backend):
    """The backend's store, open (the SQL ones make a new one each time)."""
    store = backend.store()
    store.open(TaskLayout("crawl_task"))
    return store


def titles(backend) -> list:
    return sorted(item["title"] for item in backend.items())


def test_a_second_batch_revalidates_and_a_304_is_neither_parsed_nor_stored_again(backend, site):
    pages(backend, site, 1, 2, 3, 4)
    first = crawl(backend, **REVALIDATING)
    assert found(first) == (4, 0, 0, 0) and site.status_counts(200) == 4
    assert titles(backend) == ["Title 1 v0", "Title 2 v0", "Title 3 v0", "Title 4 v0"]

    second = crawl(backend, **REVALIDATING)
    assert found(second) == (0, 0, 4, 0)
    assert (site.status_counts(200), site.status_counts(304)) == (4, 4)     # no body moved
    assert second.get("item/stored", 0) == 0 and len(backend.items()) == 4   # the earlier items stand
    assert set(backend.states().values()) == {D}
    assert "tasks: 0 new / 0 changed / 4 unchanged / 0 gone" in _close_line(backend)

    site.versions[2] = 1
    third = crawl(backend, **REVALIDATING)
    assert found(third) == (0, 1, 3, 0) and third["item/stored"] == 1
    assert site.status_counts(200) == 5
    assert "Title 2 v1" in titles(backend)
    changed = opened(backend).pages_changed_in(backend.records()[-1]["id"])
    assert [page.url for page in changed] == [site.url("/versioned/2")]     # what a consumer looks for


def _close_line(backend) -> str:
    from batchd.settle.batch_stats import report
    record = backend.records()[-1]
    stats = record["stats"]
    return report(record["id"], json.loads(stats) if isinstance(stats, str) else stats)


def test_without_validators_the_items_signature_tells_unchanged_and_they_are_not_written_again(backend, site):
    site.validators = "none"
    pages(backend, site, 1, 2, 3)
    crawl(backend, **REVALIDATING)
    site.versions[3] = 1
    second = crawl(backend, **REVALIDATING)
    assert site.status_counts(304) == 0 and site.status_counts(200) == 6      # every page fetched whole
    assert found(second) == (0, 1, 2, 0)
    assert (second["item/stored"], second["item/unchanged"]) == (1, 2)
    assert titles(backend) == ["Title 1 v0", "Title 2 v0", "Title 3 v0", "Title 3 v1"]


class CountingParses(CrawlTask):
    parsed: list = []

    def parse(self, request, response, task):
        type(self).parsed.append(task["id"])
        yield from super().parse(request, response, task)


def test_a_body_signature_spares_the_parse_of_an_unchanged_body(backend, site):
    site.validators = "none"
    site.same_items.update({1, 2})          # only a comment in the page changes: its items would not
    pages(backend, site, 1, 2)
    CountingParses.parsed = []
    crawl(backend, CountingParses, CHANGE_SIGNATURE="body", **REVALIDATING)
    second = crawl(backend, CountingParses, CHANGE_SIGNATURE="body", **REVALIDATING)
    assert found(second) == (0, 0, 2, 0) and sorted(CountingParses.parsed) == [1, 2]     # not parsed again
    site.versions[1] = 1
    third = crawl(backend, CountingParses, CHANGE_SIGNATURE="body", **REVALIDATING)
    assert found(third) == (0, 1, 1, 0) and sorted(CountingParses.parsed) == [1, 1, 2]


class ActsOnUnchanged(CrawlTask):
    def task_requests(self, task):
        yield mw.Request(task["url"], callback=self.parse, on_unchanged=self.still_there)

    def still_there(self, request, response, task):
        yield {"url": task["url"], "title": f"still there ({response.status_code})"}


class AlwaysWhole(CrawlTask):
    def task_requests(self, task):
        yield mw.Request(task["url"], callback=self.parse, revalidate=False)


class Rendered(CrawlTask):
    def task_requests(self, task):
        yield mw.Request(task["url"], callback=self.parse, render=True)


@pytest.mark.skipif(not os.path.exists("/usr/bin/chromedriver"), reason="apt install chromium chromium-driver")
@pytest.mark.parametrize("shared_backend", ["sqlite"], indirect=True)      # (what a store keeps: the tests above)
def test_a_rendered_page_is_loaded_whole_and_its_items_still_tell_unchanged(shared_backend, site):
    pages(shared_backend, site, 1)
    crawl(shared_backend, Rendered, **REVALIDATING)
    second = crawl(shared_backend, Rendered, **REVALIDATING)
    assert site.status_counts(304) == 0 and site.status_counts(200) == 2, "a browser's navigation goes whole"
    assert found(second) == (0, 0, 1, 0) and second.get("item/stored", 0) == 0


def test_on_unchanged_is_called_for_a_304_and_revalidate_false_always_fetches_whole(backend, site):
    pages(backend, site, 1, 2)
    crawl(backend, ActsOnUnchanged, **REVALIDATING)
    second = crawl(backend, ActsOnUnchanged, **REVALIDATING)
    assert found(second) == (0, 0, 2, 0) and site.status_counts(304) == 2
    assert titles(backend).count("still there (304)") == 2
    third = crawl(backend, AlwaysWhole, **REVALIDATING)
    assert site.status_counts(304) == 2 and site.status_counts(200) == 4     # no conditional request
    assert found(third) == (0, 0, 2, 0)                                       # its items still tell


def test_a_page_gone_drops_what_was_kept_and_counts_as_gone(backend, site):
    pages(backend, site, 1, 2)
    crawl(backend, **REVALIDATING)
    site.gone.add(2)
    second = crawl(backend, **REVALIDATING)
    assert found(second) == (0, 0, 1, 1)
    assert backend.states() == {1: D, 2: F}
    url = site.url("/versioned/2")
    assert url not in opened(backend).recall_pages([url])
    site.gone.clear()
    third = crawl(backend, **REVALIDATING)
    assert found(third) == (1, 0, 1, 0)                                       # back: new again


class SaysItsLanguage(CrawlTask):
    language = "fr"

    def task_requests(self, task):
        yield mw.Request(task["url"], callback=self.parse, headers={"Accept-Language": type(self).language})


def test_vary_revalidates_only_a_request_with_the_headers_sent_then(backend, site):
    site.vary = "Accept-Language"
    pages(backend, site, 1)
    SaysItsLanguage.language = "fr"
    crawl(backend, SaysItsLanguage, **REVALIDATING)
    crawl(backend, SaysItsLanguage, **REVALIDATING)
    assert site.status_counts(304) == 1                                       # same language: revalidated
    SaysItsLanguage.language = "de"
    crawl(backend, SaysItsLanguage, **REVALIDATING)
    assert (site.status_counts(304), site.status_counts(200)) == (1, 2)      # another variant: fetched whole
    site.vary = "*"
    crawl(backend, SaysItsLanguage, **REVALIDATING)        # revalidated as kept; its 304 says Vary: *
    crawl(backend, SaysItsLanguage, **REVALIDATING)
    assert (site.status_counts(304), site.status_counts(200)) == (2, 3)      # Vary: * is never revalidated


def test_a_page_reached_through_a_redirect_is_fetched_whole_and_its_items_tell(backend, site):
    backend.create_tasks([site.url("/redirect?to=/versioned/5")])
    crawl(backend, **REVALIDATING)
    second = crawl(backend, **REVALIDATING)
    assert (site.status_counts(304), site.status_counts(200)) == (0, 2)
    assert found(second) == (0, 0, 1, 0)


def test_every_url_is_fetched_whole_once_its_last_whole_fetch_is_revisit_interval_max_old(backend, site):
    pages(backend, site, 1, 2)
    crawl(backend, **REVALIDATING)
    store = opened(backend)
    url = site.url("/versioned/1")
    kept = store.recall_pages([url])[url]
    store.remember_pages([type(kept)(**{**vars(kept), "whole_at": kept.whole_at - 31 * 86400})])
    crawl(backend, **REVALIDATING)
    assert (site.status_counts(304), site.status_counts(200)) == (1, 3)     # page 1 whole, page 2 revalidated


def test_a_due_batch_resets_the_tasks_whose_revisit_is_due_and_adapts_their_interval(backend, site):
    pages(backend, site, 1, 2, 3)
    due = {"BATCH_MODE": "due", "REVISIT_INTERVAL_MIN": 3600.0, "REVISIT_INTERVAL_MAX": 30 * 86400.0}
    crawl(backend, **due)
    store = opened(backend)
    first = store.revisits([1, 2, 3])
    assert {r.verdict for r in first.values()} == {"new"} and {r.interval for r in first.values()} == {7 * 86400.0}
    # Tasks 1 and 2 fall due; task 3 is not due for a week.
    store.schedule_revisits([type(r)(**{**vars(r), "next_due": r.next_due - 8 * 86400}) for key, r in first.items()
                             if key in ("1", "2")])
    site.versions[2] = 1
    second = crawl(backend, **due)
    record = backend.records()[-1]
    assert record["total_count"] == 2 and found(second) == (0, 1, 1, 0)
    assert json.loads(record["opening"])["mode"] == "due"
    after = store.revisits([1, 2, 3])
    assert after["1"].interval == 7 * 86400.0 * 1.4 and after["1"].verdict == "unchanged"
    assert after["2"].interval == 7 * 86400.0 * 0.8 and after["2"].verdict == "changed"
    assert after["3"] == first["3"]


def test_nothing_is_remembered_of_a_page_whose_items_did_not_land(backend, site):
    """The write-back gate: task 2's item stays in the buffer while a thread is busy with task 1 (a worker
    with nothing in hand flushes at once); its page is not remembered until the item lands, and then
    with its write-back."""
    backend.create_tasks([site.url("/slow?seconds=3"), site.url("/versioned/1")])
    url = site.url("/versioned/1")
    held = {"ITEM_FLUSH_INTERVAL": 30.0, "ITEM_FLUSH_SIZE": 10000, **REVALIDATING}
    with InProcessBatch(factory(backend, CrawlTask, **held)) as batch:
        worker = next(loop for name, _, _, loop in batch.loops if name.startswith("worker"))
        wait_for(lambda: worker.ledger.totals()["unflushed"] == 1, message="task 2's item buffered")
        assert opened(backend).recall_pages([url]) == {} and backend.states()[2] != D
        wait_for(lambda: backend.states() == {1: D, 2: D}, message="both tasks done once the items landed")
    assert url in opened(backend).recall_pages([url])


def test_a_conditional_request_carries_the_kept_validators(backend, site):
    """What goes over the wire: If-None-Match and If-Modified-Since of the last 2xx, and the choice kept in
    the request's meta."""
    seen = []

    class Looks(CrawlTask):       # the same spider in both batches: a changed one would trust no validator
        def task_requests(self, task):
            yield mw.Request(task["url"], callback=self.parse, on_unchanged=self.look)

        def look(self, request, response, task):
            seen.append((response.sent_headers.get("If-None-Match"), response.meta[CONDITIONAL_META].etag))
            return []

    pages(backend, site, 1)
    crawl(backend, Looks, **REVALIDATING)
    url = site.url("/versioned/1")
    kept = opened(backend).recall_pages([url])[url]
    assert kept.etag == '"1-0"' and kept.last_modified and kept.signature and kept.seen_in == 1
    crawl(backend, Looks, **REVALIDATING)
    assert seen == [('"1-0"', '"1-0"')]


def test_a_project_batchd_init_writes_revalidates(tmp_path):
    from batchd.cli.starter import CONFIG_FILE, write_starter
    from batchd.config import Settings, load_settings
    write_starter(str(tmp_path))
    assert load_settings(config_files=tmp_path / CONFIG_FILE).REVALIDATE is True
    assert Settings().REVALIDATE is False


def test_the_threads_of_a_worker_look_pages_up_together_each_getting_its_own():
    import threading
    from batchd.errors import BackendUnavailable
    from batchd.recrawl.page_memory import Recall
    calls, first_call, gate = [], threading.Event(), threading.Event()

    def fetch(urls):
        calls.append(urls)
        first_call.set()
        gate.wait(10)                 # the first round trip is slow: the others ask meanwhile
        if "http://x.invalid/down" in urls:
            raise BackendUnavailable("down", "MySQL")
        return {url: f"record of {url}" for url in urls}

    recall, got = Recall(fetch), {}

    def ask(n):
        try:
            got[n] = recall(f"http://x.invalid/{n}")
        except BackendUnavailable as e:
            got[n] = e

    first = threading.Thread(target=ask, args=(0,))
    first.start()
    first_call.wait(10)
    others = [threading.Thread(target=ask, args=(n,)) for n in (*range(1, 8), "down")]
    for thread in others:
        thread.start()
    wait_for(lambda: sum(1 for t in threading.enumerate() if t in others) == 8, message="eight threads asking")
    gate.set()
    for thread in [first, *others]:
        thread.join(10)
    assert len(calls) == 2 and calls[0] == ["http://x.invalid/0"] and len(calls[1]) == 8    # 9 asks, 2 trips
    assert isinstance(got["down"], BackendUnavailable)
    assert all(isinstance(got[n], BackendUnavailable) for n in range(1, 8))   # the same trip's error: each told
    assert got[0] == "record of http://x.invalid/0"


class PagesUnreachable(mw.MemoryBatchStore):
    def recall_pages(self, urls):
        from batchd.errors import BackendUnavailable
        raise BackendUnavailable("the page table is out of reach", "memory")


def test_pages_out_of_reach_send_the_requests_whole_and_lose_nothing(failed_items_path, site, caplog):
    from taskdb import MemoryBackend
    memory_backend = MemoryBackend(failed_items_path)
    memory_backend.create_tasks([site.url(f"/versioned/{n}") for n in (1, 2, 3)], store_class=PagesUnreachable)
    with caplog.at_level("WARNING", logger="batchd"):
        counters = crawl(memory_backend, **REVALIDATING)
    assert found(counters) == (3, 0, 0, 0) and counters["item/stored"] == 3
    assert set(memory_backend.states().values()) == {D} and site.status_counts(200) == 3
    said = [r.getMessage() for r in caplog.records if "page records not read" in r.getMessage()]
    assert len(said) == 1 and "the page table is out of reach" in said[0]


class KeepsNoPages(mw.MemoryBatchStore):
    """A store of the user's own written before re-crawls: it keeps no page records nor revisits."""
    keeps_pages = False


def test_a_store_that_keeps_no_pages_refuses_revalidate_and_due_naming_the_setting(failed_items_path, site):
    import pytest
    from batchd.errors import ConfigError
    from taskdb import MemoryBackend
    backend = MemoryBackend(failed_items_path)
    backend.create_tasks([site.url("/versioned/1")], store_class=KeepsNoPages)
    with pytest.raises(ConfigError, match=r'^BATCH_MODE = "due": KeepsNoPages.* keeps no revisits'):
        CrawlTask(batch_store=backend.store(), settings=backend.settings(BATCH_MODE="due")).runtime.master()
    with pytest.raises(ConfigError, match=r"^REVALIDATE: the store KeepsNoPages.* keeps no page records"):
        factory(backend, CrawlTask, **REVALIDATING)().runtime.worker()       # as it is built, as the master is


def test_revisit_bounds_the_wrong_way_round_are_one_line_naming_both(failed_items_path, site):
    import pytest
    from batchd.errors import ConfigError
    from taskdb import MemoryBackend
    backend = MemoryBackend(failed_items_path)
    backend.create_tasks([site.url("/versioned/1")])
    settings = backend.settings(BATCH_MODE="due", REVISIT_INTERVAL_MIN=7200.0, REVISIT_INTERVAL_MAX=3600.0)
    with pytest.raises(ConfigError, match=r"^setting REVISIT_INTERVAL_MIN: 7200 is more than REVISIT_INTERVAL_MAX "
                                          r"\(3600\)$"):
        CrawlTask(batch_store=backend.store(), settings=settings).runtime.master()
