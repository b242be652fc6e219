"""The `batchd` command: --version and --help, where SPIDER comes from, the spider loader's errors,
status (text and --json), check, retry --items, --daemon with a pid file, a worker or master
instance's own config file, and reload. Real MariaDB, Redis and processes throughout."""
import json
import os
import re
import signal
import socket
import subprocess
import sys

import pytest

from batchd.cli.main import VERBS, main
from batchd.cli.status_text import workers_text
from batchd.errors import ConfigError
from batchd.supervisor.loader import load_spider_class
from batchd.worker.dumps import FailedItemsFile
from batchd.model import ItemRow
from batchd.task import TaskState
from harness import batch_done, wait_for
from procs import HERE, ROOT
from spiders.seed import CrawlTask
from supervised import (DAEMON_SETTINGS, SEED, alive, batchd, one_error_line, children_of, lines_with, masters_of,
                        slow_urls, start_batchd, status_snapshot, title, workers_of)


def test_version_and_help_on_every_verb(capsys):
    for command in ([sys.executable, "-m", "batchd"], [os.path.join(os.path.dirname(sys.executable), "batchd")]):
        result = subprocess.run(command + ["--version"], capture_output=True, text=True)
        assert (result.returncode, result.stdout.strip()) == (0, "batchd 0.1.0")
    assert {"run", "master", "worker", "status", "check", "retry"} <= set(VERBS)
    for name in VERBS:
        with pytest.raises(SystemExit) as exit_info:
            main([name, "--help"])
        assert exit_info.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: batchd {name}")


def test_the_spider_comes_from_the_argument_the_environment_or_the_config_file(mysql_backend, tmp_path):
    mysql_backend.create_tasks(["http://x.invalid/1"])
    assert batchd("check", SEED, backend=mysql_backend).returncode == 0
    assert batchd("check", backend=mysql_backend, env={"BATCHD_SPIDER": SEED}).returncode == 0
    config = tmp_path / "batchd.toml"
    config.write_text(f'SPIDER = "{os.path.join(HERE, SEED)}"\n')
    assert batchd("check", "--config", str(config), backend=mysql_backend).returncode == 0
    nowhere = batchd("check", backend=mysql_backend)
    assert nowhere.returncode == 78
    assert "FAIL  config      no spider: name it" in nowhere.stdout


@pytest.mark.parametrize("source, spec, reason", [
    (None, "spiders/absent.py:CrawlTask", "file spiders/absent.py not found"),
    ("class Broken(:\n", "broken.py:Broken", "cannot import broken.py: SyntaxError"),
    ("import batchd\nx = undefined_name\n", "broken.py:X", "NameError: name 'undefined_name' is not defined "
                                                            "(broken.py line 2)"),
    ("import batchd\n", "broken.py:Missing", "broken.py has no class 'Missing'"),
    ("class Plain:\n    pass\n", "broken.py:Plain", "Plain is not a subclass of batchd.BatchSpider"),
    (None, "no_such_module:Spider", "no module named 'no_such_module'"),
    (None, "just-a-name", "expected path/file.py:Class or module:Class"),
])
def test_the_loader_names_the_path_in_every_failure(tmp_path, monkeypatch, source, spec, reason):
    monkeypatch.chdir(tmp_path)
    if source is not None:
        (tmp_path / "broken.py").write_text(source)
    with pytest.raises(ConfigError) as error:
        load_spider_class(spec)
    assert spec in str(error.value) and reason in str(error.value)


def test_the_loader_takes_a_file_or_a_module():
    assert load_spider_class(os.path.join(HERE, SEED)).__name__ == "CrawlTask"
    assert load_spider_class("spiders.seed:CrawlTask") is CrawlTask


def test_a_spider_that_does_not_import_ends_with_one_line_and_78(mysql_backend, tmp_path):
    (tmp_path / "spider.py").write_text("import batchd\nraise RuntimeError('boom')\n")
    result = batchd("status", str(tmp_path / "spider.py:Spider"), backend=mysql_backend)
    assert result.returncode == 78
    assert "RuntimeError: boom (spider.py line 2)" in one_error_line(result)


