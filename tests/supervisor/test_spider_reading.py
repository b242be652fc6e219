"""loader.read_spider: a spider's class attributes read from its source without running it (what `batchd
status` builds its runtime on), and what it leaves unread, with why."""
from batchd.spider import BatchSpider
from batchd.supervisor.loader import read_spider

SPIDER = '''import batchd
from batchd import BatchSpider
open("ran", "w").close()
BASE = {"WORKERS": 2}


class Plain(batchd.BatchSpider):
    __task_table__ = "shop_task"      # a comment
    __custom_setting__: dict = {"WORKERS": 4, "ROBOTSTXT_OBEY": False}


class Built(BatchSpider):
    __task_table__ = "shop_task"
    __custom_setting__ = dict(BASE, WORKERS=3)


class Child(Plain):
    __item_table__ = "shop_item"
'''


def test_literal_attributes_are_read_and_nothing_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shop.py").write_text(SPIDER)
    plain = read_spider("shop.py:Plain")
    assert plain.values == {"__task_table__": "shop_task", "__custom_setting__": {"WORKERS": 4, "ROBOTSTXT_OBEY": False}}
    assert plain.unread == {} and plain.trouble == ""
    stand_in = plain.stand_in()
    assert issubclass(stand_in, BatchSpider) and stand_in.__name__ == "Plain"
    assert (stand_in.__task_table__, stand_in.__item_table__) == ("shop_task", None)
    assert read_spider("shop:Plain") == plain                     # as a module of the working directory
    assert not (tmp_path / "ran").exists()


def test_what_code_builds_or_a_base_class_may_give_is_unread(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shop.py").write_text(SPIDER)
    assert read_spider("shop.py:Built").unread == {"__custom_setting__": "not a literal"}
    child = read_spider("shop.py:Child")
    assert child.values == {"__item_table__": "shop_item"}
    assert child.unread == {"__task_table__": "may come from Plain", "__custom_setting__": "may come from Plain"}
    missing = read_spider("shop.py:Gone")
    assert set(missing.unread.values()) == {"shop.py defines no class Gone at its top level"}
    assert set(read_spider("nowhere_at_all:Spider").unread.values()) == {"no file found for module nowhere_at_all"}


def test_a_file_that_does_not_parse_is_read_line_by_line(tmp_path):
    (tmp_path / "shop.py").write_text(SPIDER.replace("class Built(BatchSpider):", "class Built(BatchSpider)"))
    plain = read_spider(f"{tmp_path}/shop.py:Plain")
    assert plain.trouble == "shop.py line 12: SyntaxError: expected ':'"
    assert plain.values == {"__task_table__": "shop_task", "__custom_setting__": {"WORKERS": 4, "ROBOTSTXT_OBEY": False}}
    assert plain.unread == {"__item_table__": "the file does not parse"}
