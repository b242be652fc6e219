"""The seed spider, except that with TEST_STALL_TASK=<id> parse() yields that task's item (so it
lands) and then holds the task until the process is killed."""
import os
import time

from spiders.seed import CrawlTask


class StallingCrawlTask(CrawlTask):
    def parse(self, request, response, task):
        if str(task["id"]) == os.environ.get("TEST_STALL_TASK"):
            yield {"url": task["url"], "title": response.css("h1::text").get()}
            time.sleep(3600)
        yield from super().parse(request, response, task)