def test_status_shows_the_batch_the_queue_and_the_workers(mysql_backend, site, procs):
    # Enough slow tasks that the batch is still open while `status` runs on a loaded machine (SIGTERM ends it).
    mysql_backend.create_tasks(slow_urls(site, 400, seconds=0.5))
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "2", BATCH_PUSH_LIMIT=10)
    wait_for(lambda: snapshot_shows(mysql_backend, batch_id=1, workers_alive=2, master_alive=1),
             message="a snapshot with two workers and the master's figures of batch 1")
    status = json.loads(batchd("status", SEED, "--json", backend=mysql_backend).stdout)
    assert status["batch"]["id"] == 1 and not status["batch"]["is_done"]
    assert status["tasks"]["total"] == 400 and status["queue"]["waiting"] <= 10
    host, = status["hosts"]
    assert (host["host"], host["instance"], host["role"]) == (socket.gethostname(), "run", "run")
    assert (host["workers_alive"], host["master_alive"], host["pid"]) == (2, 1, proc.pid)
    assert status["workers_alive"] == 2 and status["rate"] is not None
    assert sorted(w["pid"] for w in host["workers"]) == workers_of(proc.pid)
    assert status["unflushed"] == host["unflushed"]              # the hosts' figures, summed (one host here)
    text = batchd("status", SEED, backend=mysql_backend).stdout
    assert "batch    1 opened" in text and "/400:" in text
    workers = f"workers  2 alive of 2 wanted: host {socket.gethostname()} — 2 workers and the master (batchd-run)\n"
    assert workers in text
    assert isinstance(status["counters"], dict) and "items stored" in text.split("counters ")[1].splitlines()[0]
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0
    gone = json.loads(batchd("status", SEED, "--json", backend=mysql_backend).stdout)
    assert gone["hosts"] == []             # a supervisor that stopped takes its snapshot with it


def test_the_workers_line_names_each_hosts_supervisors_and_escapes_their_names():
    def entry(host, role, instance, alive=0, wanted=0, master=0):
        return {"host": host, "role": role, "instance": instance, "workers_alive": alive, "workers_wanted": wanted,
                "master_alive": master, "workers": []}
    hosts = [entry("vm", "master", "master", master=1), entry("vm", "worker", "1", alive=2, wanted=2),
             entry("web\x1b[2J2", "worker", "news\n", alive=1, wanted=3), entry("web3", "run", "run", 1, 1, 0)]
    assert workers_text(hosts) == ("host vm — the master (batchd-master), 2 workers (batchd-worker@1); "
                                   "host web\\x1b[2J2 — 1 of 3 workers (batchd-worker@news\\n); "
                                   "host web3 — 1 worker and no master (batchd-run)")
    assert workers_text([]) == "none reporting"


def test_status_with_the_database_unreachable_shows_what_redis_knows_and_exits_69(mysql_backend, site, procs):
    mysql_backend.create_tasks([site.url(f"/page/{n}") for n in range(1, 6)])
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "1")
    wait_for(lambda: snapshot_shows(mysql_backend, batch_is_done=1), message="the snapshot: batch finished")
    result = batchd("status", SEED, backend=mysql_backend, env={"BATCHD_MYSQL_URL": "mysql://root@127.0.0.1:1/x"})
    assert result.returncode == 69
    assert "MISSING  MySQL root@127.0.0.1:1/x unreachable" in result.stdout, result.stdout
    assert "batch    1, finished" in result.stdout and "progress 5/5 (the master's figures" in result.stdout
    assert "queue    0 waiting, 0 leased" in result.stdout
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0


