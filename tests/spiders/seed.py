# The seed example of SPEC.md, unchanged but for its import line.
import batchd as mw


class CrawlTask(mw.BatchSpider):
    __task_table__ = "crawl_task"

    def task_requests(self, task):                 # one task row -> requests (must be implemented)
        yield mw.Request(task["url"], callback=self.parse)

    def parse(self, request, response, task):      # the framework passes the task along
        yield {"url": task["url"], "title": response.css("h1::text").get()}
        self.update_task(task["id"], ok=True)      # essential: write the task state back


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["monitor"]:
        CrawlTask().start_monitor()   # master
    else:
        CrawlTask(keep_alive=True).start()   # worker
