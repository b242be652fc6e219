"""A changed spider parses again (issue 33, point 5): the print of the spider's code and of the settings that
shape what a page says; on every store, a batch whose spider file was edited trusts no validator (it fetches
every page whole and runs every callback, and says so at its opening), `refetch` forces that once, the next
batch revalidates again, and `batchd status --history` shows where; an older record table gets the column."""
import logging
import os
import subprocess
import sys
import textwrap

import pytest

from batchd.cli.status_text import render_history
from batchd.config import load_settings
from batchd.reporting.status import gather_history
from batchd.recrawl.spider_print import code_digest, settings_digest, source_files, spider_print
from batchd.service.lifecycle import StopFlag
from batchd.supervisor.loader import load_spider_class
from batchd.task import TaskState
from procs import HERE, ROOT
from harness import create_old_record_table, make_master, next_batch, spider_factory
from spiders.seed import CrawlTask
from supervised import batchd
from taskdb import SqliteBackend

REVALIDATING = {"REVALIDATE": True}

SHOP = '''
from spiders.seed import CrawlTask
from supervised import batchd
from taskdb import SqliteBackend


class Shop(CrawlTask):
    parsed = []          # the tasks whose callback ran (a new list each time the file is loaded)

    def parse(self, request, response, task):
        type(self).parsed.append(task["id"])
        yield from super().parse(request, response, task)
'''
# The same spider with a field more in its items: what an edit between two batches looks like.
SHOP_WITH_LENGTH = SHOP.replace("        yield from super().parse(request, response, task)\n", '''\
        for item in super().parse(request, response, task):
            yield {**item, "length": len(response.text)}
''')


def write(path, source: str) -> None:
    path.write_text(textwrap.dedent(source))


def shop(path) -> type:
    """The spider as the file says now (loaded anew, as a new master and new workers would)."""
    return load_spider_class(f"{path}:Shop")


# -- the print
def test_the_code_print_follows_the_source_not_its_comments_or_layout(tmp_path):
    path = tmp_path / "shop.py"
    write(path, SHOP)
    first = code_digest(shop(path))
    write(path, SHOP.replace("class Shop(CrawlTask):", "# a comment\n\nclass Shop( CrawlTask ):  # and another"))
    assert code_digest(shop(path)) == first
    write(path, SHOP_WITH_LENGTH)
    assert code_digest(shop(path)) != first
    write(path, SHOP.replace("    parsed = []", '    """Counts its callbacks."""\n    parsed = []'))
    assert code_digest(shop(path)) != first, "a docstring is part of the code"


def test_the_code_print_is_the_same_in_every_process(tmp_path):
    """A set in the source (`in {...}`) compiles to a constant whose repr follows the process's string hashes."""
    path = tmp_path / "shop.py"
    write(path, SHOP.replace("type(self).parsed.append(task[\"id\"])",
                             'type(self).parsed.append(task["id"] in {"a", "b", "c", "d", "e", "f"})'))
    digests = {subprocess.run([sys.executable, "-c", "import sys; from batchd.recrawl.spider_print import code_digest; "
                               "from batchd.supervisor.loader import load_spider_class; "
                               "print(code_digest(load_spider_class(sys.argv[1])))", f"{path}:Shop"],
                              env={**os.environ, "PYTHONHASHSEED": str(seed), "PYTHONPATH": os.pathsep.join([HERE, ROOT])},
                              capture_output=True, text=True, check=True).stdout for seed in range(4)}
    assert len(digests) == 1 and code_digest(shop(path)) + "\n" in digests


def test_a_spider_in_a_package_is_printed_with_the_whole_package_and_its_base_classes():
    """tests/spiders/ is a package: every module of it counts (items and helpers sit beside a spider)."""
    files = source_files(CrawlTask)
    assert {"spiders/seed.py", "spiders/__init__.py", "spiders/marking.py"} <= set(files)
    assert not any(name.startswith("batchd") for name in files)       # batchd's own code is not the spider's


