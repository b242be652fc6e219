"""A newcomer's first run, with no MySQL and no Redis: README's quick start as written, the demo,
init / tasks / run / status on the embedded store, and the embedded default's rules."""
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys

import pytest

from harness import wait_for
from procs import ROOT, Proc

CLEAN_ENV = {k: v for k, v in os.environ.items()
             if not k.startswith(("BATCHD_", "TEST_")) and k not in ("INVOCATION_ID", "NOTIFY_SOCKET")}


def readme_block(heading: str) -> list:
    """The command lines of the first ```sh block after `heading` in README.md."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index(heading):]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def copy_of_the_repository(target) -> str:
    """What a clone holds: the tracked files (and new ones not yet committed), nothing built."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    for name in names:
        source, dest = os.path.join(ROOT, name), os.path.join(target, name)
        if os.path.isfile(source):
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(source, "rb") as src, open(dest, "wb") as out:
                out.write(src.read())
    return str(target)


def batchd_command(*args) -> list:
    return [sys.executable, "-m", "batchd", *args]


@pytest.mark.once
def test_the_readme_quick_start_runs_the_demo_in_a_fresh_virtualenv(tmp_path):
    install_and_demo, tests = readme_block("## Quick start")
    assert tests == "bash .ci/run"         # the other command is what CI itself runs
    clone = copy_of_the_repository(tmp_path / "batchd")
    done = subprocess.run(["bash", "-c", install_and_demo], cwd=clone, env=CLEAN_ENV,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    db = sqlite3.connect(os.path.join(clone, "batchd-demo", "demo.db"))
    states = dict(db.execute('SELECT "batch_status", COUNT(*) FROM "demo_book" GROUP BY "batch_status"'))
    items = db.execute('SELECT COUNT(*) FROM "demo_book_item"').fetchone()[0]
    total, done_count, failed = sum(states.values()), states.get(1, 0), states.get(-1, 0)
    assert f"tasks: {total}, done {done_count}, failed {failed}" in done.stdout
    assert f"items stored: {items}, in table demo_book_item" in done.stdout
    assert (total, done_count, failed, items) == (50, 49, 1, 49)
    assert "/books/50: HTTP 404" in done.stdout        # the failure was shown as it happened
    assert "batchd run exited 1 after" in done.stdout and "some tasks failed" in done.stdout     # the 404


def test_a_project_of_ones_own_runs_as_the_readme_says(tmp_path, site):
    env = dict(CLEAN_ENV, PYTHONPATH=ROOT)
    for line in readme_block("### A project of your own"):
        words = line.split()
        if words[0] == "export":
            name, value = words[1].split("=", 1)
            env[name] = value.replace("$PWD", str(tmp_path))
            continue
        assert words[0] == ".venv/bin/batchd", line
        args = [site.url("/page/1") if w.startswith("https://") and "example" in w else
                site.url("/page/2") if w.startswith("https://") else w for w in words[1:]]
        done = subprocess.run(batchd_command(*args), cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, f"{line}:\n{done.stdout}{done.stderr}"
    assert "[##############################] 2/2" in done.stdout       # batchd status, the last line
    assert "progress 2/2: 2 done, 0 failed" in done.stdout
    db = sqlite3.connect(tmp_path / "myproject" / "batchd.db")
    assert sorted(t for (t,) in db.execute("SELECT json_extract(item, '$.title') FROM crawl_task_item")) == \
        ["Page 1", "Page 2"]


def test_an_interactive_run_with_no_store_uses_batchd_db_and_says_so_first(tmp_path, site):
    spider = os.path.join(ROOT, "tests", "spiders", "seed.py") + ":CrawlTask"
    env = dict(CLEAN_ENV, BATCHD_CONFIG=os.devnull)
    added = subprocess.run(batchd_command("tasks", "add", site.url("/page/1"), "--spider", spider),
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stderr
    run = subprocess.run(batchd_command("run", spider, "--once", "--workers", "1"), cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    first = run.stderr.splitlines()[0]
    assert "no MySQL / Redis configured: using the embedded store" in first and f"{tmp_path}/batchd.db" in first
    db = sqlite3.connect(tmp_path / "batchd.db")
    assert db.execute("SELECT batch_status FROM crawl_task").fetchall() == [(1,)]


def test_under_systemd_a_missing_store_is_a_configuration_error(tmp_path):
    spider = os.path.join(ROOT, "tests", "spiders", "seed.py") + ":CrawlTask"
    env = dict(CLEAN_ENV, BATCHD_CONFIG=os.devnull, INVOCATION_ID="0123456789abcdef")
    run = subprocess.run(batchd_command("run", spider, "--once"), cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 78
    assert "no store configured" in run.stderr and "Traceback" not in run.stderr
    assert not os.path.exists(tmp_path / "batchd.db")


def test_tasks_import_reads_a_csv_whose_header_names_the_columns(tmp_path):
    store = f"sqlite:///{tmp_path}/t.db"
    spider = os.path.join(ROOT, "tests", "spiders", "seed.py") + ":CrawlTask"
    env = dict(CLEAN_ENV, BATCHD_CONFIG=os.devnull)
    good = tmp_path / "tasks.csv"
    good.write_text("url\n" + "".join(f"http://x.invalid/{i}\n" for i in range(2500)))
    done = subprocess.run(batchd_command("tasks", "import", str(good), "--spider", spider, "--store", store),
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "2500 tasks added to crawl_task" in done.stderr
    assert sqlite3.connect(tmp_path / "t.db").execute("SELECT COUNT(*) FROM crawl_task").fetchone() == (2500,)
    bad = tmp_path / "bad.csv"
    bad.write_text("url,colour\nhttp://x.invalid/a,red\n")
    refused = subprocess.run(batchd_command("tasks", "import", str(bad), "--spider", spider, "--store", store),
                             env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 78
    assert 'task table "crawl_task" has no column "colour"' in refused.stderr
    assert sqlite3.connect(tmp_path / "t.db").execute("SELECT COUNT(*) FROM crawl_task").fetchone() == (2500,)


def test_init_refuses_to_overwrite(tmp_path):
    first = subprocess.run(batchd_command("init", str(tmp_path)), env=CLEAN_ENV, capture_output=True, text=True)
    assert first.returncode == 0 and "export BATCHD_CONFIG=" in first.stdout
    again = subprocess.run(batchd_command("init", str(tmp_path)), env=CLEAN_ENV, capture_output=True, text=True)
    assert again.returncode == 78 and "does not overwrite" in again.stderr


def published(spider, env) -> bool:
    """`batchd status --json` shows a host with both its workers, and the batch's figures. (Not its rate: a
    batch of 40 that closes before the supervisor's second look at its tally has none, and needs none.)"""
    shown = subprocess.run(batchd_command("status", spider, "--json"), env=env, capture_output=True, text=True,
                           timeout=60)
    status = json.loads(shown.stdout)
    return status["tasks"] is not None and [len(host["workers"]) for host in status["hosts"]] == [2]


def test_status_draws_a_bar_and_a_line_per_worker_and_watch_refreshes(tmp_path, site, procs):
    store = f"sqlite:///{tmp_path}/t.db"
    spider = os.path.join(ROOT, "tests", "spiders", "seed.py") + ":CrawlTask"
    env = dict(CLEAN_ENV, BATCHD_CONFIG=os.devnull, BATCHD_STORE=store, BATCHD_STATUS_INTERVAL="0.5",
               BATCHD_BATCH_MONITOR_INTERVAL="0.3")
    subprocess.run(batchd_command("tasks", "add", *[site.url(f"/slow?seconds=0.3&n={i}") for i in range(40)],
                                  "--spider", spider), env=env, check=True, capture_output=True, timeout=60)
    running = procs.add(Proc(batchd_command("run", spider, "--workers", "2"), env=env))
    running.wait_output("ready:")
    wait_for(lambda: published(spider, env), interval=0.5,
             message="the supervisor's snapshot: both workers and the batch's figures")
    watch = procs.add(Proc(batchd_command("status", spider, "--watch", "0.5"), env=env))
    wait_for(lambda: watch.output().count("(every 0.5 s; Ctrl-C to stop)") >= 2, message="two frames drawn")
    watch.send(signal.SIGINT)
    assert watch.wait(30) == 130
    out = watch.output()
    assert out.count("namespace crawl_task") >= 2, "refreshed"
    assert re.search(r"\[[#x.]{30}\] \d+/40", out)
    assert re.search(r"worker 1 \(pid \d+\): \d+ done, 0 failed, \d+ items", out)
    assert re.search(r"worker 2 \(pid \d+\): \d+ done", out)
    running.send(signal.SIGTERM)
    assert running.wait(60) == 0
