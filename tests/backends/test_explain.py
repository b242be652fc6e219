"""Every statement the master (and a worker's write-back) runs against the task table uses an index:
the plans of a whole batch on a table of 256,000 rows, MariaDB and SQLite, read with EXPLAIN.

The statements are caught as they run (a spy on the store's fetch and execute), and each is
explained twice with the values it ran with: at once, when the table is as it was then (half
the batch still pending, say), and once the batch has closed (nothing pending: the case where
a claim or a count that scanned would be slowest). A plan passes when no step reads the whole
task table (MariaDB: type ALL, or a whole index unless it walks the primary key in order up to
a LIMIT; SQLite: SCAN without a LIMIT in key order) and none sorts it (filesort, temp B-tree).
"""
import re

import pytest

from batchd.service.lifecycle import StopFlag
from batchd.task import TaskState
from harness import make_master, patrol_until, work_off

ROWS = 256_000
P, D, F = TaskState.PENDING, TaskState.DONE, TaskState.FAILED


def grow_task_table(backend, rows: int) -> None:
    """A table of a finished batch: `rows` rows (doubled by INSERT ... SELECT), 1 in 50 failed, the rest done."""
    backend.create_tasks([f"http://x.invalid/{i}" for i in range(1000)])
    q = quote(backend)
    while backend.sql(f"SELECT COUNT(*) FROM {q('crawl_task')}")[0][0] < rows:
        backend.sql(f"INSERT INTO {q('crawl_task')} ({q('url')}) SELECT {q('url')} FROM {q('crawl_task')}")
    backend.sql(f"UPDATE {q('crawl_task')} SET {q('batch_status')} = "
                f"CASE WHEN MOD({q('id')}, 50) = 0 THEN {int(F)} ELSE {int(D)} END")
    backend.sql("ANALYZE TABLE `crawl_task`" if backend.kind == "mysql" else "ANALYZE")


def quote(backend):
    mark = '"' if backend.kind == "sqlite" else "`"
    return lambda name: f"{mark}{name}{mark}"


class PlanSpy:
    """Explains each task-table statement a store runs, the first time it runs, and keeps them all."""

    def __init__(self, backend, store):
        self.backend, self.statements, self.failures = backend, {}, []
        for name in ("fetch", "execute"):
            original = getattr(store, name)
            setattr(store, name, self._spying(original))

    def _spying(self, original):
        def run(sql, params=(), *args, **kwargs):
            if touches_task_table(sql) and sql not in self.statements:
                self.statements[sql] = list(params)
                self.check(sql, list(params), "as it ran")
            return original(sql, params, *args, **kwargs)
        return run

    def check(self, sql: str, params: list, when: str) -> None:
        for problem in plan_problems(self.backend, sql, params):
            self.failures.append(f"{when}: {problem}\n    {sql}")

    def check_again(self) -> None:
        for sql, params in self.statements.items():
            self.check(sql, params, "after the batch")


def touches_task_table(sql: str) -> bool:
    return bool(re.search(r"""(FROM|UPDATE)\s+[`"]crawl_task[`"]""", sql)) and not sql.startswith("INSERT")


def plan_problems(backend, sql: str, params: list) -> list:
    if backend.kind == "mysql":
        return mysql_plan_problems(backend, sql, params)
    return sqlite_plan_problems(backend, sql, params)


def walks_key_to_a_limit(sql: str) -> bool:
    return bool(re.search(r"""ORDER BY [`"]id[`"] LIMIT""", sql))


def mysql_plan_problems(backend, sql: str, params: list) -> list:
    cur = backend.conn.cursor()
    cur.execute("EXPLAIN " + sql, params)
    names = [d[0] for d in cur.description]
    plan = [dict(zip(names, row)) for row in cur.fetchall()]
    cur.close()
    problems = []
    for step in plan:
        if step["table"] != "crawl_task":
            continue
        whole_index = step["type"] == "index" and not (step["key"] == "PRIMARY" and walks_key_to_a_limit(sql))
        if step["type"] == "ALL" or whole_index:
            problems.append(f"reads the whole table: {step}")
        if "filesort" in (step["Extra"] or ""):
            problems.append(f"sorts the table: {step}")
    return problems


def sqlite_plan_problems(backend, sql: str, params: list) -> list:
    plan = [row[3] for row in backend.conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()]
    problems = []
    for detail in plan:
        if detail.startswith("SCAN crawl_task") and not walks_key_to_a_limit(sql):
            problems.append(f"reads the whole table: {detail}")
        if "TEMP B-TREE" in detail:
            problems.append(f"sorts: {detail}")
    return problems


@pytest.fixture
def big_backend(shared_backend):
    grow_task_table(shared_backend, ROWS)
    return shared_backend


@pytest.mark.parametrize("host_field", [None, "url"], ids=["id-order", "across-hosts"])
def test_every_statement_of_a_batch_uses_an_index(big_backend, host_field):
    hosts = {"BATCH_TASK_HOST_FIELD": host_field} if host_field else {}
    master, spider = make_master(big_backend, BATCH_PUSH_LIMIT=500, BATCH_LOST_TASK_STALE=60, **hosts)
    spy = PlanSpy(big_backend, master.store)
    runtime = spider.runtime
    patrol_until(master, lambda: master.batch is not None and not master.batch.resetting, timeout=120,
                 message="the reset of 256,000 rows")
    work_off(runtime, {task_id: D for task_id in range(1, 400)} | {400: F})     # write-backs, tally included
    master.patrol(StopFlag())                                                  # the queue refilled
    assert runtime.backend.leases.lease("short", 0.05) is not None
    patrol_until(master, lambda: runtime.backend.leases.leased_count() == 0, message="an expired lease reclaimed")
    settle_every_task(big_backend, runtime)
    patrol_until(master, lambda: master.patrol(StopFlag()) is True, timeout=60, message="the batch closed")
    spy.check_again()
    kinds = {statement.split()[0] for statement in spy.statements}
    assert kinds == {"SELECT", "UPDATE"} and len(spy.statements) >= 9, sorted(spy.statements)
    assert not spy.failures, "\n".join(spy.failures)


def settle_every_task(backend, runtime) -> None:
    """The rest of the batch, settled at once by the test, its queue emptied: the master finds it dry."""
    q = quote(backend)
    backend.sql(f"UPDATE {q('crawl_task')} SET {q('batch_status')} = {int(D)} WHERE {q('batch_status')} <> {int(F)}")
    runtime.backend.leases.clear_batch()