def test_the_settings_print_follows_the_headers_sent_not_the_pace():
    base = settings_digest(load_settings({}))
    assert settings_digest(load_settings({"DOWNLOAD_DELAY": 2.0, "REVALIDATE": True})) == base
    assert settings_digest(load_settings({"DEFAULT_REQUEST_HEADERS": {"Accept-Language": "fr"}})) != base
    assert settings_digest(load_settings({"USER_AGENT": "mobile"})) != base
    assert settings_digest(load_settings({"HOSTS": {"a.example": {"headers": {"Cookie": "x=1"}}}})) != base
    assert settings_digest(load_settings({"HOSTS": {"a.example": {"delay": 3.0}}})) == base


# -- batches on every store
def test_an_edited_spider_fetches_whole_and_parses_every_page_once_and_refetch_forces_it(backend, site, tmp_path,
                                                                                          caplog):
    path = tmp_path / "shop.py"
    write(path, SHOP)
    backend.create_tasks([site.url(f"/versioned/{n}") for n in range(1, 5)])

    def batch(**master_options) -> type:
        spider = shop(path)
        next_batch(backend, spider_factory(backend, spider, **REVALIDATING), **master_options)
        return spider

    with caplog.at_level(logging.INFO, logger="batchd"):
        assert sorted(batch().parsed) == [1, 2, 3, 4]                        # batch 1: every page new
        assert batch().parsed == [] and site.status_counts(304) == 4         # batch 2: 304s, no callback
        write(path, SHOP_WITH_LENGTH)
        third = batch()                                                       # batch 3: the spider changed
        assert sorted(third.parsed) == [1, 2, 3, 4]                          # 4 callbacks of 4
        assert (site.status_counts(200), site.status_counts(304)) == (8, 4)  # every page whole
        assert sum("length" in item for item in backend.items()) == 4       # what the new code yields, stored
        assert batch().parsed == [] and site.status_counts(304) == 8         # batch 4: trusted again
        assert sorted(batch(refetch=True).parsed) == [1, 2, 3, 4]           # batch 5: --refetch
        assert batch().parsed == [] and site.status_counts(304) == 12        # batch 6: once only
    opened = [r.getMessage() for r in caplog.records if "trusts no validator" in r.getMessage()]
    assert opened == [
        "batch 3 trusts no validator: the spider's code changed since batch 2; every page is fetched whole and every "
        "callback runs",
        "batch 5 trusts no validator: --refetch asked for it; every page is fetched whole and every callback runs"]

    history = gather_history(CrawlTask(batch_store=backend.store(), settings=backend.settings()).runtime, 10)
    assert [(e["id"], e["spider"]["changed"], e["spider"]["forced"]) for e in history if e["spider"]["refetched"]] == [
        (5, [], True), (3, ["code"], False)]
    assert len({e["spider"]["code"] for e in history}) == 2 and len({e["spider"]["settings"] for e in history}) == 1
    marks = {line.split()[0]: line.rsplit("  ", 1)[-1].strip() for line in render_history(history).splitlines()[1:]}
    assert (marks["3"], marks["5"]) == ("code changed", "--refetch")
    assert not any("changed" in marks[n] or "refetch" in marks[n] for n in ("1", "2", "4", "6"))


