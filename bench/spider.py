"""batchd's contender in `python -m bench compare`: the seed's spider (tests/spiders/seed.py) parsing
what the bare loop parses (bench/fields.py), one item per page into the default item table
(`crawl_task_item`), the task done once its item has landed.

    batchd run bench.spider:CompareSpider --once --workers 2     # with the repository on PYTHONPATH
"""
import batchd as mw

from bench.fields import page_fields


class CompareSpider(mw.BatchSpider):
    __task_table__ = "crawl_task"

    def task_requests(self, task):
        yield mw.Request(task["url"], callback=self.parse)

    def parse(self, request, response, task):
        yield {"url": task["url"], **page_fields(response.selector)}
        self.update_task(task["id"], ok=True)
