"""batchd.Item classes: several tables from one spider, upserts on a declared unique key across batches,
items without a required field counted and not stored, declarations checked where they are made."""
import logging
import os
import re
import threading

import pytest

import batchd
from batchd.errors import ConfigError
from batchd.worker.dumps import FailedItemsFile
from batchd.model import COLUMNS_ITEM_KIND, ItemRow
from batchd.task import TaskState
from harness import InProcessBatch, batch_done, wait_for
from spiders.seed import CrawlTask

D, F = TaskState.DONE, TaskState.FAILED


class Product(batchd.Item):
    __table__ = "products"
    __unique_key__ = ("sku",)
    sku = batchd.Field(required=True)
    name = batchd.Field()
    version = batchd.Field(default=1)


class Review(batchd.Item):
    __table__ = "reviews"
    product = batchd.Field(required=True)
    stars = batchd.Field()


# Plain names and types: the same statements make the tables in MariaDB and in SQLite.
PRODUCTS = "CREATE TABLE products (sku VARCHAR(20) NOT NULL, name VARCHAR(100), version INT NOT NULL DEFAULT 0{key})"
REVIEWS = "CREATE TABLE reviews (product VARCHAR(20), stars INT)"


def make_tables(backend, key=", UNIQUE (sku)"):
    backend.create_table(PRODUCTS.format(key=key))
    backend.create_table(REVIEWS)


class ShopSpider(CrawlTask):
    """Per task: a Product (upserted on its sku), a Review (appended), and a dict for the spider's item table."""

    VERSION = 1

    def parse(self, request, response, task):
        n, title = task["id"], response.css("h1::text").get()
        yield Product(sku=f"p{n}", name=title, version=self.VERSION)
        review = Review(product=f"p{n}")
        review["stars"] = n
        yield review
        yield {"url": task["url"], "title": title}
        self.update_task(n, ok=True)


def factory(backend, cls, **settings):
    return lambda: cls(batch_store=backend.store(), settings=backend.settings(**settings))


def products(n, version):
    return [(f"p{i}", f"Title {i}", version) for i in range(1, n + 1)]


def test_items_of_several_classes_and_dicts_land_each_in_their_table(backend, site):
    backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 5)])
    make_tables(backend)
    with InProcessBatch(factory(backend, ShopSpider)):
        wait_for(lambda: set(backend.states().values()) == {D}, message="every task done")
    assert backend.table_rows("products", ("sku", "name", "version")) == products(4, 1)
    assert backend.table_rows("reviews", ("product", "stars")) == [(f"p{i}", i) for i in range(1, 5)]
    assert sorted(item["title"] for item in backend.items()) == [f"Title {i}" for i in range(1, 5)]


def test_a_recrawl_in_the_next_batch_updates_the_row_of_its_unique_key(backend, site):
    backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 4)])
    make_tables(backend)
    with InProcessBatch(factory(backend, ShopSpider, BATCH_INTERVAL=1)):
        wait_for(lambda: batch_done(backend), message="the first batch done")
    assert backend.table_rows("products", ("sku", "name", "version")) == products(3, 1)
    backend.age_last_batch(days=2)
    second = type("ShopSpiderAgain", (ShopSpider,), {"VERSION": 2})
    with InProcessBatch(factory(backend, second, BATCH_INTERVAL=1)):
        wait_for(lambda: len(backend.records()) == 2 and batch_done(backend), message="the second batch done")
    assert backend.table_rows("products", ("sku", "name", "version")) == products(3, 2)
    # Reviews have no unique key: each batch adds its own.
    assert backend.table_rows("reviews", ("product", "stars")) == sorted([(f"p{i}", i) for i in range(1, 4)] * 2)


class CarelessSpider(CrawlTask):
    """Per task: a good Product, a Product without its sku, a Review whose required product is None."""

    def parse(self, request, response, task):
        n = task["id"]
        yield Product(sku=f"p{n}", name="kept")
        yield Product(name="no sku")
        yield Review(product=None, stars=n)
        self.update_task(n, ok=True)


def test_items_without_a_required_field_are_counted_and_told_not_stored_and_their_tasks_are_done(backend, site,
                                                                                                 caplog):
    backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 11)])
    make_tables(backend)
    counted, lock = [], threading.Lock()

    def count(name, n, batch_id):
        with lock:
            counted.append((name, n, batch_id))

    with caplog.at_level(logging.WARNING, logger="batchd"):
        with InProcessBatch(factory(backend, CarelessSpider), count=count):
            wait_for(lambda: set(backend.states().values()) == {D}, message="every task done")
    batch_id = backend.records()[-1]["id"]
    assert [entry for entry in counted if entry[0] == "item/invalid"] == [("item/invalid", 1, batch_id)] * 20
    assert backend.table_rows("products", ("sku", "name")) == sorted((f"p{i}", "kept") for i in range(1, 11))
    assert backend.table_rows("reviews", ("product", "stars")) == []
    told = [r.getMessage() for r in caplog.records if "not stored" in r.getMessage()]
    # The first of each class and field at once, the other nine in one line as the worker stops.
    assert len(told) == 4, told
    assert sum(line.endswith("a Product item was not stored: its required field 'sku' is missing") for line in told) == 1
    assert sum(line.endswith("a Review item was not stored: its required field 'product' is None") for line in told) == 1
    assert "9 more Product items were not stored: their required field 'sku' had no value" in told
    assert "9 more Review items were not stored: their required field 'product' had no value" in told