def test_pages_a_batch_of_the_changed_spider_did_not_fetch_are_parsed_again_by_a_later_one(backend, site, tmp_path):
    """Per page as well as per batch: incremental batches crawl some tasks only, and a page keeps the spider
    that parsed it last, so a batch whose spider did not change since the batch before still parses again
    the pages the old spider parsed."""
    path = tmp_path / "shop.py"
    write(path, SHOP)
    backend.create_tasks([site.url(f"/versioned/{n}") for n in range(1, 5)])

    def batch(*pending) -> list:
        for task_id in pending:
            backend.set_state(task_id, TaskState.PENDING)
        spider = shop(path)
        next_batch(backend, spider_factory(backend, spider, BATCH_MODE="incremental", **REVALIDATING))
        return sorted(spider.parsed)

    assert batch() == [1, 2, 3, 4]                    # batch 1: the new tasks
    write(path, SHOP_WITH_LENGTH)
    assert batch(1, 2) == [1, 2]                      # batch 2: the spider changed; two tasks crawled
    assert batch(1, 2, 3, 4) == [3, 4]                # batch 3: 1 and 2 revalidate, 3 and 4 meet the new code
    assert (site.status_counts(200), site.status_counts(304)) == (8, 2)
    assert batch(1, 2, 3, 4) == [] and site.status_counts(304) == 6


def test_a_change_of_the_headers_sent_is_a_change_of_the_spider(backend, site):
    backend.create_tasks([site.url("/versioned/1")])
    next_batch(backend, spider_factory(backend, CrawlTask, **REVALIDATING))
    next_batch(backend, spider_factory(backend, CrawlTask, DEFAULT_REQUEST_HEADERS={"Accept-Language": "fr"},
                                        **REVALIDATING))
    assert (site.status_counts(200), site.status_counts(304)) == (2, 0)
    newest = backend.store()
    newest.open(CrawlTask(batch_store=newest, settings=backend.settings()).runtime.layout)
    assert newest.last_batch().spider.changed == ("settings",)


# -- the command
@pytest.fixture
def sqlite(tmp_path, failed_items_path):
    """The SQLite store alone: the command runs a supervisor, its master and a worker on it, no Redis needed."""
    backend = SqliteBackend(tmp_path / "batchd.db", failed_items_path)
    yield backend
    backend.close()


def test_batchd_run_refetch_fetches_the_batch_it_opens_whole_and_status_history_marks_it(sqlite, tmp_path, site):
    path = tmp_path / "shop.py"
    write(path, SHOP)
    sqlite.create_tasks([site.url(f"/versioned/{n}") for n in range(1, 4)])

    def run(*options):
        if sqlite.records():
            sqlite.age_last_batch(days=7)
        done = batchd("run", f"{path}:Shop", "--once", "--workers", "1", *options, backend=sqlite,
                      env={"BATCHD_REVALIDATE": "true"})
        assert done.returncode == 0, done.stderr
        return done.stderr

    run()
    said = run("--refetch")
    assert (site.status_counts(200), site.status_counts(304)) == (6, 0)          # batch 2 fetched whole
    assert "--refetch: the next batch it opens fetches every page whole" in said
    assert "batch 2 trusts no validator: --refetch asked for it" in said
    run()
    assert (site.status_counts(200), site.status_counts(304)) == (6, 3)          # batch 3 revalidates
    history = batchd("status", f"{path}:Shop", "--history", backend=sqlite).stdout.splitlines()
    assert history[0].split()[-1] == "spider" and history[2].split()[0] == "2"
    assert history[2].endswith("--refetch") and not history[1].endswith("--refetch")


# -- the record's column
def test_an_old_record_table_gets_the_spider_print_column(shared_backend):
    shared_backend.create_tasks(["http://x.invalid/1"])
    create_old_record_table(shared_backend)
    _, spider = make_master(shared_backend)
    store, printed = spider.runtime.store, spider_print(CrawlTask, spider.runtime.settings)
    assert store.last_batch().spider is None                       # an older batchd's batch: its spider unknown
    store.record_spider(1, printed)
    assert store.last_batch().spider == printed and shared_backend.records()[0]["spider_print"]


def test_a_master_taking_over_an_opening_keeps_the_spider_its_opener_did_not(backend):
    backend.create_tasks(["http://x.invalid/1"])
    master, spider = make_master(backend)
    store = spider.runtime.store
    store.insert_batch(7, "day", 0)            # the master that opened it stopped before it kept anything more
    master.patrol(StopFlag())
    assert store.last_batch().spider == spider_print(CrawlTask, spider.runtime.settings)
