"""Spiders of the reparse tests (tests/control/test_reparse.py): a crawl's spider, and the same spider corrected to
read one more field and to follow each page's next link (a request the crawl never made: not in its archive)."""
import batchd as mw


class ShopPages(mw.BatchSpider):
    __task_table__ = "crawl_task"

    def task_requests(self, task):
        yield mw.Request(task["url"], callback=self.parse)

    def parse(self, request, response, task):
        yield {"url": task["url"], "title": response.css("h1::text").get()}
        self.update_task(task["id"], ok=True)


class ShopPagesCorrected(ShopPages):
    """The crawl's spider reading the paragraph too, and following the next link (not archived)."""

    def parse(self, request, response, task):
        yield {"url": task["url"], "title": response.css("h1::text").get(), "text": response.css("p::text").get(),
               "replayed": response.replayed}
        link = response.css("a::attr(href)").get()
        if link:
            yield mw.Request(response.urljoin(link), callback=self.parse_next)
        self.update_task(task["id"], ok=True)

    def parse_next(self, request, response, task):
        yield {"url": response.url, "title": response.css("h1::text").get(), "next_of": task["id"]}
