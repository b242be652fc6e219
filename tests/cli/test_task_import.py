"""`batchd tasks add|import` check what they add (batchd/cli/task_import.py): absolute http(s) URLs that fit the
column, bad rows named by place with nothing added unless --skip-bad (exit 65), duplicates of the table or the
input left out unless --allow-duplicates, a summary in plain English; on real SQLite and real MariaDB, with the
table batchd makes, the seed's table of the specification, and a table whose URL column is indexed."""
import logging
import tracemalloc
from types import SimpleNamespace

import pytest

import batchd
from batchd.backends.task_load import UNDECLARED_MOST
from batchd.cli.task_import import MOST_SHOWN, RefusedInput, add_urls, import_csv
from batchd.errors import ExitCode
from batchd.model import TaskLayout
from supervised import SEED, batchd as batchd_command
from taskdb import SQLITE_TASK_TABLE_DDL, TASK_TABLE_DDL, MysqlBackend, SqliteBackend

LAYOUT = TaskLayout("crawl_task")
# The tables a load may meet: the one batchd makes, the specification's seed (no index on url), and the seed
# with its url column indexed (the load then looks chunks up in the table itself).
SHAPES = ("made", "seed", "indexed")


@pytest.fixture(params=["sqlite", "mysql"])
def db(request, tmp_path, failed_items_path):
    if request.param == "sqlite":
        backend = SqliteBackend(tmp_path / "tasks.db", failed_items_path)
        backend.url = f"sqlite:///{backend.path}"
    else:
        backend = MysqlBackend(request.getfixturevalue("mysql_url"), request.getfixturevalue("redis_url"),
                               failed_items_path)
        backend.url = backend.mysql_url
    backend.table = LAYOUT.table
    yield backend
    backend.close()


def make_table(db, shape: str) -> None:
    if shape == "made":
        return          # the load's create_task_table makes it
    if db.kind == "sqlite":
        db.sql(SQLITE_TASK_TABLE_DDL.format(table=LAYOUT.table))
    else:
        db.sql(TASK_TABLE_DDL.format(table=LAYOUT.table, index=""))
    if shape == "indexed":
        db.sql(f"CREATE INDEX idx_url ON {q(db, LAYOUT.table)} ({q(db, 'url')}{'(255)' if db.kind == 'mysql' else ''})")


def q(db, name: str) -> str:
    return f'"{name}"' if db.kind == "sqlite" else f"`{name}`"


def runtime(db):
    """What task_import reads of a runtime: the store (the real one) and the layout."""
    return SimpleNamespace(store=batchd.SqliteBatchStore(db.path) if db.kind == "sqlite"
                           else batchd.MysqlBatchStore(db.mysql_url), layout=LAYOUT)


def urls_in(db) -> list:
    return [url for (url,) in db.sql(f"SELECT {q(db, 'url')} FROM {q(db, LAYOUT.table)} ORDER BY {q(db, 'id')}")]


@pytest.fixture
def logged():
    """The batchd logger's records, as 'LEVEL message' lines (it may not propagate: setup_logging)."""
    lines: list = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(f"{record.levelname} {record.getMessage()}")

    logger, handler = logging.getLogger("batchd"), Keep()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield lines
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_bad_url_is_named_by_its_place_and_nothing_is_added(db, shape, logged):
    make_table(db, shape)
    report = add_urls(runtime(db), ["http://a.example/1", "htp:/x", "http:///no-host", "https://b.example/ x",
                                    "/relative", "http://c.example/2"])
    assert report.exit_code == ExitCode.DATAERR and report.added == 0
    assert urls_in(db) == []
    errors = [line for line in logged if line.startswith("ERROR")]
    assert errors[:4] == [
        "ERROR URL 2 of the command line: not an absolute http or https URL (its scheme is 'htp'): 'htp:/x'",
        "ERROR URL 3 of the command line: no host in the URL: 'http:///no-host'",
        "ERROR URL 4 of the command line: a space or control character at position 19 of the URL: "
        "'https://b.example/ x'",
        "ERROR URL 5 of the command line: not an absolute http or https URL (it has no scheme): '/relative'"]
    assert errors[4].startswith("ERROR nothing added to crawl_task from the command line: 4 bad URLs "
                                "(--skip-bad adds the others)")


