"""BatchSpider: the user's side of batchd.

A spider names its task table and turns a task row into requests; its callbacks
yield items (dicts) and further requests, and call `update_task` to settle the task.
`start()` runs a worker, `start_monitor()` the master, both in this process; the
`batchd` command runs the same loops under a supervisor.
"""
import contextlib
import logging
import signal
import threading
from typing import Optional

from .config import Settings, load_settings
from .errors import BatchdError, ConfigError
from .http import Response
from .lifecycle import StopFlag
from .master import Master
from .store import store_from_settings
from .store.base import BatchStore, TaskLayout
from .systemd import set_thread_role, setup_logging
from .task import mark_move
from .threads import start_thread
from .worker import Worker, current_run, settle_current_task

log = logging.getLogger("batchd")


class BatchSpider:
    __task_table__: Optional[str] = None
    __item_table__: Optional[str] = None
    __custom_setting__: dict = {}

    def __init__(self, keep_alive: bool = False, batch_store: Optional[BatchStore] = None,
                 settings: Optional[dict] = None, config_file=None):
        """`settings` win over every other source, as the command line does; `config_file` replaces
        BATCHD_CONFIG and /etc/batchd/batchd.toml."""
        self.keep_alive = keep_alive
        self._batch_store = batch_store
        self._overrides = dict(settings or {})
        self._config_file = config_file
        self._settings: Optional[Settings] = None
        self._queue = None
        self._store_opened = False

    # -- what the user writes
    def task_requests(self, task: dict):
        """Turn one task row into Requests (yield or return them)."""
        raise NotImplementedError(f"{type(self).__name__} must implement task_requests(self, task)")

    def parse(self, request, response: Response, task: dict):
        """The default callback."""
        raise NotImplementedError(f"{type(self).__name__} has no parse(); give the Request a callback")

    def update_task(self, task_id, ok: bool = True) -> None:
        """Settle a task: done (ok=True) or failed. While this thread processes that task, done is
        written only once every item the task yielded has landed; failed is written at once.
        Called anywhere else (the master's own code, say), it is written at once."""
        if settle_current_task(task_id, ok):
            return
        self._open_store()
        self.store.move(mark_move(ok), [task_id])

    def failed_request(self, request, response_or_exception, task: dict) -> None:
        """A request failed for good (retries spent, or not retryable). The default marks the task
        failed; an override that still wants that must call super()."""
        log.warning("task %s failed: %s %s: %s", task.get(self.layout.id_field), request.method, request.url,
                    _failure_reason(response_or_exception))
        self.update_task(task[self.layout.id_field], ok=False)

    # -- how it runs
    def start(self) -> None:
        """Run a worker here: with keep_alive, until SIGTERM / SIGINT; without, until the queue is
        empty and the batch done. A MemoryBatchStore runs its master here too."""
        self._entry(lambda stop: self._run_worker(stop))

    def start_monitor(self, once: bool = False) -> None:
        """Run the master here: resident, or with once=True the current batch to completion."""
        self._entry(lambda stop: self._run_master(stop, once))

    # -- configuration, resolved on first use so that errors surface as one line from start*()
    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(self.__custom_setting__, config_files=self._config_file,
                                           overrides=self._overrides)
        return self._settings

    @property
    def layout(self) -> TaskLayout:
        if not self.__task_table__:
            raise ConfigError(f"{type(self).__name__} has no __task_table__")
        s = self.settings
        return TaskLayout(table=self.__task_table__, id_field=s.BATCH_TASK_ID_FIELD,
                          state_field=s.BATCH_TASK_STATE_FIELD, time_field=s.BATCH_TASK_TIME_FIELD,
                          item_table=self.__item_table__)

    @property
    def namespace(self) -> str:
        return self.settings.namespace_for(self.layout.table)

    @property
    def store(self) -> BatchStore:
        if self._batch_store is None:
            self._batch_store = store_from_settings(self.settings)
        return self._batch_store

    @property
    def queue(self):
        if self._queue is None:
            self._queue = self.store.embedded_queue(self.namespace, self.settings)
            if self._queue is None:
                from .queue.redis_queue import RedisQueue
                if not self.settings.REDIS_URL:
                    raise ConfigError("no Redis configured: set BATCHD_REDIS_URL (redis://host:6379/0) "
                                      "or REDIS_URL in the config file")
                self._queue = RedisQueue(self.settings.REDIS_URL, self.namespace)
        return self._queue

    def _open_store(self) -> None:
        if not self._store_opened:
            self.store.open(self.layout)
            self._store_opened = True

    # -- the loops
    def make_worker(self, ledger=None, name: str = "worker", keep_alive: Optional[bool] = None) -> Worker:
        return Worker(self, self.settings, self.store, self.queue, ledger=ledger, name=name,
                      keep_alive=self.keep_alive if keep_alive is None else keep_alive)

    def make_master(self) -> Master:
        return Master(self, self.settings, self.store, self.queue)

    def _run_worker(self, stop: StopFlag) -> None:
        if self.store.runs_in_process:
            self._run_in_process(stop, once=not self.keep_alive)
        else:
            self.make_worker().run(stop)

    def _run_master(self, stop: StopFlag, once: bool) -> None:
        if self.store.runs_in_process:
            self._run_in_process(stop, once)
        else:
            set_thread_role("master")
            self.make_master().run(stop, once=once)

    def _run_in_process(self, stop: StopFlag, once: bool) -> None:
        """A store no other process can reach: the master here, its worker in threads beside it. A worker
        that ends on an error (BatchdError) stops the master too, and the error is this run's."""
        worker_stop, ended = StopFlag(), []
        worker = self.make_worker(keep_alive=True)

        def serve() -> None:
            try:
                worker.run(worker_stop)
            except BatchdError as e:
                ended.append(e)
                stop.request_cold()

        thread = start_thread(serve, "batchd-worker")
        try:
            set_thread_role("master")
            self.make_master().run(stop, once=once)
        finally:
            worker_stop.request()
            if stop.cold:
                worker_stop.request_cold()
            thread.join()
        if ended:
            raise ended[0]

    def _entry(self, body) -> None:
        """Run a loop with SIGTERM / SIGINT as warm then cold stop; a BatchdError ends it with one
        log line and its exit code."""
        stop = StopFlag()
        try:
            setup_logging(self.settings.LOG_LEVEL)
            with _signals_request(stop):
                body(stop)
        except BatchdError as e:
            setup_logging()
            log.error("%s", e)
            raise SystemExit(int(e.exit_code)) from None


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


def _failure_reason(response_or_exception) -> str:
    run = current_run()
    failure = run.last_failure if run is not None else None
    if failure is not None and failure.response_or_exception is response_or_exception:
        return failure.reason
    if isinstance(response_or_exception, Response):
        return f"HTTP {response_or_exception.status_code}"
    return f"{type(response_or_exception).__name__}: {response_or_exception}"