def test_status_history_lists_the_batches_from_their_records(mysql_backend, site, procs):
    mysql_backend.create_tasks([site.url(f"/page/{n}") for n in range(1, 4)])
    none_yet = batchd("status", SEED, "--history", backend=mysql_backend)
    assert (none_yet.returncode, none_yet.stdout.strip()) == (0, "no batch yet (the master opens the first one)")
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "1")
    wait_for(lambda: batch_done(mysql_backend), message="batch 1 closed")
    assert batchd("open-batch", SEED, backend=mysql_backend).returncode == 0
    wait_for(lambda: len(mysql_backend.records()) == 2 and batch_done(mysql_backend), message="batch 2 closed")
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0
    newest, oldest = json.loads(batchd("status", SEED, "--history", "--json", backend=mysql_backend).stdout)
    assert [(e["id"], e["done"], e["failed"], e["total"], e["items"]) for e in (newest, oldest)] == [
        (2, 3, 0, 3, 3), (1, 3, 0, 3, 3)]
    text = batchd("status", SEED, "--history", "1", backend=mysql_backend)
    header, line = text.stdout.splitlines()
    assert text.returncode == 0 and header.split() == ["batch", "mode", "opened", "closed", "duration", "opened",
                                                       "with", "done", "failed", "total", "items", "new",
                                                       "changed", "unchanged", "gone", "rate", "spider"]
    assert line.split()[:2] == ["2", "full"] and line.split()[7:12] == ["3", "3", "0", "3", "3"]   # (a date is two words)
    refused = batchd("status", SEED, "--history", "0", backend=mysql_backend)
    assert refused.returncode == 2 and "--history: 0: must be 1 or more" in refused.stderr
    down = batchd("status", SEED, "--history", backend=mysql_backend,
                  env={"BATCHD_MYSQL_URL": "mysql://root@127.0.0.1:1/x"})
    assert down.returncode == 69 and "unreachable" in one_error_line(down)


def snapshot_shows(backend, **fields) -> bool:
    """The supervisor's snapshot in Redis has these values (compared as the strings it holds)."""
    snapshot = status_snapshot(backend)
    return all(snapshot.get(name) == str(value) for name, value in fields.items())


def test_check_reports_each_item_and_fails_on_any(mysql_backend, tmp_path):
    no_table = batchd("check", SEED, backend=mysql_backend)
    assert no_table.returncode == 78
    assert "FAIL  task table  task table `crawl_task` not found" in no_table.stdout
    assert "SKIP  index" in no_table.stdout and "OK    queue       Redis redis://" in no_table.stdout
    assert "OK    store       MySQL root@127.0.0.1:3306/" in no_table.stdout

    mysql_backend.create_tasks(["http://x.invalid/1"], index=False)
    no_index = batchd("check", SEED, backend=mysql_backend)
    assert no_index.returncode == 1
    assert "ALTER TABLE `crawl_task` ADD INDEX `idx_batch_status` (`batch_status`)" in no_index.stdout

    mysql_backend.sql("ALTER TABLE `crawl_task` ADD INDEX `idx_batch_status` (`batch_status`)")
    good = batchd("check", SEED, backend=mysql_backend)
    assert good.returncode == 0 and good.stdout.count("OK    ") == 10, good.stdout
    assert "OK    item batch  the default item table keeps each item's batch" in good.stdout
    assert "OK    calendar    batches open every 7 day(s) (BATCH_INTERVAL)" in good.stdout
    bad_schedule = batchd("check", SEED, backend=mysql_backend, env={"BATCHD_BATCH_SCHEDULE": "0 25 * * *"})
    assert bad_schedule.returncode == 78 and [line for line in bad_schedule.stdout.splitlines() if "FAIL" in line] == [
        "FAIL  config      setting BATCH_SCHEDULE in the environment: '0 25 * * *' is not a cron expression of 5 "
        "fields (minute hour day month weekday), or @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly "
        "([0 25 * * *] is not acceptable, out of range)"], bad_schedule.stdout
    assert f"OK    namespace   {mysql_backend.namespace} serves MySQL " in good.stdout
    assert "OK    downloader  middlewares RetryMiddleware > StatsMiddleware" in good.stdout
    assert re.search(r"^OK    browser     Chromium \d+[.\d]* \(/usr/bin/chromium\), ChromeDriver \d+[.\d]* "
                     r"\(/usr/bin/chromedriver\), Selenium 4\.", good.stdout, re.M), good.stdout

    no_browser = {"BATCHD_RENDER_BROWSER": "no-such-chromium"}
    not_needed = batchd("check", SEED, backend=mysql_backend, env=no_browser)
    assert not_needed.returncode == 0 and ("OK    browser     none needed by CrawlTask's code (render: RENDER_BROWSER: "
                                           "no 'no-such-chromium' on this machine: apt install chromium") in not_needed.stdout
    needed = batchd("check", "spiders/rendering.py:RenderTask", backend=mysql_backend, env=no_browser)
    assert needed.returncode == 1 and ("FAIL  browser     render: RENDER_BROWSER: no 'no-such-chromium' on this machine: "
                                       "apt install chromium, or point RENDER_BROWSER at one") in needed.stdout
    old_driver = batchd("check", "spiders/rendering.py:RenderTask", backend=mysql_backend,
                        env={"BATCHD_RENDER_DRIVER": fake_driver(tmp_path, "ChromeDriver 99.0.4844.51")})
    assert old_driver.returncode == 1 and "does not drive Chromium" in old_driver.stdout, old_driver.stdout

    bad_chain = batchd("check", SEED, backend=mysql_backend,
                       env={"BATCHD_DOWNLOADER_MIDDLEWARES": '["batchd.download.middlewares.retry.RetryMiddleware", "nowhere.Retry"]'})
    assert bad_chain.returncode == 78
    assert "FAIL  downloader  DOWNLOADER_MIDDLEWARES: cannot import 'nowhere.Retry'" in bad_chain.stdout

    no_redis = batchd("check", SEED, backend=mysql_backend, env={"BATCHD_REDIS_URL": "redis://127.0.0.1:1/0"})
    assert no_redis.returncode == 69 and "FAIL  queue" in no_redis.stdout


