"""Bad input: one clear line naming the culprit, the right exit code, no traceback, no password."""
import logging
import signal

import pytest

from harness import stays_true
from procs import Proc
from supervised import SEED, batchd
from spiders.seed import CrawlTask

PASSWORD = "s3cret-Pa55"


def errors_of(output: str) -> list:
    return [line for line in output.splitlines() if " ERROR " in line]


def warnings_of(output: str) -> list:
    return [line for line in output.splitlines() if " WARNING " in line]


def assert_one_clean_error(proc, *fragments):
    output = proc.output()
    assert "Traceback" not in output, output
    errors = errors_of(output)
    assert len(errors) == 1, output
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


def test_a_missing_task_table_exits_78_naming_it(mysql_backend, procs):
    proc = procs.add(Proc.spider("spiders.seed:CrawlTask", "master-once", mysql_backend.env()))
    assert proc.wait(30) == 78
    assert_one_clean_error(proc, "task table `crawl_task` not found", "__task_table__")


def test_a_missing_column_exits_78_naming_table_column_and_setting(mysql_backend, procs):
    mysql_backend.sql("CREATE TABLE `crawl_task` (`id` BIGINT PRIMARY KEY, `url` TEXT, `batch_status` TINYINT)")
    proc = procs.add(Proc.spider("spiders.seed:CrawlTask", "worker-once", mysql_backend.env()))
    assert proc.wait(30) == 78
    assert_one_clean_error(proc, "`crawl_task`", "`update_time`", "BATCH_TASK_TIME_FIELD")


def test_a_renamed_state_column_is_found_through_its_setting(mysql_backend, procs):
    mysql_backend.sql("CREATE TABLE `crawl_task` (`id` BIGINT PRIMARY KEY, `url` TEXT, `status` TINYINT "
                      "NOT NULL DEFAULT 0, `update_time` DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP)")
    proc = procs.add(Proc.spider("spiders.seed:CrawlTask", "master-once", mysql_backend.env()))
    assert proc.wait(30) == 78
    assert_one_clean_error(proc, "`batch_status`", "BATCH_TASK_STATE_FIELD")
    ok = procs.add(Proc.spider("spiders.seed:CrawlTask", "master-once",
                               mysql_backend.env(BATCH_TASK_STATE_FIELD="status")))
    assert ok.wait(30) == 0


def test_an_invalid_identifier_in_a_setting_exits_78(mysql_backend, procs):
    proc = procs.add(Proc.spider("spiders.seed:CrawlTask", "master-once",
                                 mysql_backend.env(BATCH_TASK_ID_FIELD="id`; DROP TABLE x; --")))
    assert proc.wait(30) == 78
    assert_one_clean_error(proc, "BATCH_TASK_ID_FIELD", "not a valid table or column name")


def test_an_unknown_setting_exits_78_naming_it(mysql_backend, procs):
    env = dict(mysql_backend.env(), BATCHD_BATCH_INTERVALL="3")
    proc = procs.add(Proc.spider("spiders.seed:CrawlTask", "master-once", env))
    assert proc.wait(30) == 78
    assert_one_clean_error(proc, "BATCHD_BATCH_INTERVALL")


def test_a_state_column_without_index_warns_with_the_statement_to_run(mysql_backend, caplog):
    mysql_backend.create_tasks(["http://x.invalid/1"], index=False)
    spider = CrawlTask(batch_store=mysql_backend.store(), settings=mysql_backend.settings())
    with caplog.at_level(logging.WARNING, logger="batchd"):
        spider.runtime.store.open(spider.runtime.layout)
    assert "ALTER TABLE `crawl_task` ADD INDEX `idx_batch_status` (`batch_status`)" in caplog.text
    caplog.clear()
    mysql_backend.sql("ALTER TABLE `crawl_task` ADD INDEX `idx_batch_status` (`batch_status`)")
    with caplog.at_level(logging.WARNING, logger="batchd"):
        spider.runtime.store.open(spider.runtime.layout)
    assert "ADD INDEX" not in caplog.text


