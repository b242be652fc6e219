# The seed spider, its pages loaded in a browser (tests/render/): the title is only in the DOM once the page's
# script ran.
import batchd as mw


class RenderTask(mw.BatchSpider):
    __task_table__ = "crawl_task"

    def task_requests(self, task):
        yield mw.Request(task["url"], callback=self.parse, render=True, render_wait=".title")

    def parse(self, request, response, task):
        yield {"url": task["url"], "title": response.css("h1.title::text").get()}
        self.update_task(task["id"], ok=True)
