"""`python -m bench compare` runs every contender at a small size and its figures hold together (the
figures themselves go in the closing note of a change, never in a test)."""
import json
import os
import subprocess
import sys

import pytest

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASKS = 200


@pytest.mark.once
def test_the_comparison_runs_every_contender_on_the_same_tasks():
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHD_")}
    done = subprocess.run([sys.executable, "-m", "bench", "compare", "--tasks", str(TASKS), "--rounds", "1",
                           "--configs", "1x2", "--small", "0", "--json"],
                          cwd=REPOSITORY, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)

    rows = {row["contender"]: row for row in report["rows"]}
    assert sorted(rows) == ["baseline", "mysql", "sqlite"]
    assert report["site_kind"] in ("nginx", "builtin") and report["site"]
    for name, row in rows.items():
        assert row["config"] == "1x2" and row["tasks"] == TASKS and len(row["rounds"]) == 1, name
        assert row["every_task_done_and_stored"], name
        run = row["rounds"][0]
        assert run["done"] == run["items"] == TASKS and run["site_hits"] >= TASKS, name
        assert 0 < row["tasks_per_s"]["min"] <= row["tasks_per_s"]["median"] <= row["tasks_per_s"]["max"], name
        assert row["ratio_to_baseline"] > 0, name
        assert row["cpu_ms_per_task"] > 0 and row["cpu_cores_busy"] > 0, name
        assert row["rss_worker_mb"] > 0 and row["rss_master_mb"] > 0, name
        # A worker's proportional set is at most its resident set, and its private set at most the former.
        assert 0 < row["uss_worker_mb"] <= row["pss_worker_mb"] <= row["rss_worker_mb"], name
        assert 0 < row["cpu_worker_ms_per_task"] <= row["cpu_ms_per_task"], name
        assert row["first_fetch_s"] > 0 and row["last_done_after_last_fetch_s"] is not None, name
        assert row["exit_after_last_done_s"] >= 0, name
    assert rows["baseline"]["ratio_to_baseline"] == 1.0
    # Only batchd has a supervisor and closes a batch; only the MySQL contenders talk to MariaDB, and only
    # batchd's to Redis.
    assert rows["baseline"]["rss_supervisor_mb"] is None and rows["baseline"]["close_delay_s"] is None
    assert rows["baseline"]["batch_opened_s"] is None
    for name in ("mysql", "sqlite"):
        assert rows[name]["rss_supervisor_mb"] > 0 and rows[name]["close_delay_s"] >= 0, name
        assert 0 < rows[name]["batch_opened_s"] < rows[name]["first_fetch_s"], name
    assert rows["mysql"]["redis_round_trips_per_task"] > 0 and rows["mysql"]["mysql_statements_per_task"] > 0
    assert rows["mysql"]["redis_cpu_us_per_task"] > 0 and rows["mysql"]["mariadbd_cpu_us_per_task"] > 0
    assert rows["baseline"]["mariadbd_cpu_us_per_task"] > 0 and rows["sqlite"]["mariadbd_cpu_us_per_task"] is None
    assert rows["baseline"]["mysql_statements_per_task"] > 0 and rows["baseline"]["redis_round_trips_per_task"] is None
    assert rows["sqlite"]["mysql_statements_per_task"] is None and rows["sqlite"]["redis_round_trips_per_task"] is None
