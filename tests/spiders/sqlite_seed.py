"""The seed's spider on the SqliteBatchStore named by TEST_SQLITE_PATH (run it with tests/spiders/run.py).

Until a setting chooses the store, this is how a subprocess gets the embedded backend.
With TEST_STALL_TASK=<id>, parse() yields that task's item (so it lands) and then holds
the task until the process is killed.
"""
import os
import time

import batchd as mw
from spiders.seed import CrawlTask as SeedCrawlTask


class CrawlTask(SeedCrawlTask):
    def __init__(self, keep_alive=False, **kwargs):
        kwargs.setdefault("batch_store", mw.SqliteBatchStore(os.environ["TEST_SQLITE_PATH"]))
        super().__init__(keep_alive=keep_alive, **kwargs)

    def parse(self, request, response, task):
        if str(task["id"]) == os.environ.get("TEST_STALL_TASK"):
            yield {"url": task["url"], "title": response.css("h1::text").get()}
            time.sleep(3600)
        yield from super().parse(request, response, task)
