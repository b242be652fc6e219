"""The Runtime: everything a spider runs in, as Scrapy's crawler is to its spider.

A BatchSpider (batchd/spider.py, which stands on this module) holds only what the user writes
(task_requests, callbacks, failed_request) and calls (update_task, start, start_monitor). Its Runtime owns
the rest: the settings resolved once (defaults < the spider's `__custom_setting__` < the TOML file < the
environment < the command line or `settings=`), the task table's layout, the namespace, the backend's
ports, and the master and workers its Assembly (batchd/assembly.py) builds on them. The supervisor's
children, the `batchd` command, `start()` and `start_monitor()` all go through a Runtime.

    runtime = Runtime.create(SpiderClass, overrides)   # makes the spider and binds it (the supervisor's way)
    runtime = Runtime.of(spider)            # a spider made by hand: spider.runtime does this, once
    runtime.master().run(stop)              # or runtime.worker(...).run(stop)
    runtime.settle(task_id, ok=True)        # update_task: through the gate of the worker holding it
"""
import contextlib
import logging
import signal
import threading
from typing import Any, Callable, Optional

from .assembly import Assembly
from .settle import failures
from .settle.settler import Settler
from .backends import open_backend, open_store
from .config import Settings, load_settings
from .errors import BatchdError, ConfigError
from .service.lifecycle import StopFlag
from .master.patrol import Master
from .model import TaskLayout
from .worker.pipeline import count_nothing
from .backends.ports import Backend
from .backends.store import BatchStore
from .service.systemd import set_thread_role, setup_logging
from .task import mark_move
from .service.threads import start_thread
from .worker.task_run import HeldTasks
from .worker.worker import Worker

log = logging.getLogger("batchd")


