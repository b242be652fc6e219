"""A newcomer's first hour (issue 34), end to end on the embedded store, each step as a new user types it in the
project's folder: `init`, `tasks add` with bad input and then good, `check`, `run --once`, an edit to the spider,
`run --once` again (nothing is due, and it says what opens a batch now), `open-batch`, `run --once`, `status`,
`status --history`, `failed`. Every command answers in lines a person reads, and no traceback appears anywhere."""
import os
import re
import subprocess
import sys

from procs import ROOT

ENV = dict({k: v for k, v in os.environ.items()
            if not k.startswith(("BATCHD_", "TEST_")) and k not in ("INVOCATION_ID", "NOTIFY_SOCKET")},
           PYTHONPATH=ROOT, BATCHD_BATCH_MONITOR_INTERVAL="0.3", BATCHD_STATUS_INTERVAL="0.5")


def batchd(*args, cwd) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "batchd", *args], cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=120)
    assert "Traceback" not in done.stdout + done.stderr, f"batchd {' '.join(args)}:\n{done.stderr}"
    return done


def said(done: subprocess.CompletedProcess) -> list:
    """Its log lines, without their time, level and process: what the user reads."""
    return [re.sub(r"^\S+ \S+ (INFO|WARNING|ERROR) [^[]+\[\d+\] ", "", line) for line in done.stderr.splitlines()]


def test_a_newcomers_first_hour(tmp_path, site):
    folder = tmp_path / "crawl"
    init = batchd("init", str(folder), cwd=tmp_path)
    assert init.returncode == 0 and f"cd {folder}" in init.stdout

    page1, page2, missing = site.url("/page/1"), site.url("/page/2"), site.url("/status/404")
    bad = batchd("tasks", "add", "htp:/x", page1, cwd=folder)
    assert bad.returncode == 65, bad.stderr
    assert any(line.startswith("URL 1 of the command line: ") and "htp:/x" in line for line in said(bad))
    assert not os.path.exists(folder / "batchd.db") or "nothing added" in bad.stderr
    added = batchd("tasks", "add", page1, page2, missing, page1, cwd=folder)
    assert added.returncode == 0, added.stderr
    assert "3 tasks added to crawl_task" in added.stderr and "1 duplicate skipped" in added.stderr

    check = batchd("check", cwd=folder)
    assert check.returncode == 0 and "FAIL" not in check.stdout, check.stdout

    first = batchd("run", "--once", "--workers", "1", cwd=folder)
    assert first.returncode == 1, first.stderr          # a task failed (the 404): not 0
    assert said(first)[0].startswith(f"config {folder}/batchd.toml (./batchd.toml)")
    assert any(line.startswith("task 3 failed: GET ") and line.endswith("HTTP 404") for line in said(first))
    where = f"table crawl_task_item of SQLite {folder}/batchd.db"
    assert f"2 tasks done, 1 failed, 2 items stored by this host's workers (in {where})" in said(first)[-1]

    spider = folder / "spider.py"
    spider.write_text(spider.read_text().replace('"title": response.css("title::text").get()}',
                                                 '"title": response.css("title::text").get(), "size": len(response.text)}'))
    again = batchd("run", "--once", "--workers", "1", cwd=folder)
    assert again.returncode == 0, again.stderr
    assert any("no batch due" in line and "batchd open-batch opens one now" in line for line in said(again))
    opened = batchd("open-batch", cwd=folder)          # no master runs: the command opens it itself
    assert opened.returncode == 0 and "no master is running" in opened.stdout, opened.stdout
    assert any(line.startswith("batch 2 trusts no validator: the spider's code changed since batch 1")
               for line in said(opened)), opened.stderr
    second = batchd("run", "--once", "--workers", "1", cwd=folder)
    assert second.returncode == 1, second.stderr

    status = batchd("status", cwd=folder)
    lines = status.stdout.splitlines()
    assert status.returncode == 0 and "progress 3/3: 2 done, 1 failed" in status.stdout
    assert f"items    in {where}" in lines and "unflushed items 0" in lines
    rate, = [line for line in lines if line.startswith("rate ")]
    assert rate.endswith("finished, no ETA") and "unknown" not in rate
    history = batchd("status", "--history", cwd=folder).stdout.splitlines()
    assert "spider" in history[0] and "changed" in history[1], history       # the newest batch first

    failed = batchd("failed", cwd=folder)
    head, _, titles, row = failed.stdout.splitlines()
    assert failed.returncode == 0 and head == "batch 2 (closed): 1 failed task: 1 HTTP 404", failed.stdout
    assert titles.split() == ["id", "time", "tries", "site", "url", "reason", "worker"]
    assert missing in row and "127.0.0.1" in row
