"""Bad input: one clear line naming the culprit, the right exit code, no traceback, no password."""
import logging
import signal

import pytest

from harness import stays_true
from procs import Proc
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
