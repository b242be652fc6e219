"""The demo's spider: one task per book page, one item per book."""
import batchd


class BookSpider(batchd.BatchSpider):
    __task_table__ = "demo_book"

    def task_requests(self, task):
        yield batchd.Request(task["url"], callback=self.parse)

    def parse(self, request, response, task):
        yield {"url": response.url,
               "title": response.css("h1.title::text").get(),
               "author": response.css("p.author::text").get(),
               "price": response.css("p.price::text").get()}
        self.update_task(task["id"], ok=True)
