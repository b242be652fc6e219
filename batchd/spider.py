"""BatchSpider: the user's side of batchd, and nothing else.

A spider names its task table and turns a task row into requests; its callbacks yield items
(dicts, or batchd.Items) and further requests, and call `update_task` to settle the task. `start()` runs a
worker, `start_monitor()` the master, both in this process; the `batchd` command runs the
same loops under a supervisor. What they run in (settings, ports, master, workers) is the
spider's Runtime (batchd/runtime.py), which makes and binds the spider as Scrapy's crawler does.

This module stands on the runtime: a spider made by hand gets its Runtime on first use, and nothing in the
engine imports this module (a worker runs any object with a spider's methods).
"""
import logging
import os
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, TypeVar, Union

from .config import Settings
from .http import Produced, Request, Response
from .backends.store import BatchStore
from .runtime import Runtime
from .service.systemd import failure_line

log = logging.getLogger("batchd")

# What task_requests gives: one Request, or (yields) several; a callback's Produced is in batchd/http.py.
Requests = Union[None, Request, Iterable[Request]]
ConfigFiles = Union[str, os.PathLike[str], Sequence[Union[str, os.PathLike[str]]], None]


Hook = TypeVar("Hook", bound=Callable[..., Any])


def _does_nothing(hook: Hook) -> Hook:
    """Marks a hook whose default changes nothing: a worker does not call it (worker/task_run.py, overridden_hooks)."""
    setattr(hook, "does_nothing", True)
    return hook


class BatchSpider:
    __task_table__: Optional[str] = None
    __item_table__: Optional[str] = None
    __custom_setting__: dict[str, Any] = {}

    def __init__(self, keep_alive: bool = False, batch_store: Optional[BatchStore] = None,
                 settings: Optional[Mapping[str, Any]] = None, config_file: ConfigFiles = None) -> None:
        """`settings` win over every other source, as the command line does; `config_file` replaces
        BATCHD_CONFIG, ./batchd.toml and /etc/batchd/batchd.toml; `batch_store` replaces the store the settings name."""
        self.keep_alive = keep_alive
        self._runtime_args: dict[str, Any] = {"overrides": dict(settings or {}), "config_file": config_file,
                                              "store": batch_store}
        self._runtime: Optional[Runtime] = None

    # -- what the user writes
    def task_requests(self, task: dict[str, Any]) -> Requests:
        """Turn one task row into Requests (yield or return them)."""
        raise NotImplementedError(f"{type(self).__name__} must implement task_requests(self, task)")

    def parse(self, request: Request, response: Response, task: dict[str, Any]) -> Produced:
        """The default callback: yield items (dicts or batchd.Items) and further Requests."""
        raise NotImplementedError(f"{type(self).__name__} has no parse(); give the Request a callback")

    @_does_nothing
    def download_midware(self, request: Request) -> Optional[Request]:
        """Called before each attempt to send a request (retries too): change it (sign it, add a
        token) and return it, or return another Request to send instead; None sends it as it is."""
        return request

    @_does_nothing
    def validate(self, request: Request, response: Response) -> Optional[bool]:
        """Called with each page that came back 2xx: return False, or raise, to reject it (a captcha, a
        ban page). A rejected page is retried like a 503; once the retries are spent the request fails
        with the reason. Anything else (None, True) accepts it."""
        return True

    def failed_request(self, request: Request, response_or_exception: Union[Response, Exception],
                       task: dict[str, Any]) -> None:
        """A request failed for good (retries spent, or not retryable). The default marks the task
        failed; an override that still wants that must call super()."""
        id_field = self.runtime.layout.id_field
        reason = self.runtime.failure_reason(task.get(id_field), response_or_exception)
        log.warning("%s", failure_line(f"task {task.get(id_field)} failed: {request.method} {request.url}: "
                                       f"{reason or _failure_reason(response_or_exception)}"))
        self.update_task(task[id_field], ok=False)

    # -- what the user calls
    def update_task(self, task_id: Any, ok: bool = True) -> None:
        """Settle a task: done (ok=True) or failed. While a worker of this process holds that task, done is
        written only once every item the task yielded has landed; failed is written at once. Called
        anywhere else (the master's own code, say), it is written at once."""
        self.runtime.settle(task_id, ok)

    def start(self) -> None:
        """Run a worker here: with keep_alive, until SIGTERM / SIGINT; without, until the queue is
        empty and the batch done. A MemoryBatchStore runs its master here too."""
        Runtime.run_entry(self, lambda runtime, stop: runtime.run_worker(stop, keep_alive=self.keep_alive))

    def start_monitor(self, once: bool = False) -> None:
        """Run the master here: resident, or with once=True the current batch to completion."""
        Runtime.run_entry(self, lambda runtime, stop: runtime.run_master(stop, once))

    @property
    def settings(self) -> Settings:
        """The settings this spider runs with, resolved once."""
        return self.runtime.settings

    @property
    def runtime(self) -> Runtime:
        """What this spider runs in (batchd/runtime.py), made on first use unless a Runtime made this spider
        and bound it already: a configuration error surfaces from whichever call asked first (start() turns
        it into one line and exit 78)."""
        if self._runtime is None:
            self._runtime = Runtime.of(self, **self._runtime_args)
        return self._runtime

    def bind(self, runtime: Runtime) -> None:
        """Called by the Runtime that made this spider, or was made for it."""
        self._runtime = runtime


def _failure_reason(response_or_exception: Union[Response, Exception]) -> str:
    if isinstance(response_or_exception, Response):
        return f"HTTP {response_or_exception.status_code}"
    return f"{type(response_or_exception).__name__}: {response_or_exception}"