def fake_driver(folder, says: str) -> str:
    """A program that says it is a chromedriver of another version."""
    path = folder / "chromedriver"
    path.write_text(f"#!/bin/sh\necho '{says}'\n")
    path.chmod(0o755)
    return str(path)


def test_check_works_on_an_sqlite_store_and_names_it(tmp_path):
    store = f"sqlite:///{tmp_path}/crawl.db"
    assert batchd("tasks", "add", "http://x.invalid/1", "--spider", SEED, "--store", store).returncode == 0
    result = batchd("check", SEED, "--store", store)
    assert "Traceback" not in result.stdout + result.stderr
    assert f"OK    store       SQLite {tmp_path}/crawl.db" in result.stdout, result.stdout
    assert f"OK    queue       SQLite queue {tmp_path}/crawl.db" in result.stdout
    assert result.returncode == 0, result.stdout


def test_a_namespace_serves_one_store(mysql_backend, mysql_url, procs):
    """Two task tables of the same name in two databases, one Redis namespace: the second store's master
    and workers refuse to start (78), naming both stores; `batchd check` says so."""
    from taskdb import MysqlBackend
    mysql_backend.create_tasks(["http://x.invalid/1"])
    assert batchd("check", SEED, backend=mysql_backend).returncode == 0
    first = start_batchd(procs, mysql_backend, "master")
    wait_for(lambda: lines_with(first, "master of namespace"), message="the first master")
    import uuid
    other_db = f"batchd_t_{uuid.uuid4().hex[:12]}"
    mysql_backend.sql(f"CREATE DATABASE `{other_db}`")
    try:
        other = MysqlBackend(mysql_url.rsplit("/", 1)[0] + "/" + other_db, mysql_backend.redis_url,
                             mysql_backend.failed_items_path)
        other.namespace = mysql_backend.namespace
        other.create_tasks(["http://y.invalid/1"])
        for verb in ("master", "worker"):
            crossed = start_batchd(procs, other, verb, "--workers" if verb == "worker" else "--once", *(["1"] if verb == "worker" else []))
            assert crossed.wait(60) == 78, crossed.output()
            refused = lines_with(crossed, "serves MySQL")
            assert refused and f"/{mysql_backend.mysql_url.rsplit('/', 1)[1]} table crawl_task" in refused[0]
            assert f"/{other_db} table crawl_task" in refused[0]
        check = batchd("check", SEED, backend=other)
        assert check.returncode == 78 and "FAIL  namespace" in check.stdout
        assert other.states() == {1: 0}, "the other store's task was never touched"
        other.close()
    finally:
        mysql_backend.sql(f"DROP DATABASE `{other_db}`")
    first.send(signal.SIGTERM)
    assert first.wait(30) == 0


def failed_item(task_id: int, table: str = "crawl_task_item") -> dict:
    row = ItemRow(batch_id=1, task_id=task_id, request_seq=0, item_seq=0, data={"title": f"Title {task_id}"})
    return FailedItemsFile.record(table, "default", row, "OperationalError: gone away")


