"""The seed spider with one fault each, chosen by the environment, for the fault tests:

    SpinningCrawlTask   TEST_FAULT_TASK=<id>: parse() of that task spins in Python code for ever
    BlockedCrawlTask    TEST_FAULT_TASK=<id>: parse() of that task blocks outside Python code for ever
    WedgingCrawlTask    TEST_FAULT_FLAG=<path>: the first task_requests() of any worker process, while
                        <path> does not exist, starts a guarded thread that never checks in again
"""
import os
import threading

from batchd.service.threads import start_thread
from spiders.seed import CrawlTask


def is_the_faulty_task(task) -> bool:
    return str(task["id"]) == os.environ.get("TEST_FAULT_TASK")


class SpinningCrawlTask(CrawlTask):
    def parse(self, request, response, task):
        spins = 0
        while is_the_faulty_task(task):
            spins += 1
        yield from super().parse(request, response, task)


RELEASE = threading.Event()     # a test run in-process lets the blocked thread go at its end


class BlockedCrawlTask(CrawlTask):
    def parse(self, request, response, task):
        if is_the_faulty_task(task):
            RELEASE.wait(3600)       # a lock acquire in C: no asynchronous exception lands there
        yield from super().parse(request, response, task)


class WedgingCrawlTask(CrawlTask):
    def task_requests(self, task):
        flag = os.environ["TEST_FAULT_FLAG"]
        if not os.path.exists(flag):
            open(flag, "w").close()
            start_thread(threading.Event().wait, "wedged")
        return super().task_requests(task)


class MixedFaultsCrawlTask(CrawlTask):
    """TEST_BAD_ITEM_TASK=<id> yields a set (no item table can store it), TEST_BLOCKED_TASK=<id> blocks outside
    Python code, TEST_SPINNING_TASK=<id> spins in Python code: among good tasks, each fails alone."""

    def parse(self, request, response, task):
        task_id = str(task["id"])
        if task_id == os.environ.get("TEST_BAD_ITEM_TASK"):
            yield {"url": task["url"], "tags": {"a", "b"}}
        if task_id == os.environ.get("TEST_BLOCKED_TASK"):
            RELEASE.wait(3600)
        while task_id == os.environ.get("TEST_SPINNING_TASK"):
            pass
        yield from super().parse(request, response, task)


class ManyItemsCrawlTask(CrawlTask):
    """TEST_ITEMS_PER_TASK items per task (its title, then numbered copies)."""

    def parse(self, request, response, task):
        title = response.css("h1::text").get()
        for n in range(int(os.environ.get("TEST_ITEMS_PER_TASK", "1"))):
            yield {"url": task["url"], "title": title, "n": n}
        self.update_task(task["id"], ok=True)


class TellingCrawlTask(CrawlTask):
    """A page under /text fails its task with what the page said as the reason: crawled text, shown by
    `batchd failed` and the dashboard."""

    def parse(self, request, response, task):
        if "/text" in request.url:
            raise ValueError(response.text)
        yield from super().parse(request, response, task)