@pytest.mark.parametrize("setting, url", [
    ("MYSQL_URL", f"mysql://root:{PASSWORD}@127.0.0.1:1/batchd"),
    ("REDIS_URL", f"redis://:{PASSWORD}@127.0.0.1:1/0"),
])
def test_unreachable_backend_in_once_mode_exits_69_without_the_password(mysql_backend, procs, setting, url):
    mysql_backend.create_tasks(["http://x.invalid/1"])
    proc = procs.add(Proc.spider("spiders.seed:CrawlTask", "master-once", mysql_backend.env(**{setting: url})))
    assert proc.wait(30) == 69
    assert_one_clean_error(proc, "unreachable", "127.0.0.1")
    assert PASSWORD not in proc.output()


def test_a_once_worker_that_cannot_reach_its_store_exits_69(mysql_backend, procs):
    url = f"mysql://root:{PASSWORD}@127.0.0.1:1/batchd"
    proc = procs.add(Proc.spider("spiders.seed:CrawlTask", "worker-once", mysql_backend.env(MYSQL_URL=url)))
    assert proc.wait(30) == 69
    assert_one_clean_error(proc, "unreachable")
    assert PASSWORD not in proc.output()


def test_unreachable_mysql_in_resident_mode_is_retried_until_stopped(mysql_backend, procs):
    url = f"mysql://root:{PASSWORD}@127.0.0.1:1/batchd"
    proc = procs.add(Proc.spider("spiders.seed:CrawlTask", "master", mysql_backend.env(MYSQL_URL=url)))
    proc.wait_output("waiting for it, trying again every few seconds")
    stays_true(lambda: proc.alive() and len(warnings_of(proc.output())) == 1 and not errors_of(proc.output()),
               2.0, message="one line when the outage starts, not one per retry",      # a few retries' worth
               explain=proc.output)
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert PASSWORD not in proc.output()


@pytest.mark.parametrize("role", ["master", "worker"])
def test_a_refused_mysql_password_is_a_configuration_error_not_an_outage(mysql_backend, procs, role):
    """Resident processes retry outages for ever; a password the server refuses is not one: 78 at once."""
    url = f"mysql://root:{PASSWORD}@127.0.0.1:3306/{mysql_backend.mysql_url.rsplit('/', 1)[1]}"
    proc = procs.add(Proc.spider("spiders.seed:CrawlTask", role, mysql_backend.env(MYSQL_URL=url)))
    assert proc.wait(30) == 78
    assert_one_clean_error(proc, "setting MYSQL_URL", "Access denied", "1045")
    assert PASSWORD not in proc.output()


def test_an_unknown_database_is_a_configuration_error(mysql_backend, procs):
    url = "mysql://root@127.0.0.1:3306/batchd_no_such_database"
    proc = procs.add(Proc.spider("spiders.seed:CrawlTask", "master", mysql_backend.env(MYSQL_URL=url)))
    assert proc.wait(30) == 78
    assert_one_clean_error(proc, "setting MYSQL_URL", "batchd_no_such_database", "1049")


def test_a_refused_redis_password_is_a_configuration_error(mysql_backend, procs):
    from servers import PrivateRedis

    class GuardedRedis(PrivateRedis):
        def command(self):
            return super().command() + ["--requirepass", "right-one"]

    mysql_backend.create_tasks(["http://x.invalid/1"])
    with GuardedRedis() as server:
        url = f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0"
        proc = procs.add(Proc.spider("spiders.seed:CrawlTask", "master", mysql_backend.env(REDIS_URL=url)))
        assert proc.wait(30) == 78
    assert_one_clean_error(proc, "setting REDIS_URL", "refused us")
    assert PASSWORD not in proc.output()


