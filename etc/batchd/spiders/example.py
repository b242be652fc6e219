"""An example spider for batchd: fetch the page of each task, store its title and headings.

To use it, create the task table in the database of MYSQL_URL and fill it with URLs:

    CREATE TABLE crawl_task (
      id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
      url VARCHAR(500) NOT NULL,
      batch_status TINYINT NOT NULL DEFAULT 0,
      update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
      KEY (batch_status)
    );

then set SPIDER = "/etc/batchd/spiders/example.py:ExampleSpider" in /etc/batchd/batchd.toml.
For your own spider, copy this file next to it under another name and change the class:
a package upgrade may replace this one.
"""
import batchd


class ExampleSpider(batchd.BatchSpider):
    __task_table__ = "crawl_task"  # items go to crawl_task_item, batches to crawl_task_batch_record

    def task_requests(self, task):
        # One request per task here; yield several (or follow links from a callback) if needed.
        yield batchd.Request(task["url"], callback=self.parse_page)

    def parse_page(self, request, response, task):
        yield {
            "url": response.url,
            "title": response.css("title::text").get(default="").strip(),
            "headings": response.css("h1::text, h2::text").getall(),
        }
        # Without this the task stays in processing and is crawled again after its lease
        # expires. batchd writes "done" only once the item above is stored.
        self.update_task(task["id"], ok=True)
