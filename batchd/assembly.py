"""The composition root: every role's parts, built in one place from the settings and the backend's ports, and
handed to the part that uses them. No part builds another.

A Runtime (batchd/runtime.py) has one Assembly, and whatever runs a role gets it from there: the supervisor's
children, the `batchd` command, the spider's start() and start_monitor().

    Assembly.master(...)     the patrol, with its settler, its alerts, the spider's print (recrawl/spider_print.py)
                             and the quality judge of a batch's close
    Assembly.worker(...)     a worker and its parts (worker/worker.py WorkerParts): the downloader and its chain,
                             the pipeline (the write-back gate) with its settler and FAILED_ITEMS_PATH, the runner
                             and its quality tally, the hosts' render="auto" choices, the page memory of re-crawls, the archive's writer,
                             the lease prefetch and tokens, the tasks set aside, the batch's counters, the alerts, the outage watch, TASK_TIMEOUT
    Assembly.downloader(...) a downloader with its DOWNLOADER_MIDDLEWARES chain: a worker's, or `batchd check`'s

With QUALITY_CHECKS off neither the quality tally nor the judge is built: nothing is counted, nothing judged.

The host terms (HOSTS over the global settings) are built once, here, and every part of the process asks the
same copy; each worker has its own per-host pace (hosts/paces.py), shared by the links of its chain.
"""
import logging
from functools import partial
from typing import Any, Callable, Optional

from .alerts.alerts import Alerts
from .archive.writer import ArchiveWriter
from .backends.ports import Backend
from .config import Settings
from .download.chain import ChainContext, chain_from_settings, sleep_without_stop
from .download.downloader import Downloader
from .download.middlewares.breaker import HostBreakerMiddleware
from .download.middlewares.stats import HostsInFlight
from .hosts.counts import gauges_of
from .hosts.paces import HostPaces
from .hosts.set_aside import SetAside
from .hosts.terms import HostTerms
from .master.patrol import Master
from .model import ItemDestination, TaskLayout
from .quality.measures import BY_BODY, BY_MARKER
from .quality.tally import BlockMarkers, QualityTally
from .quality.verdict import QualityJudge
from .recrawl.page_memory import PageMemory
from .recrawl.spider_print import spider_print
from .service.outages import OutageWatch
from .settle.batch_stats import BatchStats, StatsFlusher
from .settle.ledger import LocalLedger
from .settle.settler import Settler
from .worker.dumps import FailedItemsFile
from .worker.pipeline import Pipeline, count_nothing
from .worker.prefetch import LeasePrefetch, LeaseTokens
from .worker.render_auto import AutoRender
from .worker.replays import Replays
from .worker.task_run import HeldTasks, TaskRunner
from .worker.timeout import TaskTimeouts
from .worker.worker import Worker, WorkerParts, ledger_slots, wake_master_when_drained

log = logging.getLogger("batchd")

Count = Callable[[str, int, Any], None]