def test_retry_items_stores_what_it_can_and_says_so(mysql_backend):
    mysql_backend.create_tasks(["http://x.invalid/1", "http://x.invalid/2", "http://x.invalid/3"])
    spider = CrawlTask(batch_store=mysql_backend.store(), settings=mysql_backend.settings())
    spider.runtime.store.open(spider.runtime.layout)                       # creates the item table
    dumped = FailedItemsFile(mysql_backend.failed_items_path)
    dumped.append([failed_item(1), failed_item(2)])

    down = batchd("retry", "--items", backend=mysql_backend, env={"BATCHD_MYSQL_URL": "mysql://root@127.0.0.1:1/x"})
    assert down.returncode == 69 and "unreachable" in one_error_line(down)
    assert len(open(dumped.path).readlines()) == 2         # untouched

    assert batchd("retry", "--items", backend=mysql_backend).returncode == 0     # FAILED_ITEMS_PATH
    assert sorted(item["title"] for item in mysql_backend.items()) == ["Title 1", "Title 2"]
    assert not os.path.exists(dumped.path)

    dumped.append([failed_item(3), failed_item(4, table="no_such_table")])
    partly = batchd("retry", "--items", dumped.path, backend=mysql_backend)
    assert partly.returncode == 1 and "1 item stored, 1 kept" in partly.stderr
    assert len(open(dumped.path).readlines()) == 1


def test_daemon_is_refused_under_systemd(mysql_backend, tmp_path):
    result = batchd("run", SEED, "--daemon", "--pidfile", str(tmp_path / "pid"), backend=mysql_backend,
                    env={"INVOCATION_ID": "0123456789abcdef"})
    assert result.returncode == 78
    assert "--daemon is for hosts without systemd" in one_error_line(result)


def test_daemon_without_python_daemon_names_the_package_to_install(mysql_backend, tmp_path):
    """python3-daemon is only a Recommends of the package: --daemon without it is one line, exit 78."""
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "daemon.py").write_text("raise ImportError('hidden by the test')\n")
    result = batchd("run", SEED, "--daemon", "--pidfile", str(tmp_path / "pid"), backend=mysql_backend,
                    env={"PYTHONPATH": f"{hidden}:{ROOT}"})
    assert result.returncode == 78
    assert "--daemon needs python-daemon" in one_error_line(result) and "apt install python3-daemon" in result.stderr
    assert not (tmp_path / "pid").exists()


def test_daemon_detaches_and_holds_its_pid_file(mysql_backend, site, tmp_path):
    mysql_backend.create_tasks([site.url("/page/1")])
    pidfile, log_file = tmp_path / "batchd.pid", tmp_path / "batchd.log"
    args = ("run", SEED, "--workers", "1", "--daemon", "--pidfile", str(pidfile), "--log-file", str(log_file))
    env = {f"BATCHD_{k}": str(v) for k, v in DAEMON_SETTINGS.items()}
    assert batchd(*args, backend=mysql_backend, env=env).returncode == 0      # the foreground part returns
    pid = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), message="the pid file"))
    try:
        wait_for(lambda: "ready: " in log_file.read_text(), message="the daemon ready")
        assert title(pid) == f"batchd: supervisor {mysql_backend.namespace}"
        second = batchd(*args, backend=mysql_backend, env=env)
        assert second.returncode == 78
        assert f"is held by a running batchd (pid {pid})" in one_error_line(second)
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not alive(pid), message="the daemon gone")
        assert not pidfile.exists()
        assert "exit 0: " in log_file.read_text()
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_worker_instance_reads_its_own_config_file(mysql_backend, site, procs, tmp_path):
    mysql_backend.create_tasks([site.url("/page/1")])
    (tmp_path / "batchd.toml").write_text(f'SPIDER = "{os.path.join(HERE, SEED)}"\nWORKERS = 1\n')
    (tmp_path / "worker-7.toml").write_text("WORKERS = 2\n")
    proc = start_batchd(procs, mysql_backend, "worker", "--instance", "7", "--config", str(tmp_path / "batchd.toml"),
                        spider=None)
    wait_for(lambda: len(workers_of(proc.pid)) == 2, message="the two workers worker-7.toml asks for")
    ns = mysql_backend.namespace
    assert sorted(title(pid) for pid in workers_of(proc.pid)) == [f"batchd: worker 1 {ns}@7", f"batchd: worker 2 {ns}@7"]
    wait_for(lambda: lines_with(proc, "ready: worker "), message="ready")
    import redis
    snapshot = redis.Redis.from_url(mysql_backend.redis_url).hgetall(f"{ns}:status:{socket.gethostname()}:worker@7")
    assert snapshot[b"instance"] == b"7" and snapshot[b"workers_alive"] == b"2"
    assert lines_with(proc, "worker 1@7 started")
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0


