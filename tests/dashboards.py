"""A `batchd web` process for the dashboard's tests (tests/web/), and what they feed it: the spider that tells its
failures, crawled text to escape, a token, a re-crawled batch closed with failures."""
import requests

from batchd.task import TaskState
from harness import next_batch, wait_for
from spiders.seed import CrawlTask
from supervised import free_port, start_batchd

TELLING = "spiders/faulty.py:TellingCrawlTask"
NAMING_SHOP = "spiders/shop.py:NamingShopTask"
SCRIPT = "<script>alert(1)</script>"
TOKEN = "s3cret-token-for-the-test"


class Web:
    """A `batchd web` process on a free loopback port."""

    def __init__(self, procs, backend, spider=TELLING, token=None, **settings):
        self.base = f"http://127.0.0.1:{free_port()}"
        env = {"BATCHD_WEB_TOKEN": token} if token else {}
        self.proc = start_batchd(procs, backend, "web", "--listen", self.base[len("http://"):], spider=spider,
                                 env=env, **settings)
        wait_for(self._answers, timeout=20, message=f"batchd web answering on {self.base}")

    def _answers(self) -> bool:
        assert self.proc.alive(), self.proc.output()
        return answers(self.base)

    def get(self, path: str) -> requests.Response:
        return requests.get(self.base + path, timeout=10, allow_redirects=False)

    def api(self, name: str, **query) -> dict:
        answer = requests.get(f"{self.base}/api/{name}", params=query, timeout=10)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def post(self, name: str, token=None, **query) -> requests.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return requests.post(f"{self.base}/api/{name}", params=query, headers=headers, timeout=10)


def table_counts(backend) -> dict:
    counts = dict(backend.sql("SELECT batch_status, COUNT(*) FROM crawl_task GROUP BY batch_status"))
    return {"total": sum(counts.values()), "done": counts.get(TaskState.DONE, 0),
            "failed": counts.get(TaskState.FAILED, 0)}


def failing_urls(site) -> list:
    """3 pages that answer 404 under a URL with a password, 2 that fail their tasks with crawled text."""
    locked = site.url("/status/404").replace("http://", "http://crawler:hunter2@")
    return [f"{locked}?n={n}" for n in range(3)] + [site.url(f"/text?body={SCRIPT}&n={n}") for n in range(2)]


def shop_tasks(backend, site, captcha) -> None:
    """The tasks of a batch `flagged_batch` runs: `site`'s 12 shop pages and a /text page whose dict item names its
    one field <script>..., and `captcha`'s 12 (a challenge page for each)."""
    captcha.captcha = True
    backend.create_tasks([s.url(f"/shop/{n}") for s in (site, captcha) for n in range(1, 13)]
                         + [site.url(f"/text?body={SCRIPT}")])


def flagged_batch(procs, backend) -> None:
    """One `batchd run --once` of the shop spider over `shop_tasks` to its close: flagged for the captcha site's
    soft block and marker, and for the other site's titles under a floor of 95 % (12 of 13 items)."""
    # the captcha site's pages are flagged at the close, not held (QUALITY_BLOCK_HOLD: tests/quality/test_block_pages.py)
    proc = start_batchd(procs, backend, "run", "--once", "--workers", "1", spider=NAMING_SHOP,
                        QUALITY_MIN_COVERAGE='{"title": 0.95}', QUALITY_BLOCK_HOLD="false")
    assert proc.wait(90) == 65, proc.output()[-3000:]


def recrawled_batch(backend, site) -> None:
    """Two batches in-process (no supervisor: no master's samples left) over 3 versioned pages and 2 pages
    answering 404, revalidating: the second closes with the 404s failed again, page 3 changed, 1 and 2 answered
    304 (unchanged)."""
    backend.create_tasks([site.url(f"/versioned/{n}") for n in (1, 2, 3)]
                         + [site.url(f"/status/404?n={n}") for n in (1, 2)])
    for version in (0, 1):
        site.versions[3] = version
        next_batch(backend, lambda: CrawlTask(batch_store=backend.store(), settings=backend.settings(REVALIDATE=True)))


def answers(base: str) -> bool:
    try:
        return requests.get(base + "/api/namespaces", timeout=2).status_code == 200
    except requests.ConnectionError:
        return False
