"""batchd's spiders in the benchmarks. `CompareSpider`, its contender in `python -m bench compare`: the
seed's spider (tests/spiders/seed.py) parsing what the bare loop parses (bench/fields.py), one item per page
into the default item table (`crawl_task_item`), the task done once its item has landed. `RenderSpider` and
`AutoRenderSpider`: `python -m bench render`'s (bench/render.py).

    batchd run bench.spider:CompareSpider --once --workers 2     # with the repository on PYTHONPATH
"""
import hashlib

import batchd as mw

from bench.fields import page_fields


class CompareSpider(mw.BatchSpider):
    __task_table__ = "crawl_task"

    def task_requests(self, task):
        yield mw.Request(task["url"], callback=self.parse)

    def parse(self, request, response, task):
        yield {"url": task["url"], **page_fields(response.selector)}
        self.update_task(task["id"], ok=True)


class RenderSpider(mw.BatchSpider):
    """`python -m bench render`'s spider (bench/render.py): each page loaded in a browser and read once its
    content, which arrives by fetch() after load, is in (bench/render_site.py's READY)."""
    __task_table__ = "crawl_task"
    render = True

    def task_requests(self, task):
        yield mw.Request(task["url"], callback=self.parse, render=self.render, render_wait="#content.ready")

    def parse(self, request, response, task):
        yield {"url": task["url"], **rendered_fields(response.selector)}
        self.update_task(task["id"], ok=True)


class AutoRenderSpider(RenderSpider):
    """The same with render="auto": batchd learns per host whether a plain fetch gives the same items."""
    render = "auto"


def rendered_fields(selector) -> dict:
    """The page's content as an item: its title, and its paragraphs' count and digest (the same whether a
    browser wrote them or the HTML carried them)."""
    paragraphs = selector.css("#content p::text").getall()
    return {"title": selector.css("#content h1::text").get(), "paragraphs": len(paragraphs),
            "digest": hashlib.sha1("\n".join(paragraphs).encode()).hexdigest()[:16]}