def test_a_master_instance_reads_its_own_config_file_beside_a_worker_of_its_name(mysql_backend, site, procs,
                                                                                  tmp_path):
    """batchd-master@news and batchd-worker@news: batchd.toml names no usable spider, master-news.toml
    and worker-news.toml do; the pair runs the batch, each with its own snapshot, and a reload of the
    master checks master-news.toml."""
    mysql_backend.create_tasks([site.url(f"/page/{n}") for n in range(1, 4)])
    config = tmp_path / "batchd.toml"
    config.write_text(f'SPIDER = "{tmp_path}/absent.py:Nothing"\nWORKERS = 1\n')
    spider_line = f'SPIDER = "{os.path.join(HERE, SEED)}"\n'
    for name in ("master-news.toml", "worker-news.toml"):
        (tmp_path / name).write_text(spider_line)
    master = start_batchd(procs, mysql_backend, "master", "--instance", "news", "--config", str(config), spider=None)
    worker = start_batchd(procs, mysql_backend, "worker", "--instance", "news", "--config", str(config), spider=None)
    wait_for(lambda: set(mysql_backend.states().values()) == {TaskState.DONE}, message="the batch done")
    ns = mysql_backend.namespace
    assert [title(pid) for pid in masters_of(master.pid)] == [f"batchd: master {ns}@news"]

    import redis
    client = redis.Redis.from_url(mysql_backend.redis_url)
    keys = {f"{ns}:status:{socket.gethostname()}:{seat}" for seat in ("master@news", "worker@news")}
    wait_for(lambda: keys <= {key.decode() for key in client.scan_iter(f"{ns}:status:*")},
             message="a snapshot each for master@news and worker@news")
    assert {client.hget(key, "role") for key in keys} == {b"master", b"worker"}
    client.close()

    (tmp_path / "master-news.toml").write_text(spider_line + "WORKES = 2\n")
    refused = reload_supervisor(master.pid, mysql_backend, "--role", "master", "--instance", "news",
                                "--config", str(config))
    assert refused.returncode == 78
    assert f"unknown setting 'WORKES' in {tmp_path}/master-news.toml" in one_error_line(refused)
    for proc in (master, worker):
        proc.send(signal.SIGTERM)
        assert proc.wait(60) == 0


# -- reload: the config is checked before the supervisor hears of it
def reload_supervisor(pid, backend, *args) -> subprocess.CompletedProcess:
    """`batchd reload ARGS --pid PID` in the environment start_batchd gives a supervisor."""
    return batchd("reload", *args, "--pid", str(pid), backend=backend, env=backend.env(**DAEMON_SETTINGS))


