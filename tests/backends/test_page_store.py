"""What a re-crawl keeps (issue 21): the page table and the revisit table of every store, and the reset of
a "due" batch (BatchStore.reset_due_chunk). Each test runs on memory, MySQL and SQLite; what the SQL stores
made is read back with SQL (tests/taskdb.py), never through the code under test."""
import pytest

from batchd.errors import ConfigError
from batchd.model import PageRecord, Revisit, TaskLayout
from batchd.task import Move, TaskState

P, D, R, F = TaskState.PENDING, TaskState.DONE, TaskState.PROCESSING, TaskState.FAILED
LONG_URL = "http://x.invalid/" + "a" * (2000 - len("http://x.invalid/"))


def opened(backend, tasks=3, table="crawl_task"):
    store = backend.create_tasks([f"http://x.invalid/{i}" for i in range(1, tasks + 1)], table=table)
    store.open(TaskLayout(table))
    return store


def page(url, task_id=1, **fields):
    return PageRecord(url=url, task_id=task_id, **fields)


FULL = page("http://x.invalid/full", task_id=2, etag='W/"abc"', last_modified="Tue, 15 Nov 1994 12:45:26 GMT",
            vary='{"accept-language": "en"}', signature="0123456789abcdef0123456789abcdef01234567",
            whole_at=1700000000.25, seen_in=7, changed_in=5, redirected=True,
            parsed_by="89abcdef0123456789abcdef0123456789abcdef")


def test_pages_are_recalled_as_they_were_remembered(backend):
    store = opened(backend)
    bare = page("http://x.invalid/bare", whole_at=1.5, seen_in=1, changed_in=1)
    long_url = page(LONG_URL, task_id=3, etag='"e"', seen_in=2, changed_in=2)
    store.remember_pages([FULL, bare, long_url])
    assert store.recall_pages([FULL.url, bare.url, LONG_URL, "http://x.invalid/never"]) == {
        FULL.url: FULL, bare.url: bare, LONG_URL: long_url}
    assert store.recall_pages([]) == {}
    store.remember_pages([])        # nothing to keep: no statement fails on an empty list


def test_an_over_long_validator_is_kept_as_null_and_an_over_long_url_not_at_all(backend):
    store = opened(backend)
    long_etag = page("http://x.invalid/e", etag='"' + "e" * 5000 + '"', last_modified="Tue, 15 Nov 1994",
                     vary="v" * 1025, seen_in=3, changed_in=3)
    too_long = page(LONG_URL + "b", etag='"e"', seen_in=3, changed_in=3)
    store.remember_pages([long_etag, too_long, FULL])
    kept = store.recall_pages([long_etag.url, too_long.url, FULL.url])
    assert kept == {long_etag.url: page(long_etag.url, last_modified="Tue, 15 Nov 1994", seen_in=3, changed_in=3),
                    FULL.url: FULL}


def test_a_page_remembered_again_replaces_the_old_record(backend):
    store = opened(backend)
    store.remember_pages([FULL])
    newer = page(FULL.url, task_id=3, etag=None, last_modified="Wed, 16 Nov 1994 08:00:00 GMT", vary=None,
                 signature="f" * 40, whole_at=1700000100.5, seen_in=8, changed_in=8, redirected=False)
    store.remember_pages([newer])
    assert store.recall_pages([FULL.url]) == {FULL.url: newer}
    if backend.kind != "memory":
        assert backend.sql("SELECT COUNT(*) FROM crawl_task_page")[0][0] == 1


def test_forgotten_pages_are_gone_and_the_others_stay(backend):
    store = opened(backend)
    store.in_chunk = 2       # several statements: every chunk is deleted
    urls = [f"http://x.invalid/p{i}" for i in range(5)]
    store.remember_pages([page(url, seen_in=1, changed_in=1) for url in urls])
    store.forget_pages(urls[:4] + ["http://x.invalid/never"])
    store.forget_pages([])
    assert list(store.recall_pages(urls)) == [urls[4]]