class Assembly:
    """The parts of one process's roles. `backend()`: its ports, opened on first use (by the Runtime)."""

    def __init__(self, settings: Settings, layout: TaskLayout, backend: Callable[[], Backend], namespace: str):
        self.settings, self.layout, self.backend, self.namespace = settings, layout, backend, namespace
        self.host_terms = HostTerms.from_settings(settings)

    def master(self, spider, refetch: bool = False) -> Master:
        """`refetch`: the first batch it opens trusts no validator (`batchd run --refetch`)."""
        ports = self.backend().master_ports()
        judge = QualityJudge(self.settings, ports.store, ports.counters) if self.settings.QUALITY_CHECKS else None
        return Master(self.settings, self.layout, ports, Settler(ports.store, ports.tally),
                      Alerts(self.settings, ports.leases.namespace), spider=spider_print(type(spider), self.settings),
                      refetch=refetch, judge=judge)

    def worker(self, spider, held: HeldTasks, name: str = "worker", keep_alive: bool = True, ledger=None,
               count: Count = count_nothing, metrics=None) -> Worker:
        """`ledger`: the worker's rows of the supervisor's shared ledger (None: one in this process's memory);
        `count(name, n, batch id)` hears the pipeline's figures ("item/invalid"); `metrics`: the worker's
        Prometheus counters (worker/worker_metrics.py), under a supervisor with METRICS_PORT."""
        settings, ports = self.settings, self.backend().worker_ports(self.namespace)
        ledger = ledger or LocalLedger(ledger_slots(settings))
        tokens, in_flight, set_aside = LeaseTokens(), HostsInFlight(), SetAside(settings.HOST_SET_ASIDE_MAX)
        stats = BatchStats() if metrics is None else metrics.batch_stats()
        stats_flusher = StatsFlusher(stats, ports.counters, tokens.prefix, settings.STATS_FLUSH_INTERVAL,
                                     settings.HOST_STATS_TOP, lambda: gauges_of(set_aside.by_host(), in_flight.by_host()))
        alerts = Alerts(settings, ports.leases.namespace)
        watch = OutageWatch({ports.store.backend_name: ports.store.ping, ports.leases.backend_name: ports.leases.ping},
                            listener=ledger.set_outages)
        downloader = self.downloader(settings.SPIDER_THREAD_COUNT, spider=spider, stats=stats, metrics=metrics,
                                     host_rates=ports.host_rates, host_breakers=ports.host_breakers, alerts=alerts,
                                     in_flight=in_flight)
        downloader.on_attempt_ended = set_aside.host_done

        def counted(what: str, n: int, batch_id: Any) -> None:
            stats.inc(what, n, batch_id)
            count(what, n, batch_id)

        def time_out(run: Any, reason: str) -> None:      # (a TaskRun: TASK_TIMEOUT failed its task)
            pipeline.record_outcome(run, ok=False, failure=run.timeout_failure(reason))

        memory = PageMemory.for_worker(ports.store, settings, counted, type(spider))
        archive = ArchiveWriter.for_worker(settings, ports.leases.namespace)
        downloader.keep_received = archive is not None
        destination = ItemDestination(*self.layout.item_destination)
        auto = AutoRender(ports.render_choices, settings.RENDER_AUTO_SAMPLE, counted, destination.table)
        downloader.renders_auto = auto.renders
        quality, breaker = None, None
        if settings.QUALITY_CHECKS:
            breaker = block_hold_of(settings, downloader)
            quality = QualityTally(stats.inc, BlockMarkers(settings.BLOCK_MARKERS), destination.table,
                                   block_holds(settings) if breaker is not None else frozenset(),
                                   settings.QUALITY_SOFT_BLOCK_PAGES, settings.QUALITY_SOFT_BLOCK_SHARE)
        pipeline = Pipeline(ports, ledger, settings, destination, watch,
                            Settler(ports.store, ports.tally, counted=lambda done, failed: ledger.count(done=done,
                                                                                                      failed=failed)),
                            FailedItemsFile(settings.failed_items_path()),
                            on_written=lambda runs: wake_master_when_drained(ports.leases, ports.wake),
                            count=counted, stats_flusher=stats_flusher, alerts=alerts, memory=memory,
                            archive=archive)
        parts = WorkerParts(
            ledger=ledger, tokens=tokens, stats=stats, stats_flusher=stats_flusher, alerts=alerts, in_flight=in_flight,
            set_aside=set_aside, watch=watch, downloader=downloader, pipeline=pipeline,
            prefetch=LeasePrefetch(ports.leases, settings.BATCH_LOST_TASK_STALE, tokens.next, ledger.free_slots),
            runner=TaskRunner(spider, settings, downloader, pipeline, ports.seen, ports.leases.namespace, name, memory,
                              quality, breaker, counted, auto, archive,
                              Replays(ports.store.last_batch, partial(archive_replay, settings, self.layout.table),
                                      counted)),
            timeouts=TaskTimeouts(settings.TASK_TIMEOUT, name, time_out))
        return Worker(settings, self.layout, ports, held, parts, name=name, keep_alive=keep_alive)

    def downloader(self, threads: int, **collaborators: Any) -> Downloader:
        """A downloader and its chain, with this process's host terms (`collaborators`: see `downloader_for`)."""
        return downloader_for(self.settings, threads, host_terms=self.host_terms, **collaborators)