@pytest.mark.parametrize("shape", SHAPES)
def test_skip_bad_adds_the_good_ones_and_counts_the_bad(db, shape, logged):
    make_table(db, shape)
    report = add_urls(runtime(db), ["http://a.example/1", "htp:/x", "HTTPS://b.example:8443/p?q=1#f"], skip_bad=True)
    assert (report.exit_code, report.added, report.bad) == (ExitCode.OK, 2, 1)
    assert urls_in(db) == ["http://a.example/1", "HTTPS://b.example:8443/p?q=1#f"]
    assert logged[-1].startswith("INFO 2 tasks added to crawl_task from the command line, 0 duplicates skipped, "
                                 "1 bad URL rejected (")


@pytest.mark.parametrize("shape", SHAPES)
def test_a_url_in_the_table_or_earlier_in_the_input_is_not_added_again(db, shape, logged):
    make_table(db, shape)
    add_urls(runtime(db), ["http://a.example/1"])
    report = add_urls(runtime(db), ["http://a.example/1", "http://b.example/", "http://b.example/",
                                    "http://A.example/1", "http://a.example/1/"])
    assert (report.exit_code, report.added, report.duplicates) == (ExitCode.OK, 3, 2)
    # exactly: a case-insensitive collation of MySQL finds http://A.example/1 equal to http://a.example/1
    assert urls_in(db) == ["http://a.example/1", "http://b.example/", "http://A.example/1", "http://a.example/1/"]
    assert logged[-3:-1] == [
        f"WARNING URL {n} of the command line: {url!r} is a duplicate (in task table crawl_task already, or earlier "
        "in the input): not added" for n, url in ((1, "http://a.example/1"), (3, "http://b.example/"))]
    assert logged[-1].startswith("INFO 3 tasks added to crawl_task from the command line, 2 duplicates skipped, "
                                 "0 bad URLs rejected (")
    again = add_urls(runtime(db), ["http://b.example/", "http://b.example/"], allow_duplicates=True)
    assert (again.added, again.duplicates) == (2, 0)
    assert urls_in(db).count("http://b.example/") == 3


def test_one_task_is_one_task_in_the_summary(db, logged):
    add_urls(runtime(db), ["http://a.example/"])
    assert logged[-1].startswith("INFO 1 task added to crawl_task from the command line, 0 duplicates skipped, "
                                 "0 bad URLs rejected (")
    add_urls(runtime(db), ["http://a.example/"])
    assert logged[-1].startswith("INFO 0 tasks added to crawl_task from the command line, 1 duplicate skipped, ")


def test_a_url_must_fit_the_column(db, logged):
    """The specification's VARCHAR(500) on MariaDB; on SQLite the same table declares TEXT: batchd's bound."""
    make_table(db, "seed")
    most = 500 if db.kind == "mysql" else UNDECLARED_MOST
    fits, too_long = "http://a.example/" + "p" * (most - 17), "http://b.example/" + "p" * (most - 16)
    report = add_urls(runtime(db), [fits, too_long], skip_bad=True)
    assert (report.added, report.bad) == (1, 1) and urls_in(db) == [fits]
    limit = (f"the column's {most:,} characters" if db.kind == "mysql"
             else f"batchd's bound for a column of no declared length: {most:,} characters")
    assert f"ERROR URL 2 of the command line: the URL is {most + 1:,} characters long, more than column url " \
           f"takes ({limit}): 'http://b.example/ppp" in "\n".join(logged)


def test_a_10_kb_url_exits_65_with_one_line_per_bad_url_and_no_traceback(db):
    """The database never sees it: MariaDB would end in a DataError, SQLite take it."""
    make_table(db, "made")
    result = batchd_command("tasks", "add", "http://a.example/", "http://b.example/" + "x" * 10_000,
                            "--spider", SEED, "--store", db.url)
    assert result.returncode == 65, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 2, result.stderr
    assert "URL 2 of the command line: the URL is 10,017 characters long" in errors[0]
    assert "nothing added to crawl_task from the command line: 1 bad URL" in errors[1]
    assert urls_in(db) == []


