"""`batchd export`'s core on every store: the rows of a crawled batch come back out of both kinds of item table
(the default one's documents, a column table's columns) in each format, a batch's alone by ITEM_BATCH_COLUMN,
which the worker fills (and a worker refuses a table without it); the store reads them in chunks; the output
file is whole or not there."""
import csv
import json

import pytest

from batchd.errors import ConfigError
from batchd.export.item_export import ItemTable, export_items, output_file
from batchd.model import COLUMNS_ITEM_KIND, DEFAULT_ITEM_KIND
from batchd.task import TaskState
from harness import InProcessBatch, spider_factory, wait_for
from spiders.exporting import REVIEWS, SEEN, ReviewSpider

NOTE = 'a "quoted", ünïcode\nnote'
REVIEW_TABLE = ItemTable("reviews", COLUMNS_ITEM_KIND)


def crawled(backend, site, tasks=3):
    """One batch of ReviewSpider over `tasks` pages, ITEM_BATCH_COLUMN on; the store to read it with."""
    backend.create_tasks([site.url(f"/page/{i}") for i in range(1, tasks + 1)])
    backend.create_table(REVIEWS)
    with InProcessBatch(spider_factory(backend, ReviewSpider, ITEM_BATCH_COLUMN="batch")):
        wait_for(lambda: set(backend.states().values()) == {TaskState.DONE}, message="every task done")
    return backend.store()


def lines(path) -> list:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_a_batch_comes_back_out_of_both_kinds_of_item_table(backend, site, tmp_path):
    """One crawl per store, read back every way (one crawl: the checks share it to earn their seconds)."""
    store = crawled(backend, site, tasks=5)
    reviews = tmp_path / "reviews.jsonl"
    done = export_items(store, REVIEW_TABLE, "jsonl", str(reviews), batch_id=1, batch_column="batch")
    assert done.rows == 5 and done.table == "reviews"
    assert sorted(lines(reviews), key=lambda row: row["product"]) == [
        {"product": f"p{n}", "stars": n, "note": NOTE, "seen": "2026-12-07T05:04:03", "batch": 1} for n in range(1, 6)]
    # Another batch's rows: none of these.
    assert export_items(store, REVIEW_TABLE, "jsonl", str(reviews), batch_id=2, batch_column="batch").rows == 0
    assert reviews.read_text() == ""
    # The default item table: its documents, as the spider yielded them; in CSV, a header of their fields.
    items = tmp_path / "items.csv"
    assert export_items(store, ItemTable("crawl_task_item", DEFAULT_ITEM_KIND), "csv", str(items), batch_id=1).rows == 5
    with open(items, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["url", "title"] and sorted(row[1] for row in rows[1:]) == [f"Title {n}" for n in range(1, 6)]
    # A column table's batch needs its column named.
    with pytest.raises(ConfigError, match="reviews.* has no column for the batch of a row: set ITEM_BATCH_COLUMN"):
        export_items(store, REVIEW_TABLE, "jsonl", str(reviews), batch_id=1)
    # The store reads the tables in chunks.
    stream = store.item_rows("reviews", COLUMNS_ITEM_KIND, size=2)
    assert stream.columns == ("product", "stars", "note", "seen", "batch")
    chunks = list(stream.chunks)
    assert [len(chunk) for chunk in chunks] == [2, 2, 1]
    assert sorted(row[0] for chunk in chunks for row in chunk) == [f"p{n}" for n in range(1, 6)]
    documents = store.item_rows("crawl_task_item", DEFAULT_ITEM_KIND, batch_id=1, size=4)
    assert documents.columns == ("item",) and [len(chunk) for chunk in documents.chunks] == [4, 1]
    # CSV and Parquet keep every value of a column table.
    with open(_export(store, tmp_path / "r.csv", "csv"), newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["product", "stars", "note", "seen", "batch"]
    assert sorted(rows[1:]) == [[f"p{n}", str(n), NOTE, "2026-12-07T05:04:03", "1"] for n in range(1, 6)]
    import pyarrow.parquet
    table = pyarrow.parquet.read_table(_export(store, tmp_path / "r.parquet", "parquet"))
    assert table.column_names == ["product", "stars", "note", "seen", "batch"]
    got = sorted(table.to_pylist(), key=lambda row: row["product"])
    # A time: Parquet's own type where the store gives a datetime (MySQL, memory); SQLite's is ISO text.
    assert {row.pop("seen") for row in got} == ({"2026-12-07T05:04:03"} if backend.kind == "sqlite" else {SEEN})
    assert got == [{"product": f"p{n}", "stars": n, "note": NOTE, "batch": 1} for n in range(1, 6)]


def _export(store, path, fmt) -> str:
    export_items(store, REVIEW_TABLE, fmt, str(path))
    return str(path)


def test_the_file_is_whole_or_left_as_it_was(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text("the last export\n")
    with pytest.raises(RuntimeError):
        with output_file(str(path), binary=False) as out:
            out.write("half of")
            raise RuntimeError("the store went away")
    assert path.read_text() == "the last export\n" and [p.name for p in tmp_path.iterdir()] == ["items.jsonl"]
    with output_file(str(path), binary=False) as out:
        out.write("a new one\n")
    assert path.read_text() == "a new one\n" and [p.name for p in tmp_path.iterdir()] == ["items.jsonl"]


def test_a_worker_refuses_a_column_table_without_the_batch_column(tmp_path):
    import batchd
    from batchd.worker.item_checks import check_item_table
    from spiders.exporting import Review
    store = batchd.SqliteBatchStore(tmp_path / "items.db")
    store.execute(REVIEWS)
    check_item_table(store, Review, "batch")
    with pytest.raises(ConfigError, match=r"^item table `reviews` has no column `batched` \(ITEM_BATCH_COLUMN\): add it"):
        check_item_table(store, Review, "batched")
