"""The shop spider of the data-quality tests (tests/quality/, the dashboard's quality page in tests/web/): one
product item per /shop/<n> page (tests/httpserver.py), its title from <h1> as the site used to lay it out, and
nothing from a page with no product."""
import batchd as mw


class Product(mw.Item):
    url = mw.Field()
    title = mw.Field()
    price = mw.Field(pattern=r"\d+\.\d\d EUR")


class ShopTask(mw.BatchSpider):
    __task_table__ = "crawl_task"

    def task_requests(self, task):
        yield mw.Request(task["url"], callback=self.parse)

    def parse(self, request, response, task):
        price = response.css("span.price::text").get()
        if price is not None:
            yield Product(url=task["url"], title=response.css("h1::text").get(), price=price)
        self.update_task(task["id"], ok=True)


class NamingShopTask(ShopTask):
    """The shop spider, and on a /text page a dict item whose one field the page names (a field name from the
    crawl, shown by the dashboard's quality page), left empty."""

    def parse(self, request, response, task):
        if "/text" not in task["url"]:
            yield from super().parse(request, response, task)
            return
        yield {response.text: ""}
        self.update_task(task["id"], ok=True)


class AutoShopTask(ShopTask):
    """The shop spider with render="auto": batchd learns per host whether its pages need the browser."""

    def task_requests(self, task):
        yield mw.Request(task["url"], callback=self.parse, render="auto", render_wait="span.price")