# -- every verb, every kind of mistake (issue 34, point 1): one line naming the culprit, a documented exit code
VERBS = (("status",), ("failed",), ("quality",), ("check",), ("pause",), ("resume",), ("open-batch",),
         ("requeue", "--failed"), ("tasks", "add", "http://a.example/1"), ("run", "--once"))
DOCUMENTED = {64, 65, 69, 78, 1}     # docs/architecture.md, Exit codes: what a user's mistake may end with
BROKEN_SPIDER = 'import batchd\n\nclass CrawlTask(batchd.BatchSpider)\n    __task_table__ = "crawl_task"\n'


def mistakes(mysql_backend, tmp_path) -> dict:
    """kind -> (settings, the spider, what the line must name, the exit code): each a newcomer's typo."""
    database = mysql_backend.mysql_url.rsplit("/", 1)[1]
    mysql_backend.create_tasks(["http://a.example/0"])        # crawl_task is there; no_such_table is not
    broken, elsewhere = tmp_path / "broken.py", tmp_path / "elsewhere.py"
    broken.write_text(BROKEN_SPIDER)
    elsewhere.write_text('from spiders.seed import CrawlTask\n\n\nclass Elsewhere(CrawlTask):\n'
                         '    __task_table__ = "no_such_table"\n')
    return {
        "bad setting": ({"BATCHD_SPIDER_THREAD_COUNT": "lots"}, SEED, "SPIDER_THREAD_COUNT", 78),
        "wrong password": ({"BATCHD_MYSQL_URL": f"mysql://root:{PASSWORD}@127.0.0.1:3306/{database}"}, SEED,
                           "MYSQL_URL", 78),
        "unreachable server": ({"BATCHD_MYSQL_URL": f"mysql://root:{PASSWORD}@127.0.0.1:1/{database}"}, SEED,
                               "unreachable", 69),
        "unreachable Redis": ({"BATCHD_REDIS_URL": f"redis://:{PASSWORD}@127.0.0.1:1/0"}, SEED, "Redis", 69),
        "spider that does not import": ({}, f"{broken}:CrawlTask", "broken.py line 3", 78),
        "missing table": ({}, f"{elsewhere}:Elsewhere", "no_such_table", 78),
    }


# What a verb does not touch cannot be its mistake: `tasks add` makes the table it is given and needs no Redis;
# pause and resume set the namespace's flag in Redis and read no table; failed, quality and requeue read the
# store alone while no batch is open.
NOT_ITS_MISTAKE = {"tasks": {"missing table", "unreachable Redis"},
                   "pause": {"wrong password", "unreachable server", "missing table"},
                   "resume": {"wrong password", "unreachable server", "missing table"},
                   "failed": {"unreachable Redis"}, "quality": {"unreachable Redis"}, "requeue": {"unreachable Redis"}}
# status reads the spider without importing it: one that does not import is named on its `spider` line, and
# the rest of the status still comes.
GOES_ON = {("status", "spider that does not import")}


@pytest.mark.parametrize("verb", VERBS, ids=" ".join)
def test_every_verb_answers_a_mistake_with_one_line_and_a_documented_code(mysql_backend, tmp_path, verb):
    for kind, (env, spider, culprit, code) in mistakes(mysql_backend, tmp_path).items():
        if kind in NOT_ITS_MISTAKE.get(verb[0], ()):
            continue
        args = [*verb[:2], "--spider", spider, *verb[2:]] if verb[0] == "tasks" else [verb[0], spider, *verb[1:]]
        result = batchd(*args, backend=mysql_backend, env=env, timeout=60)
        output = result.stdout + result.stderr
        assert "Traceback" not in output and PASSWORD not in output, f"{kind}, {verb}:\n{output}"
        code = 0 if (verb[0], kind) in GOES_ON else code
        assert result.returncode == code and code in DOCUMENTED | {0}, f"{kind}, {verb}: {result.returncode}\n{output}"
        named = [line for line in output.splitlines() if culprit in line]
        assert named, f"{kind}, {verb}: no line names {culprit!r}\n{output}"