def test_a_csv_file_names_its_bad_lines_and_shows_the_first_ones(db, tmp_path, logged):
    make_table(db, "made")
    lines = ["url,batch_status", "http://a.example/1,0", "", '"http://b.example/', 'two-lines",0',
             "http://c.example/3,0,surplus", "ftp://d.example/4,0"]
    lines += [f"bad{n}" for n in range(MOST_SHOWN)] + ["http://e.example/5,"]
    path = tmp_path / "tasks.csv"
    path.write_text("\n".join(lines) + "\n")
    report = import_csv(runtime(db), str(path))
    assert (report.exit_code, report.added, report.bad) == (ExitCode.DATAERR, 0, 3 + MOST_SHOWN)
    errors = [line for line in logged if line.startswith("ERROR")]
    assert errors[:3] == [f"ERROR {path} line 4: a space or control character at position 18 of the URL: "
                          "'http://b.example/\\ntwo-lines'",
                          f"ERROR {path} line 6: 3 fields where the header names 2",
                          f"ERROR {path} line 7: not an absolute http or https URL (its scheme is 'ftp'): "
                          "'ftp://d.example/4'"]
    assert len(errors) == MOST_SHOWN + 1
    assert errors[-1].startswith(f"ERROR nothing added to crawl_task from {path}: {3 + MOST_SHOWN} bad rows (and 3 "
                                 "more bad rows not shown; --skip-bad adds the others)")
    assert urls_in(db) == []
    skipped = import_csv(runtime(db), str(path), skip_bad=True)
    assert (skipped.exit_code, skipped.added) == (ExitCode.OK, 2)
    assert urls_in(db) == ["http://a.example/1", "http://e.example/5"]


@pytest.mark.parametrize("db", ["mysql"], indirect=True)      # (SQLite takes text in an INTEGER column)
def test_a_value_the_database_refuses_adds_nothing_and_exits_65(db, tmp_path):
    """Not the URL's fault: another column's value (MariaDB in strict mode refuses text for a number)."""
    make_table(db, "seed")
    path = tmp_path / "tasks.csv"
    path.write_text("url,batch_status\nhttp://a.example/1,0\nhttp://a.example/2,many\n")
    result = batchd_command("tasks", "import", str(path), "--spider", SEED, "--store", db.url)
    assert result.returncode == 65 and "Traceback" not in result.stderr, result.stderr
    assert f"{path} line 2 to {path} line 3: the database refused a row of these" in result.stderr
    assert "nothing was added" in result.stderr and urls_in(db) == []
    with pytest.raises(RefusedInput):
        import_csv(runtime(db), str(path))


@pytest.mark.parametrize("shape", ["made", "indexed"])
def test_100000_rows_are_checked_in_chunks_in_flat_memory(db, shape, tmp_path):
    """Correctness and memory only: the speed is bench/task_import.py's. The file repeats its first 1,000 URLs at
    its end (duplicates of rows added chunks before) and has one bad row; memory stays that of a chunk. 100,000
    rows on SQLite, 20,000 on MariaDB (20 chunks through the same code, in a fifth of the time)."""
    rows, most = (100_000, 8) if db.kind == "sqlite" else (20_000, 2.5)     # MB: a set of the URLs takes 14, 2.8
    make_table(db, shape)
    path = tmp_path / "tasks.csv"
    with open(path, "w") as f:
        f.write("url\n")
        f.writelines(f"https://site{n % 97}.example/page/{n}\n" for n in range(rows))
        f.write("htp:/bad\n")
        f.writelines(f"https://site{n % 97}.example/page/{n}\n" for n in range(1000))
    tracemalloc.start()
    try:
        report = import_csv(runtime(db), str(path), skip_bad=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (report.added, report.duplicates, report.bad) == (rows, 1000, 1)
    assert db.sql(f"SELECT COUNT(*), COUNT(DISTINCT {q(db, 'url')}) FROM {q(db, LAYOUT.table)}")[0] == (rows, rows)
    assert peak < most * 1024 * 1024, f"peak {peak / 1e6:.1f} MB"


def test_the_memory_store_checks_the_same(logged):
    store = batchd.MemoryBatchStore([{"id": 1, "url": "http://a.example/"}])
    report = add_urls(SimpleNamespace(store=store, layout=LAYOUT),
                      ["http://a.example/", "http://b.example/", "http://b.example/", "htp:/x"], skip_bad=True)
    assert (report.added, report.duplicates, report.bad) == (1, 2, 1)
    assert [row["url"] for row in store.rows] == ["http://a.example/", "http://b.example/"]