def test_recall_reads_every_chunk(backend):
    store = opened(backend)
    store.in_chunk = 2
    pages = [page(f"http://x.invalid/c{i}", task_id=i, seen_in=1, changed_in=1) for i in range(5)]
    store.remember_pages(pages)
    assert store.recall_pages([p.url for p in pages] + [pages[0].url]) == {p.url: p for p in pages}


def test_pages_changed_in_a_batch_are_those_it_found_new_or_changed_by_url(backend):
    store = opened(backend)
    store.remember_pages([page("http://x.invalid/c", seen_in=4, changed_in=4),
                          page("http://x.invalid/a", seen_in=4, changed_in=4),
                          page("http://x.invalid/b", seen_in=4, changed_in=2),
                          page("http://x.invalid/d", seen_in=3, changed_in=3)])
    assert [p.url for p in store.pages_changed_in(4)] == ["http://x.invalid/a", "http://x.invalid/c"]
    assert store.pages_changed_in(4)[0] == page("http://x.invalid/a", seen_in=4, changed_in=4)
    assert [p.url for p in store.pages_changed_in(2)] == ["http://x.invalid/b"]
    assert store.pages_changed_in(9) == []


def test_revisits_are_kept_by_task_and_replaced(backend):
    store = opened(backend, tasks=5)
    store.in_chunk = 2
    first = [Revisit(task_id=i, interval=3600.0 * i, next_due=1700000000.5 + i, verdict="new", batch_id=1)
             for i in (1, 2, 3)]
    store.schedule_revisits(first)
    store.schedule_revisits([])
    assert store.revisits([1, 2, 3, 4]) == {"1": first[0], "2": first[1], "3": first[2]}
    again = Revisit(task_id=2, interval=5400.0, next_due=1700009999.0, verdict="unchanged", batch_id=2)
    store.schedule_revisits([again])
    assert store.revisits([2, 3]) == {"2": again, "3": first[2]}
    assert store.revisits([]) == {}


def test_a_due_reset_moves_exactly_the_due_rows(backend):
    store = opened(backend, tasks=8)
    states = {1: D, 2: D, 3: D, 4: P, 5: F, 6: R, 7: F, 8: D}
    for task_id, state in states.items():
        backend.set_state(task_id, state)
    store.schedule_revisits([Revisit(2, 60.0, 1000.0, "unchanged", 1),      # due: next_due == due_before
                             Revisit(3, 60.0, 1000.5, "unchanged", 1),      # not due
                             Revisit(6, 60.0, 10.0, "changed", 1)])         # due long ago
    # 1 has no revisit (due); 4 is pending already; 5 failed, kept by the move; 7 and 8 lie past `upper`.
    assert store.reset_due_chunk(None, 6, 1000.0, Move.RESET_KEEPING_FAILED) == 3
    assert backend.states() == {1: P, 2: P, 3: D, 4: P, 5: F, 6: P, 7: F, 8: D}
    assert store.reset_due_chunk(6, 8, 1000.0) == 2          # Move.RESET: the failed row too; after is exclusive
    assert backend.states() == {1: P, 2: P, 3: D, 4: P, 5: F, 6: P, 7: P, 8: P}
    assert store.reset_due_chunk(None, None, 1000.5) == 2    # 3 is due now; 5 goes with Move.RESET
    assert set(backend.states().values()) == {P}


def test_open_makes_the_tables_and_opening_again_keeps_what_they_hold(backend):
    store = opened(backend)
    if backend.kind != "memory":
        assert table_indexes(backend, "crawl_task_page") == {("url_key",), ("changed_in",)}
        assert table_indexes(backend, "crawl_task_revisit") == {("task_id",), ("next_due",)}
    store.remember_pages([FULL])
    store.schedule_revisits([Revisit(1, 60.0, 1000.0, "new", 1)])
    again = backend.store()
    again.open(TaskLayout("crawl_task"))
    assert again.keeps_pages
    assert again.recall_pages([FULL.url]) == {FULL.url: FULL}
    assert again.revisits([1]) == {"1": Revisit(1, 60.0, 1000.0, "new", 1)}