def block_holds(settings: Settings) -> frozenset:
    """What makes a page a block page that holds its host mid-batch: a block marker and the same-body rule,
    each as long as its rule flags (QUALITY_RULES_OFF) and QUALITY_BLOCK_HOLD is on."""
    if not settings.QUALITY_BLOCK_HOLD:
        return frozenset()
    off = set(settings.QUALITY_RULES_OFF or ())
    return frozenset(cause for cause, rule in ((BY_MARKER, "block_marker"), (BY_BODY, "soft_block")) if rule not in off)


def block_hold_of(settings: Settings, downloader: Downloader) -> Optional[HostBreakerMiddleware]:
    """The chain's host breaker, judging pages, when block pages hold their hosts (None: the hold is off, or no
    breaker holds hosts: HOST_BREAKER_FAILURES = 0, or its link left out of DOWNLOADER_MIDDLEWARES)."""
    if not block_holds(settings):
        return None
    breaker = next((m for m in downloader.chain.middlewares if isinstance(m, HostBreakerMiddleware)), None)
    return breaker.judge_pages() if breaker is not None else None


def downloader_for(settings: Settings, threads: int, sleep=sleep_without_stop, *, host_terms: Optional[HostTerms] = None,
                   **collaborators: Any) -> Downloader:
    """The Downloader the settings describe, with the DOWNLOADER_MIDDLEWARES chain (`collaborators`: what
    ChainContext holds besides the settings, the terms and the pace); `host_terms`: the process's (None: made
    from the settings, for a downloader on its own). TLS_VERIFY off is said once, here."""
    if not settings.TLS_VERIFY:
        log.warning("TLS_VERIFY is off: the certificates of https sites are not checked")
    host_terms = host_terms or HostTerms.from_settings(settings)
    downloader = Downloader(pool_size=threads, maxsize=settings.DOWNLOAD_MAXSIZE, host_terms=host_terms,
                            headers=settings.DEFAULT_REQUEST_HEADERS, user_agents=settings.USER_AGENT,
                            max_redirects=settings.REDIRECT_MAX_TIMES, warnsize=settings.DOWNLOAD_WARNSIZE,
                            verify=settings.TLS_VERIFY, sleep=sleep)
    downloader.use(chain_from_settings(chain_context(settings, threads, host_terms, download=downloader.download_once,
                                                     **collaborators)))
    downloader.spider = collaborators.get("spider")
    downloader.make_render_pool = partial(render_pool, settings, collaborators.get("stats"))
    return downloader


def archive_replay(settings: Settings, table: str, batch_id: int) -> Any:
    """A reader of one batch's archive (batchd/archive/replay.py), for a reparse of it: imported only then."""
    from .archive.replay import ArchiveReplay
    return ArchiveReplay(settings, table, batch_id)


def render_pool(settings: Settings, stats: Any) -> Any:
    """A worker's browsers (batchd/render/), made on its first rendered request: imported only then."""
    from .render.chromium import chromium_pool
    return chromium_pool(settings, stats.inc if stats is not None else lambda name, n: None)


def chain_context(settings: Settings, threads: int = 1, host_terms: Optional[HostTerms] = None,
                  **collaborators: Any) -> ChainContext:
    """What a chain's links are made with: the host terms (the process's, else the settings'), a per-host pace of
    the chain's own, and `collaborators` (ChainContext says what each is)."""
    host_terms = host_terms or HostTerms.from_settings(settings)
    return ChainContext(settings, host_terms, HostPaces(host_terms, settings.RANDOMIZE_DOWNLOAD_DELAY),
                        threads=threads, **collaborators)
