"""The seed spider, leaving a mark in TEST_MARK_DIR once parse() has returned for a task."""
import os

from spiders.seed import CrawlTask


class MarkingCrawlTask(CrawlTask):
    def parse(self, request, response, task):
        yield from super().parse(request, response, task)
        with open(os.path.join(os.environ["TEST_MARK_DIR"], f"parsed-{task['id']}"), "w"):
            pass