def test_a_task_table_whose_page_table_name_is_too_long_is_refused_naming_it(backend):
    table = "t" * 60       # a valid table name; `<t>_page` is 65 characters
    backend.create_tasks(["http://x.invalid/1"], table=table)
    with pytest.raises(ConfigError, match=table):
        backend.store().open(TaskLayout(table))


def test_a_page_table_made_by_something_else_is_refused_naming_it(shared_backend):
    shared_backend.create_tasks(["http://x.invalid/1"])
    shared_backend.sql("CREATE TABLE crawl_task_page (url_key CHAR(40) PRIMARY KEY, url TEXT)")
    with pytest.raises(ConfigError, match="page table .crawl_task_page. exists without column .task_id."):
        shared_backend.store().open(TaskLayout("crawl_task"))


def test_a_page_table_made_by_an_older_batchd_gets_the_parsed_by_column(shared_backend, caplog):
    opened(shared_backend)
    shared_backend.sql("ALTER TABLE crawl_task_page DROP COLUMN parsed_by")
    shared_backend.sql("INSERT INTO crawl_task_page (url_key, url, task_id, whole_at, seen_in, changed_in) "
                       "VALUES ('k', 'http://x.invalid/old', 1, 1.0, 1, 1)")
    with caplog.at_level("INFO", logger="batchd"):
        store = shared_backend.store()
        store.open(TaskLayout("crawl_task"))
    assert [r.getMessage() for r in caplog.records if "added the column" in r.getMessage()] == [
        f"page table {store.quote('crawl_task_page')}: added the column {store.quote('parsed_by')} (the spider "
        "that last parsed each page)"]
    store.remember_pages([FULL])
    assert store.recall_pages([FULL.url])[FULL.url] == FULL
    assert [row[0] for row in shared_backend.sql("SELECT parsed_by FROM crawl_task_page ORDER BY url")] == [
        FULL.parsed_by, None]                        # the older batchd's page: no spider known


def test_the_due_test_reads_the_revisit_table_by_its_primary_key(mysql_backend):
    """EXPLAIN of the statement reset_due_chunk runs: the subquery is a lookup of the revisit primary key."""
    store = opened(mysql_backend, tasks=200)
    store.schedule_revisits([Revisit(i, 60.0, float(i), "unchanged", 1) for i in range(1, 201)])
    mysql_backend.sql("UPDATE crawl_task SET batch_status = %s", (int(D),))
    mysql_backend.sql("ANALYZE TABLE crawl_task, crawl_task_revisit")
    ran = []
    execute = store.execute
    store.execute = lambda sql, params=(): ran.append((sql, list(params))) or execute(sql, params)
    assert store.reset_due_chunk(50, 150, 100.0) == 50       # 51..100 due; 101..150 not yet
    (sql, params), = ran
    plan = mysql_backend.sql("EXPLAIN " + sql, params)
    revisit = [(row[3], row[5]) for row in plan if row[2] == "r"]     # (type, key) of the revisit table
    assert revisit in ([("unique_subquery", "PRIMARY")], [("eq_ref", "PRIMARY")]), plan


def table_indexes(backend, table) -> set:
    """The column tuples of the table's indexes (primary key included), read from the database itself."""
    if backend.kind == "mysql":
        rows = backend.sql(f"SHOW INDEX FROM `{table}`")
        indexes: dict = {}
        for row in rows:
            indexes.setdefault(row[2], []).append((row[3], row[4]))
        return {tuple(column for _, column in sorted(columns)) for columns in indexes.values()}
    names = [row[1] for row in backend.sql("SELECT * FROM pragma_index_list(?)", (table,))]
    indexes = {tuple(row[2] for row in backend.sql("SELECT * FROM pragma_index_info(?)", (name,))) for name in names}
    key = tuple(name for name, in backend.sql("SELECT name FROM pragma_table_info(?) WHERE pk > 0 ORDER BY pk",
                                               (table,)))
    return indexes | {key}      # an INTEGER PRIMARY KEY is the rowid, in no index_list