class Runtime:
    def __init__(self, spider, settings: Settings, store: Optional[BatchStore] = None):
        self.spider, self.settings = spider, settings
        self.layout = layout_of(type(spider), settings)
        self.namespace = settings.namespace_for(self.layout.table)
        self._store = store
        self._backend: Optional[Backend] = None
        self._store_opened = False
        self.held = HeldTasks()         # the tasks this process's workers hold: update_task finds its holder
        self.assembly = Assembly(settings, self.layout, lambda: self.backend, self.namespace)

    @classmethod
    def of(cls, spider, overrides: Optional[dict] = None, config_file=None,
           store: Optional[BatchStore] = None) -> "Runtime":
        """The spider's settings resolved in precedence order; `overrides` win, as the command line does."""
        settings = load_settings(type(spider).__custom_setting__, config_files=config_file, overrides=overrides)
        runtime = cls(spider, settings, store)
        spider.bind(runtime)
        return runtime

    @classmethod
    def create(cls, spider_class: type, keep_alive: bool = True, overrides: Optional[dict] = None,
               config_file=None) -> "Runtime":
        """Make a spider of `spider_class` and its runtime, bound together, as Scrapy's crawler makes its spider."""
        spider = spider_class(keep_alive=keep_alive)
        return cls.of(spider, overrides, config_file)

    @staticmethod
    def run_entry(spider, body: Callable[["Runtime", StopFlag], None]) -> None:
        """start() and start_monitor(): the spider's runtime, a loop with SIGTERM / SIGINT as warm then cold
        stop; a BatchdError (a bad setting included) ends it with one log line and its exit code."""
        stop = StopFlag()
        try:
            runtime = spider.runtime
            setup_logging(runtime.settings.LOG_LEVEL)
            with _signals_request(stop):
                body(runtime, stop)
        except BatchdError as e:
            setup_logging()
            log.error("%s", e)
            raise SystemExit(int(e.exit_code)) from None

    # -- the ports, opened on first use so that errors surface as one line from where they are asked for
    @property
    def store(self) -> BatchStore:
        if self._store is None:
            self._store = open_store(self.settings)
        return self._store

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = open_backend(self.settings, self.namespace, self.store)
        return self._backend

    def items_place(self) -> str:
        """Where this spider's items are stored, for a newcomer who asks how to see what a batch got: the table
        and the store (an Item class with a `__table__` of its own writes there too)."""
        return f"table {self.layout.item_destination[0]} of {self.store.describe()}"

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()

    # -- the loops
    def master(self, refetch: bool = False) -> Master:
        """The master of this spider; `refetch`: the next batch it opens trusts no validator."""
        return self.assembly.master(self.spider, refetch)

    def worker(self, ledger=None, name: str = "worker", keep_alive: bool = True,
               count: Callable[[str, int, Any], None] = count_nothing, metrics=None) -> Worker:
        """A worker of this spider (Assembly.worker says what each argument is)."""
        return self.assembly.worker(self.spider, self.held, name=name, keep_alive=keep_alive, ledger=ledger,
                                    count=count, metrics=metrics)

    def run_worker(self, stop: StopFlag, keep_alive: bool) -> None:
        """A worker here; with a store no other process reaches, the master too (in once mode unless kept
        alive)."""
        if self.store.runs_in_process:
            self.run_in_process(stop, once=not keep_alive)
        else:
            self.worker(keep_alive=keep_alive).run(stop)

    def run_master(self, stop: StopFlag, once: bool) -> None:
        if self.store.runs_in_process:
            self.run_in_process(stop, once)
        else:
            set_thread_role("master")
            self.master().run(stop, once=once)

    def run_in_process(self, stop: StopFlag, once: bool) -> None:
        """The master here, its worker in a thread beside it: for a store no other process can reach, and for
        `batchd reparse` with no master running (control/reparse.py). A worker that ends on an error
        (BatchdError) stops the master too, and the error is this run's."""
        worker_stop, ended = StopFlag(), []
        worker = self.worker(keep_alive=True)

        def serve() -> None:
            try:
                worker.run(worker_stop)
            except BatchdError as e:
                ended.append(e)
                stop.request_cold()

        thread = start_thread(serve, "batchd-worker")
        try:
            set_thread_role("master")
            self.master().run(stop, once=once)
        finally:
            worker_stop.request()
            if stop.cold:
                worker_stop.request_cold()
            thread.join()
        if ended:
            raise ended[0]

    # -- what the spider's update_task and failed_request ask
    def settle(self, task_id, ok: bool) -> None:
        """update_task(): through the write-back gate of the worker of this process holding the task (done
        waits for its items); anywhere else (the master's own code, say), written at once."""
        if self.held.settle(task_id, ok):
            return
        if not self._store_opened:
            self.store.open(self.layout)
            self._store_opened = True
        batch = self.store.last_batch()
        batch_id = batch.id if batch is not None else None
        failure = [failures.marked(task_id, batch_id)] if not ok and batch_id is not None else []
        Settler(self.store, self.backend.tally).settle(mark_move(ok), batch_id, [task_id], failures=failure,
                                                        held=False)

    def failure_reason(self, task_id, response_or_exception) -> Optional[str]:
        """The downloader's reason for the failure failed_request() was given (attempts, HTTP status...)."""
        held = self.held.find(task_id)
        failure = held[1].last_failure if held is not None else None
        if failure is not None and failure.response_or_exception is response_or_exception:
            return failure.reason
        return None


def layout_of(spider_class: Any, settings: Settings) -> TaskLayout:
    """The task table of a spider class and its columns, validated (ConfigError naming the culprit)."""
    if not spider_class.__task_table__:
        raise ConfigError(f"{spider_class.__name__} has no __task_table__")
    return TaskLayout(table=spider_class.__task_table__, id_field=settings.BATCH_TASK_ID_FIELD,
                      state_field=settings.BATCH_TASK_STATE_FIELD, time_field=settings.BATCH_TASK_TIME_FIELD,
                      item_table=spider_class.__item_table__, host_field=settings.BATCH_TASK_HOST_FIELD)


@contextlib.contextmanager
def _signals_request(stop: StopFlag):
    """SIGTERM and SIGINT only record the request; the loops act on it. Only the main thread may."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda signum, frame: stop.request())
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
