"""The fields every contender of `python -m bench compare` extracts from a page of the bench's site
(bench/site.py): the baseline (bench/baseline.py) and batchd's bench spider (bench/spider.py) both
call `page_fields`, so that they do exactly the same parsing work.

Plain parsel, no batchd: the baseline must not import the framework it is measured against.
"""


def page_fields(page) -> dict:
    """What a documentation crawler keeps of a page: `page` is a parsel Selector over the whole
    document. A dozen CSS queries over head, nav and article, as a real spider's parse would run."""
    article = page.css("main article")
    return {
        "title": page.css("head title::text").get(),
        "description": page.css('head meta[name="description"]::attr(content)').get(),
        "canonical": page.css('head link[rel="canonical"]::attr(href)').get(),
        "nav_links": len(page.css("nav a::attr(href)")),
        "breadcrumbs": article.css("ol.breadcrumbs a::text").getall(),
        "h1": article.css("h1::text").get(),
        "updated": article.css("time::attr(datetime)").get(),
        "headings": article.css("h2::text").getall(),
        "summary": "".join(article.css("p.lead ::text").getall()),
        "paragraphs": len(article.css("p")),
        "code_blocks": len(article.css("pre > code")),
        "table": [row.css("td::text").getall() for row in article.css("table tbody tr")],
    }
