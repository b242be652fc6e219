"""render="auto" in a worker: whether a request is rendered, from its host's choice, and the samples that teach
the choice (hosts/render_choices.py keeps the record and its one state machine; the RenderChoices port shares it
with every worker of the namespace, across batches).

The downloader asks `renders(request)` of each render="auto" request: only a host decided plain is fetched
without a browser; a host never met, learning, or decided rendered is rendered (never store worse data). After
the callback of a rendered page whose host is learning, the task run (worker/task_run.py) fetches the same
request plain, runs the callback on it in a dry run (its items and requests counted here, then dropped: nothing
stored, nothing in the quality tally, its update_task ignored), and hands both yields to `record`.

Cost: a host's choice is read from the port at most every LOOK_EVERY seconds per worker (one HGET, or one
SQLite read), and kept for HOSTS_CACHED hosts; a learning host's page costs one plain fetch and one callback more,
RENDER_AUTO_SAMPLE pages per host at most (a few more when several workers sample it at once).
"""
import collections
import logging
import threading
import time
from typing import Any, Callable, Mapping, Optional
from urllib.parse import urlsplit

from ..errors import BackendUnavailable
from ..hosts.counts import host_label
from ..hosts.render_choices import SAMPLE, PageYield, RenderChoice, RenderMode, shortfall
from ..quality.tally import judged_fields

log = logging.getLogger("batchd.worker")

LOOK_EVERY = 5.0          # s a worker trusts a host's choice before reading it again (another worker may decide it)
HOSTS_CACHED = 10_000     # hosts whose choice a worker keeps in memory; the least recently read go first
SAMPLES = "render/auto_samples"           # the batch's counter of pages sampled both ways
DECIDED = "render/auto_decided/"          # + plain or rendered: the hosts decided in the batch


def host_of(url: str) -> str:
    """The host a choice is kept under: the request URL's host and port, as the quality counters name it."""
    return host_label(urlsplit(url).netloc)


class AutoRender:
    """A worker's view of the hosts' render choices (`choices`: the RenderChoices port), and its samples;
    thread-safe. `sample_size`: RENDER_AUTO_SAMPLE; `count(name, n, batch id)`: the batch's counters;
    `spider_table`: where the spider's dicts go (an Item's own table otherwise)."""

    def __init__(self, choices: Any, sample_size: int, count: Callable[[str, int, Any], None], spider_table: str,
                 clock: Callable[[], float] = time.monotonic, now: Callable[[], float] = time.time):
        self.choices, self.sample_size, self.count, self.spider_table = choices, sample_size, count, spider_table
        self.clock, self.now = clock, now
        self._seen: collections.OrderedDict = collections.OrderedDict()   # host -> (RenderChoice or None, read at)
        self._lock = threading.Lock()

    def renders(self, request: Any) -> bool:
        """The downloader's question for a render="auto" request: False only for a host decided plain."""
        choice = self._choice(host_of(request.url))
        return choice is None or choice.mode != RenderMode.PLAIN

    def samples(self, request: Any, response: Any) -> bool:
        """Whether this answer is a sample: a render="auto" request rendered, with a 2xx, its host learning."""
        if request.rendering.render != "auto" or not response.rendered or not 200 <= response.status_code < 300:
            return False
        choice = self._choice(host_of(request.url))
        return choice is None or choice.mode == RenderMode.LEARNING

    def item(self, page: PageYield, item: Mapping) -> None:
        """An item a callback yielded on a sampled page (either way), measured as the quality counters do."""
        table, judged = judged_fields(item, self.spider_table)
        page.add_item(table, ((field, good) for field, good, _ in judged))

    def record(self, request: Any, rendered: PageYield, plain: PageYield, failed: str, batch_id: Any) -> None:
        """One page sampled both ways: `failed` says why the plain half gave nothing to compare (an answer not
        2xx, validate's refusal, the callback's error; '' when it gave `plain`)."""
        host, why = host_of(request.url), failed or shortfall(plain, rendered)
        try:
            record, changed = self.choices.step(host, SAMPLE, self.now(), batch_id, why, self.sample_size)
        except BackendUnavailable as e:        # the sample is lost, not the page: it was rendered and stored
            log.debug("render=\"auto\": %s: a sample not kept: %s", host, e)
            return
        self.count(SAMPLES, 1, batch_id)
        if record is None:          # a host past the port's KEPT_HOSTS: rendered, and not sampled again soon
            record = RenderChoice(RenderMode.RENDERED, self.now(), batch_id, 0, "too many hosts to learn")
        self._remember(host, record)
        if changed and record.mode != RenderMode.LEARNING:
            self.count(DECIDED + record.mode.value, 1, batch_id)
            log.info("render=\"auto\": %s is crawled %s from now on (%s)", host, record.mode.value, record.why)

    def _choice(self, host: str) -> Optional[RenderChoice]:
        with self._lock:
            kept = self._seen.get(host)
            if kept is not None and self.clock() - kept[1] < LOOK_EVERY:
                self._seen.move_to_end(host)
                return kept[0]
        try:
            choice = self.choices.choice(host)
        except BackendUnavailable:
            choice = None          # rendered meanwhile, as a host never met
        self._remember(host, choice)
        return choice

    def _remember(self, host: str, choice: Optional[RenderChoice]) -> None:
        with self._lock:
            self._seen[host] = (choice, self.clock())
            self._seen.move_to_end(host)
            while len(self._seen) > HOSTS_CACHED:
                self._seen.popitem(last=False)
