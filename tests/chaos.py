"""The chaos suite's common ground: a batch of at least a thousand tasks run by real `batchd` processes,
a fault in the middle, and the same verdict at the end of every scenario.

    batch = ChaosBatch(procs, backend, site, tasks=1000)
    run = batch.start("run", "--workers", "2")              # a `batchd` process on the backend
    batch.wait_for_progress(200)                              # tasks settled in the store
    ... the fault ...
    batch.wait_closed()                                       # the batch record says is_done
    verdict = batch.verdict("kill storm", kills=12)           # prints figures and counts
    verdict.assert_sound()                                    # 0 lost, 0 done without items, 0 duplicates

The pages are the test site's /page/<n> (one item per task, the seed spider's). The verdict reads
the store straight, never through batchd: a task is lost when it is neither done nor failed once the
batch is closed; done without items when it is done and neither its item row nor a dumped line in
FAILED_ITEMS_PATH exists; duplicate item rows are rows beyond one per (batch, task, request, item).
"""
import glob
import json
import os
import time
from dataclasses import dataclass, field

from batchd.archive.files import cut_torn_files
from batchd.archive.replay import ArchiveReplay
from batchd.config import load_settings
from batchd.task import TaskState
from harness import wait_for
from supervised import start_batchd
from warcio.checker import Checker

VERDICTS: list = []     # the CHAOS lines of the running test: conftest.py carries them to pytest's summary

# Leases short enough that a lost one comes back within a scenario; flushes and patrols quick.
CHAOS_SETTINGS = {"BATCH_LOST_TASK_STALE": 8.0, "CHILD_TIMEOUT": 10.0, "STOP_TIMEOUT": 30.0,
                  "BATCH_MONITOR_INTERVAL": 1.0, "ITEM_FLUSH_INTERVAL": 0.2, "STATUS_INTERVAL": 1.0,
                  "MASTER_LOCK_TIMEOUT": 5.0, "REQUEST_TIMEOUT": 5.0, "TASK_TIMEOUT": 60.0}


@dataclass
class Verdict:
    scenario: str
    tasks: int
    done: int
    failed: int
    lost: int
    done_without_items: int
    duplicates: int
    seconds: float
    figures: dict = field(default_factory=dict)

    def line(self) -> str:
        extra = ", ".join(f"{k} {v}" for k, v in self.figures.items())
        return (f"CHAOS {self.scenario}: {self.tasks} tasks in {self.seconds:.1f} s, {self.done} done, "
                f"{self.failed} failed; lost {self.lost}, done without items {self.done_without_items}, "
                f"duplicates {self.duplicates}" + (f"; {extra}" if extra else ""))

    def assert_sound(self, failed: int = 0) -> None:
        assert (self.lost, self.done_without_items, self.duplicates) == (0, 0, 0), self.line()
        assert self.failed <= failed, self.line()


class ChaosBatch:
    def __init__(self, procs, backend, site, tasks: int = 1000, path: str = "/page/{n}", **settings):
        self.procs, self.backend, self.site = procs, backend, site
        self.settings = {**CHAOS_SETTINGS, **settings}
        self.urls = [site.url(path.format(n=n)) for n in range(1, tasks + 1)]
        backend.create_tasks(self.urls)
        self.started = time.monotonic()

    def start(self, verb: str, *args, spider=None, env=None, **settings):
        """A `batchd VERB` process on this batch's backend (its settings on top of the chaos ones)."""
        kwargs = {"spider": spider} if spider else {}
        return start_batchd(self.procs, self.backend, verb, *args, env=env, **{**self.settings, **settings},
                            **kwargs)

    def settled(self) -> int:
        return sum(1 for state in self.backend.states().values() if state in (TaskState.DONE, TaskState.FAILED))

    def wait_for_progress(self, settled: int, timeout: float = 120.0) -> None:
        wait_for(lambda: self.settled() >= settled, timeout=timeout, message=f"{settled} tasks settled")

    def wait_closed(self, batch: int = 1, timeout: float = 300.0) -> None:
        def closed():
            records = self.backend.records()
            return len(records) >= batch and records[batch - 1]["is_done"]
        wait_for(closed, timeout=timeout, interval=0.2, message=f"batch {batch} closed")

    def verdict(self, scenario: str, **figures) -> Verdict:
        states = self.backend.states()
        done = {task for task, state in states.items() if state == TaskState.DONE}
        failed = sum(1 for state in states.values() if state == TaskState.FAILED)
        with_items = self._tasks_with_items() | self._tasks_dumped()
        verdict = Verdict(scenario=scenario, tasks=len(states), done=len(done), failed=failed,
                          lost=len(states) - len(done) - failed, done_without_items=len(done - with_items),
                          duplicates=self._duplicate_rows(), seconds=time.monotonic() - self.started,
                          figures=figures)
        print(verdict.line())
        VERDICTS.append(verdict.line())
        return verdict

    def done_without_records(self, archive_path: str, batch: int = 1) -> int:
        """Tasks done whose response the batch's archive (ARCHIVE = "warc" under `archive_path`) does not hold,
        read as `batchd reparse` reads it; every WARC file found whole by warcio's check."""
        settings = load_settings(self.backend.settings(ARCHIVE="warc", ARCHIVE_PATH=archive_path), environ={})
        cut_torn_files(archive_path, settings.namespace_for(self.backend.table))    # as a worker's start would
        for path in glob.glob(os.path.join(archive_path, "*", "*", "*.warc.gz")):
            assert Checker(type("Args", (), {"inputs": [path], "verbose": False})()).process_all() == 0, path
        replay = ArchiveReplay(settings, self.backend.table, batch)
        url_of = {row[0]: row[1] for row in self.backend.sql(f"SELECT `id`, `url` FROM `{self.backend.table}`")}
        done = [task for task, state in self.backend.states().items() if state == TaskState.DONE]
        return sum(1 for task in done if replay.find("GET", url_of[task]) is None)

    def _tasks_with_items(self) -> set:
        return {row[0] for row in self.backend.sql(f"SELECT DISTINCT `task_id` FROM `{self.backend.table}_item`")}

    def _tasks_dumped(self) -> set:
        path = self.backend.failed_items_path
        if not os.path.exists(path):
            return set()
        with open(path, encoding="utf-8") as f:
            return {json.loads(line)["task_id"] for line in f if line.strip()}

    def _duplicate_rows(self) -> int:
        (rows, distinct), = self.backend.sql(
            f"SELECT COUNT(*), COUNT(DISTINCT `batch_id`, `task_id`, `request_seq`, `item_seq`) "
            f"FROM `{self.backend.table}_item`")
        return rows - distinct