def test_reload_refuses_a_bad_config_and_leaves_the_children_alone(mysql_backend, site, procs, tmp_path):
    mysql_backend.create_tasks([site.url("/page/1")])
    spider, config = tmp_path / "spider.py", tmp_path / "batchd.toml"
    spider.write_text(open(os.path.join(HERE, SEED.split(":")[0])).read())
    good = f'SPIDER = "{spider}:CrawlTask"\nWORKERS = 1\n'
    config.write_text(good)
    proc = start_batchd(procs, mysql_backend, "run", "--config", str(config), spider=None)
    wait_for(lambda: lines_with(proc, "ready: "), message="the supervisor ready")
    children = children_of(proc.pid)
    assert len(children) == 2

    (tmp_path / "broken.py").write_text("import batchd\nraise RuntimeError('half-edited')\n")
    bad_configs = [
        (good + 'LOG_LEVEL = "INFO\n', f"config file {config}: invalid TOML"),
        (good + "WORKES = 2\n", f"unknown setting 'WORKES' in {config}"),
        (good.replace(str(spider), str(tmp_path / "broken.py")),
         f"spider '{tmp_path}/broken.py:CrawlTask': cannot import {tmp_path}/broken.py: RuntimeError: half-edited"),
    ]
    for text, culprit in bad_configs:
        config.write_text(text)
        refused = reload_supervisor(proc.pid, mysql_backend, "--config", str(config))
        assert refused.returncode == 78, refused.stderr
        line = one_error_line(refused)
        assert f"reload refused, supervisor {proc.pid} keeps its children: {culprit}" in line, line
        assert children_of(proc.pid) == children
    # The spider's own file, half-edited: what the supervisor would load on SIGHUP does not import.
    config.write_text(good)
    spider.write_text(spider.read_text() + "\n    def broken(self:\n")
    refused = reload_supervisor(proc.pid, mysql_backend, "--config", str(config))
    assert refused.returncode == 78
    assert f"spider '{spider}:CrawlTask': cannot import {spider}: SyntaxError" in one_error_line(refused)
    assert children_of(proc.pid) == children

    spider.write_text(open(os.path.join(HERE, SEED.split(":")[0])).read())
    config.write_text(good.replace("WORKERS = 1", "WORKERS = 2"))
    reloaded = reload_supervisor(proc.pid, mysql_backend, "--config", str(config))
    assert reloaded.returncode == 0, reloaded.stderr
    assert f"SIGHUP sent to the supervisor (pid {proc.pid})" in reloaded.stderr
    wait_for(lambda: lines_with(proc, "reloaded: "), timeout=60, message="the supervisor reloaded")
    wait_for(lambda: len(workers_of(proc.pid)) == 2 and not set(children_of(proc.pid)) & set(children),
             timeout=60, message="the children replaced, with the new WORKERS")
    # Signals are handled in order: a SIGHUP sent by a refused reload would have been logged by now.
    assert len(lines_with(proc, "SIGHUP: reloading")) == 1, proc.output()
    proc.send(signal.SIGTERM)
    assert proc.wait(60) == 0


def pending_signals(pid: int) -> int:
    """The signals sent to PID that it has not taken yet (it blocks them), as a bit mask."""
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    return int(fields["ShdPnd"], 16) | int(fields["SigPnd"], 16)


def test_reload_signals_nothing_but_a_batchd_supervisor(procs):
    """69 and no signal: a process that is no batchd at all (it blocks SIGHUP, so a signal sent would
    still be pending), and a pid that is gone. The pid is checked before the config is."""
    from procs import Proc
    holder = procs.add(Proc([sys.executable, "-c", "import signal, time\n"
                             "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})\n"
                             "print('blocking SIGHUP', flush=True)\ntime.sleep(300)\n"]))
    holder.wait_output("blocking SIGHUP")
    refused = batchd("reload", SEED, "--pid", str(holder.pid))
    assert refused.returncode == 69
    assert f"pid {holder.pid} is not a batchd supervisor ({sys.executable} -c import signal" in one_error_line(refused)
    assert pending_signals(holder.pid) & (1 << (signal.SIGHUP - 1)) == 0 and holder.alive()

    gone = subprocess.Popen(["true"])
    gone.wait()
    refused = batchd("reload", SEED, "--pid", str(gone.pid))
    assert refused.returncode == 69
    assert f"pid {gone.pid}: No such process; nothing signalled" in one_error_line(refused)


def test_reload_knows_a_supervisor_without_process_titles(mysql_backend, site, procs, tmp_path):
    """Without setproctitle every process shows its command line, and a forked child its supervisor's:
    the supervisor is told apart from its children by its parent."""
    mysql_backend.create_tasks([site.url("/page/1")])
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "setproctitle.py").write_text("raise ImportError('hidden by the test')\n")
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "1", env={"PYTHONPATH": f"{hidden}:{HERE}:{ROOT}"})
    wait_for(lambda: lines_with(proc, "ready: "), message="the supervisor ready")
    assert not title(proc.pid).startswith("batchd: ")
    children = children_of(proc.pid)
    assert title(children[0]) == title(proc.pid)

    refused = reload_supervisor(children[0], mysql_backend, SEED)
    assert refused.returncode == 69
    assert f"pid {children[0]} is not a batchd supervisor ({sys.executable} -m batchd run" in one_error_line(refused)
    assert reload_supervisor(proc.pid, mysql_backend, SEED).returncode == 0
    wait_for(lambda: lines_with(proc, "reloaded: "), timeout=60, message="the supervisor reloaded")
    proc.send(signal.SIGTERM)
    assert proc.wait(60) == 0
