"""`batchd check`: whether the config, the connections, the task table and its index, the download chain and the
browser (for spiders that render pages) are fit for a crawl. It changes nothing."""
import argparse
import inspect
import logging
import re
import sys
from typing import Callable

from ..errors import BatchdError, ExitCode
from ..export.item_export import spider_item_tables
from ..model import COLUMNS_ITEM_KIND
from ..worker.item_checks import check_batch_column
from ..backends.ports import claim_namespace
from ..hosts.crawl_hours import CrawlHours
from ..render.tools import READY, readiness
from ..schedule import which_rule
from ..runtime import Runtime
from .arguments import VerbGroup, runtime_from_args, spider_and_config

RENDERING = re.compile(r"""\brender\s*=\s*(True|["']auto["'])|\brender_wait\b""")

VERBS = VerbGroup()
verb = VERBS.verb


class Checklist:
    """`batchd check`: one line per item, OK or the one-line reason; the first failure's exit code."""

    def __init__(self):
        self.exit_code = ExitCode.OK

    def item(self, name: str, action: Callable[[], tuple], needs: object = True):
        """Run `action` -> (value, text); returns the value, or None when it failed or was skipped."""
        if not needs:
            print(f"SKIP  {name:<11} needs the checks above")
            return None
        try:
            value, text = action()
        except BatchdError as e:
            print(f"FAIL  {name:<11} {e}")
            self.exit_code = self.exit_code or e.exit_code
            return None
        print(f"OK    {name:<11} {text}")
        return value


@verb("check", "check the config, connections, task table, columns and index", spider_and_config,
      examples=("batchd check crawl_task.py:CrawlTask", "batchd check --config /etc/batchd/batchd.toml"),
      exits=((ExitCode.OK, "every check passed"), (ExitCode.FAILURE, "a check failed (the state column has no index)"),
             ExitCode.UNAVAILABLE, ExitCode.CONFIG))
def check_verb(args: argparse.Namespace) -> int:
    logging.getLogger("batchd.store").setLevel(logging.ERROR)    # the index line says it, once
    checks = Checklist()
    runtime = checks.item("config", lambda: _checked_runtime(args))
    reached = checks.item("store", lambda: (True, _reach_store(runtime)), needs=runtime)
    queue = checks.item("queue", lambda: (True, _reach_queue(runtime)), needs=runtime)
    opened = checks.item("task table", lambda: (True, _open_task_table(runtime)), needs=reached)
    checks.item("index", lambda: (True, _state_index(runtime)), needs=opened)
    checks.item("item batch", lambda: (True, _batch_column(runtime)), needs=opened)
    checks.item("namespace", lambda: (True, _namespace_owner(runtime)), needs=opened and queue)
    checks.item("downloader", lambda: (True, _middleware_chain(runtime)), needs=queue)
    checks.item("browser", lambda: (True, _browser(runtime)), needs=runtime)
    checks.item("calendar", lambda: (True, _calendar(runtime)), needs=runtime)
    if runtime is not None:
        _host_terms(runtime)
    return checks.exit_code


def _host_terms(runtime: Runtime) -> None:
    """The terms in force: the global ones, then one line per [hosts] table (proxies redacted)."""
    terms = runtime.assembly.host_terms
    print(f"TERMS {'every host':<11} {terms.defaults.describe()}")
    for pattern, table in terms.patterns.items():
        print(f"TERMS {pattern:<11} {table.describe()}")


def _calendar(runtime: Runtime) -> str:
    """Which rule opens batches (BATCH_SCHEDULE wins over BATCH_INTERVAL), and that the crawl hours of a host's own
    can be kept (they need BATCH_TASK_HOST_FIELD)."""
    CrawlHours(runtime.assembly.host_terms, runtime.settings).check_host_field(runtime.layout.host_field)
    return which_rule(runtime.settings)


def _checked_runtime(args: argparse.Namespace) -> tuple:
    runtime = runtime_from_args(args, read_only=True)
    return runtime, (f"{type(runtime.spider).__name__}: task table {runtime.layout.table}, "
                     f"namespace {runtime.namespace}")


def _reach_store(runtime: Runtime) -> str:
    runtime.store.ping()
    return runtime.store.describe()


def _reach_queue(runtime: Runtime) -> str:
    runtime.backend.leases.ping()
    return runtime.backend.leases.describe()


def _open_task_table(runtime: Runtime) -> str:
    layout = runtime.layout
    runtime.store.open(layout)
    hosts = f", hosts from `{layout.host_field}` (BATCH_TASK_HOST_FIELD)" if layout.host_field else ""
    return f"`{layout.table}` with `{layout.id_field}`, `{layout.state_field}`, `{layout.time_field}`{hosts}"


def _batch_column(runtime: Runtime) -> str:
    """Whether `batchd export --batch N` can tell each item table's rows of a batch: the default item table by its
    batch_id, a column table by ITEM_BATCH_COLUMN, which each of them must have."""
    column = runtime.settings.ITEM_BATCH_COLUMN
    tables = [table.name for table in spider_item_tables(runtime.spider, runtime.layout)
              if table.kind == COLUMNS_ITEM_KIND]
    if not tables:
        return "the default item table keeps each item's batch"
    if column is None:
        return (f"off: `batchd export --batch N` cannot pick the rows of a batch in {', '.join(tables)} "
                "(set ITEM_BATCH_COLUMN to a column the worker fills)")
    for table in tables:
        check_batch_column(runtime.store.item_columns(table), column, table)
    return f"`{column}` in {', '.join(tables)} (ITEM_BATCH_COLUMN)"


def _namespace_owner(runtime: Runtime) -> str:
    identity = claim_namespace(runtime.backend.namespaces, runtime.store, runtime.layout, runtime.namespace,
                               "check", record=False)
    return f"{runtime.namespace} serves {identity}"


def _middleware_chain(runtime: Runtime) -> str:
    """DOWNLOADER_MIDDLEWARES as a worker builds it (with these settings: links they leave idle are out)."""
    downloader = runtime.assembly.downloader(runtime.settings.SPIDER_THREAD_COUNT, spider=runtime.spider,
                                             host_rates=runtime.backend.host_rates(runtime.namespace))
    names = " > ".join(type(link).__name__ for link in downloader.chain.middlewares) or "no link"
    downloader.close()
    return f"middlewares {names}"


def _browser(runtime: Runtime) -> str:
    """What renders pages here (Request(render=...)), or what is missing and how to install it: a failure only
    for a spider whose code asks for a browser."""
    line = readiness(runtime.settings)
    if line.startswith(READY):
        return line[len(READY):]
    if _asks_for_a_browser(type(runtime.spider)):
        raise BatchdError(line)
    return f"none needed by {type(runtime.spider).__name__}'s code ({line})"


def _asks_for_a_browser(spider_class: type) -> bool:
    """Whether the spider's module says render=True, render="auto" or render_wait anywhere (a reading of its
    source: a spider that builds its options some other way is not seen, and its check does not fail)."""
    try:
        source = inspect.getsource(sys.modules[spider_class.__module__])
    except (KeyError, OSError, TypeError):
        return False
    return RENDERING.search(source) is not None


def _state_index(runtime: Runtime) -> str:
    layout = runtime.layout
    fix = runtime.store.missing_state_index(layout)
    if fix:
        raise BatchdError(f"`{layout.state_field}` has no index, so every patrol scans the whole table; run: {fix}")
    if layout.host_field:     # the claim reads the host column with the rows the state index finds
        return f"`{layout.state_field}` is indexed; claims across hosts need no index on `{layout.host_field}`"
    return f"`{layout.state_field}` is indexed"
