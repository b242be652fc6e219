"""`batchd init FOLDER`: a starter spider and a config file, ready for `batchd run`.

The config names the spider and keeps everything in the folder (an SQLite store, the
failed items file), so a new project runs with no MySQL and no Redis; point MYSQL_URL and
REDIS_URL at servers when it grows up.
"""
import os

from ..errors import ConfigError

SPIDER_FILE = "spider.py"
CONFIG_FILE = "batchd.toml"

SPIDER_TEXT = '''"""A batchd spider: one task row in, requests out; each page yields items and settles its task."""
import batchd


class CrawlTask(batchd.BatchSpider):
    __task_table__ = "crawl_task"          # created by `batchd tasks add` when it does not exist

    def task_requests(self, task):
        yield batchd.Request(task["url"], callback=self.parse)

    def parse(self, request, response, task):
        yield {"url": response.url, "title": response.css("title::text").get()}
        self.update_task(task["id"], ok=True)   # written once the items above have been stored
'''

CONFIG_TEXT = '''# batchd settings for this project. Every setting, with its default and meaning:
# /etc/batchd/batchd.toml of the Debian package, or batchd/config.py.
SPIDER = "{folder}/spider.py:CrawlTask"

# Tasks, queue and items in one SQLite file: no servers needed on one host.
STORE = "sqlite:///{folder}/batchd.db"
# With MySQL and Redis instead (then workers can run on any number of hosts):
# MYSQL_URL = "mysql://user:password@127.0.0.1:3306/crawl"
# REDIS_URL = "redis://127.0.0.1:6379/0"

FAILED_ITEMS_PATH = "{folder}/failed_items.jsonl"
# Each site's robots.txt is read once per batch, and a request it disallows fails.
ROBOTSTXT_OBEY = true
BATCH_INTERVAL = 1
BATCH_INTERVAL_UNIT = "day"
# Re-crawls move only what changed: each page is asked for with the ETag / Last-Modified its
# last crawl kept, a 304 is not parsed again (its task is done, its items stand), and items
# equal to those stored are not written again.
REVALIDATE = true
'''


def write_starter(folder: str, force: bool = False) -> list:
    """Write the two files; refuse to overwrite one unless forced. Returns the paths written."""
    folder = os.path.abspath(folder)
    os.makedirs(folder, exist_ok=True)
    files = {os.path.join(folder, SPIDER_FILE): SPIDER_TEXT,
             os.path.join(folder, CONFIG_FILE): CONFIG_TEXT.format(folder=folder)}
    existing = [path for path in files if os.path.exists(path)]
    if existing and not force:
        raise ConfigError(f"{existing[0]} exists; batchd init does not overwrite it (--force does)")
    for path, text in files.items():
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return list(files)


def next_steps(folder: str) -> str:
    config = os.path.join(os.path.abspath(folder), CONFIG_FILE)
    return "\n".join([
        f"wrote {os.path.join(os.path.abspath(folder), SPIDER_FILE)} and {config}",
        "next:",
        f"  cd {os.path.abspath(folder)}    # batchd reads ./batchd.toml there",
        f"  (or, from any folder: export BATCHD_CONFIG={config})",
        "  batchd tasks add https://example.com/ https://www.debian.org/",
        "  batchd run --once",
        "  batchd status",
    ])
