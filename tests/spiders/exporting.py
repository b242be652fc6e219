"""The spider of the export tests (tests/export/, tests/cli/test_export_verb.py): per task a Review to its own
table, `reviews`, and a dict to the spider's item table, so that its items are in two tables."""
from datetime import datetime

import batchd as mw

REVIEWS = "CREATE TABLE reviews (product VARCHAR(20), stars INT, note VARCHAR(100), seen DATETIME, batch INT)"
SEEN = datetime(2026, 12, 7, 5, 4, 3)


class Review(mw.Item):
    __table__ = "reviews"
    product = mw.Field(required=True)
    stars = mw.Field()
    note = mw.Field()
    seen = mw.Field()


class ReviewSpider(mw.BatchSpider):
    __task_table__ = "crawl_task"

    def task_requests(self, task):
        yield mw.Request(task["url"], callback=self.parse)

    def parse(self, request, response, task):
        n = task["id"]
        yield Review(product=f"p{n}", stars=n, note='a "quoted", ünïcode\nnote', seen=SEEN)
        yield {"url": task["url"], "title": response.css("h1::text").get()}
        self.update_task(n, ok=True)