class UndeclaredFieldSpider(CrawlTask):
    def parse(self, request, response, task):
        product = Product(sku=f"p{task['id']}")
        if task["id"] == 1:
            product["colour"] = "red"
        yield product
        self.update_task(task["id"], ok=True)


def test_setting_an_undeclared_field_fails_its_task_in_one_line(backend, site, caplog):
    backend.create_tasks([site.url("/page/1"), site.url("/page/2")])
    make_tables(backend)
    with caplog.at_level(logging.ERROR, logger="batchd"):
        with InProcessBatch(factory(backend, UndeclaredFieldSpider)):
            wait_for(lambda: set(backend.states().values()) <= {D, F}, message="tasks settled")
    assert backend.states() == {1: F, 2: D}
    assert backend.table_rows("products", ("sku",)) == [("p2",)]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    error, = errors           # (and where its traceback starts: the spider's code, batchd's calls above it counted)
    assert error.startswith("task 1 failed: UndeclaredField: Product has no field 'colour' (its fields: sku, name, "
                            "version) (the traceback starts in the spider's code: ")


@pytest.mark.parametrize("body, message", [
    ({"__table__": "bad-name"}, "Bad.__table__: 'bad-name' is not a valid table or column name"),
    ({"__table__": "t", "a": batchd.Field(), "__unique_key__": ("b",)},
     "Bad.__unique_key__ names 'b', which is not a field of Bad"),
    ({"__table__": "t", "a": batchd.Field(), "__unique_key__": ("a", "a")}, "Bad.__unique_key__ ('a', 'a') names a field twice"),
    ({"__table__": "t", "__unique_key__": 3}, "Bad.__unique_key__: 3 is not a tuple of field names"),
    ({"a": batchd.Field(), "__unique_key__": "a"}, "Bad.__unique_key__ needs a __table__"),
    ({"__table__": "t", "x" * 65: batchd.Field()}, f"Bad: field: '{'x' * 65}' is not a valid table or column name"),
])
def test_a_bad_declaration_raises_where_the_class_is_defined(body, message):
    with pytest.raises(ConfigError) as error:
        type("Bad", (batchd.Item,), body)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_an_item_is_a_mapping_of_its_declared_fields():
    product = Product({"name": "x"}, sku="a1")
    product["name"] = "y"
    assert dict(product) == {"sku": "a1", "name": "y", "version": 1}      # in declared order, default included
    assert product.get("colour") is None and "sku" in product and len(product) == 3
    assert product.missing_required() is None and Product(name="x").missing_required() == "sku"
    del product["version"]
    assert list(product) == ["sku", "name"]
    with pytest.raises(batchd.UndeclaredField, match=r"^Product has no field 'colour'"):
        Product(colour="red")
    with pytest.raises(AttributeError, match=r"read the field as item\['sku'\]"):
        product.sku
    with pytest.raises(AttributeError, match=r"set the field as item\['sku'\]"):
        product.sku = "b2"

    class Sized(Product):
        sizes = batchd.Field(default=[])

    one, two = Sized(sku="a"), Sized(sku="b")
    one["sizes"].append(40)
    assert two["sizes"] == [] and Sized.__table__ == "products" and list(Sized.__fields__)[-1] == "sizes"


NO_UNIQUE_SKU = re.escape("item table `products` has no UNIQUE index or primary key on exactly (sku), which "
                          "Product.__unique_key__ upserts on: add one")


@pytest.mark.parametrize("products_table, pattern", [
    (PRODUCTS.format(key=""), NO_UNIQUE_SKU),
    (PRODUCTS.format(key=", UNIQUE (sku, name)"), NO_UNIQUE_SKU),
    ("CREATE TABLE products (sku VARCHAR(20) NOT NULL, name VARCHAR(100), UNIQUE (sku))",
     re.escape("Product: field 'version' is not a column of item table `products`")),
    (None, r'item table [`"]products[`"] not found in .* \(Product.__table__\)$'),
])
def test_an_item_table_that_cannot_take_its_class_stops_the_worker_with_a_config_error(shared_backend, site,
                                                                                       products_table, pattern):
    shared_backend.create_tasks([site.url("/page/1")])
    shared_backend.create_table(REVIEWS)
    if products_table:
        shared_backend.create_table(products_table)
    with InProcessBatch(factory(shared_backend, ShopSpider)) as batch:
        wait_for(lambda: batch.errors, message="the worker ending on a ConfigError")
    [(name, error)] = batch.errors
    assert isinstance(error, ConfigError) and re.match(pattern, str(error)), error
    assert shared_backend.states()[1] not in (D, F), "the task is given back, neither done nor failed"
    assert shared_backend.table_rows("reviews", ("product",)) == []


