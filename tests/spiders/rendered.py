"""The seed spider with every page rendered in a browser (Request(render=True)): a worker that starts Chromium."""
import batchd as mw


class RenderedTask(mw.BatchSpider):
    __task_table__ = "crawl_task"

    def task_requests(self, task):
        yield mw.Request(task["url"], callback=self.parse, render=True)

    def parse(self, request, response, task):
        yield {"url": task["url"], "title": response.css("h1::text").get()}
        self.update_task(task["id"], ok=True)