def test_a_primary_key_serves_as_the_unique_key(shared_backend, site):
    shared_backend.create_tasks([site.url("/page/1")])
    make_tables(shared_backend, key=", PRIMARY KEY (sku)")
    with InProcessBatch(factory(shared_backend, ShopSpider)):
        wait_for(lambda: shared_backend.states() == {1: D}, message="the task done")
    assert shared_backend.table_rows("products", ("sku", "name", "version")) == products(1, 1)


GATE = threading.Event()


class GatedShopSpider(ShopSpider):
    """Task 1 goes through (its classes are checked against their tables); the others wait for the gate."""

    def parse(self, request, response, task):
        if task["id"] > 1:
            GATE.wait(60)
        yield from super().parse(request, response, task)


def dumped(caplog) -> dict:
    """Table -> items dumped, from the lines that say so ("4 items of 4 tasks for `products` written to")."""
    tables: dict = {}
    for line in (r.getMessage() for r in caplog.records if "written to" in r.getMessage()):
        found = re.match(r"(\d+) items of \d+ tasks for `(\w+)` written to", line)
        if found is None:
            continue            # the items_dumped alert says it too, in other words
        tables[found.group(2)] = tables.get(found.group(2), 0) + int(found.group(1))
    return tables


def test_each_tables_items_are_dumped_in_an_outage_and_replayed_and_their_tasks_wait_for_all(private_mysql, site,
                                                                                             caplog):
    db, backend = private_mysql
    backend.create_tasks([site.url(f"/page/{i}") for i in range(1, 6)])
    make_tables(backend)
    GATE.clear()
    with caplog.at_level(logging.INFO, logger="batchd"):
        with InProcessBatch(factory(backend, GatedShopSpider, SPIDER_THREAD_COUNT=5, ITEM_FLUSH_GIVE_UP=1)) as batch:
            worker = next(loop for name, _, _, loop in batch.loops if name.startswith("worker"))
            wait_for(lambda: backend.states()[1] == D and worker.pipeline.in_flight() == 4,
                     message="task 1 done, the 4 others leased")
            backend.conn.close()
            db.stop()
            GATE.set()
            wait_for(lambda: sum(dumped(caplog).values()) == 12, timeout=30,
                     message="each table's items dumped after ITEM_FLUSH_GIVE_UP")
            db.start()
            backend.reconnect()
            wait_for(lambda: set(backend.states().values()) == {D}, timeout=30, message="tasks done")
            wait_for(lambda: len(backend.items()) == 5, timeout=30, message="the dump replayed by the worker")
    assert dumped(caplog) == {"crawl_task_item": 4, "products": 4, "reviews": 4}
    assert backend.table_rows("products", ("sku", "name", "version")) == products(5, 1)
    assert backend.table_rows("reviews", ("product", "stars")) == [(f"p{i}", i) for i in range(1, 6)]
    path = backend.failed_items_path
    assert not os.path.exists(path) or open(path).read() == "", "the file keeps only what still fails: nothing"


def test_dumped_items_of_a_unique_key_are_replayed_as_upserts_on_it(failed_items_path):
    store = batchd.MemoryBatchStore()
    rows = [ItemRow(1, 1, 0, 0, {"sku": "a", "name": "old"}), ItemRow(2, 1, 0, 0, {"sku": "a", "name": "new"})]
    FailedItemsFile(failed_items_path).append(
        [FailedItemsFile.record("products", COLUMNS_ITEM_KIND, row, "down", ("sku",)) for row in rows])
    assert FailedItemsFile(failed_items_path).replay(store).stored == 2
    assert store.items_in("products") == [{"sku": "a", "name": "new"}]


def test_a_field_may_say_what_a_good_value_looks_like():
    price = batchd.Field(pattern=r"\d+\.\d\d EUR")
    stock = batchd.Field(type=int, check=lambda n: n >= 0)
    broken = batchd.Field(check=lambda value: value.missing_attribute)
    assert price.accepts("3.50 EUR") and not price.accepts("N/A") and not price.accepts("3.50 EUR!")
    assert stock.accepts(2) and not stock.accepts(-1) and not stock.accepts("2")
    assert not broken.accepts("x")          # a check that raises refuses the value, it fails no task
    assert repr(price) == "Field(required=False, pattern='\\\\d+\\\\.\\\\d\\\\d EUR')"
    with pytest.raises(ConfigError, match=r"Field\(pattern='\('\): not a regular expression"):
        batchd.Field(pattern="(")
