"""`python -m bench compare` runs every contender at a small size and its figures hold together (the
figures themselves go in the closing note of a change, never in a test)."""
import json
import os
import shutil
import subprocess
import sys

import pytest
from procs import ROOT as REPOSITORY

TASKS = 200


def compare(*arguments: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHD_")}
    return subprocess.run([sys.executable, "-m", "bench", "compare", *arguments], cwd=REPOSITORY, env=env,
                          capture_output=True, text=True, timeout=timeout)


def a_marked_tree(root) -> str:
    """A copy of this repository's batchd whose import leaves a file `imported` beside it."""
    tree = os.path.join(str(root), "tree")
    shutil.copytree(os.path.join(REPOSITORY, "batchd"), os.path.join(tree, "batchd"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(os.path.join(tree, "batchd", "__init__.py"), "a") as f:
        f.write("\nopen(__import__('os').path.join(__path__[0], '..', 'imported'), 'w').close()\n")
    return tree


@pytest.mark.once
def test_the_comparison_runs_every_contender_on_the_same_tasks(tmp_path):
    tree = a_marked_tree(tmp_path)
    done = compare("--tasks", str(TASKS), "--rounds", "1", "--configs", "1x2", "--small", "0",
                   "--contenders", "baseline,mysql,sqlite,tree", "--tree", tree, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)

    rows = {row["contender"]: row for row in report["rows"]}
    assert sorted(rows) == ["baseline", "mysql", "sqlite", "tree"]
    # The contender `tree` ran the tree's batchd; the environment names it.
    assert os.path.exists(os.path.join(tree, "imported")) and report["environment"]["tree"].endswith(tree)
    assert rows["tree"]["redis_round_trips_per_task"] > 0
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


def test_the_contender_tree_and_its_path_go_together_and_name_a_batchd(tmp_path):
    assert "--tree PATH and the contender `tree` go together" in compare("--contenders", "baseline,tree").stderr
    assert "--tree PATH and the contender `tree` go together" in compare("--tree", str(tmp_path)).stderr
    refused = compare("--contenders", "baseline,tree", "--tree", str(tmp_path))
    assert refused.returncode != 0 and f"--tree {tmp_path}: no batchd package there" in refused.stderr


def test_the_contender_mysql_noquality_runs_batchd_with_the_quality_checks_off():
    from bench.batch import Place
    from bench.compare import BatchdMysqlNoQuality, Config
    place = Place.__new__(Place)
    place.name, place.settings = "bench_x", {"MYSQL_URL": "mysql://root@127.0.0.1/bench_x"}
    contender = BatchdMysqlNoQuality(None, "/tmp", 1.0, {"QUALITY_CHECKS": "true", "HOST_STATS_TOP": "7"})
    env = contender.environment(place, Config(1, 2, 10))
    assert env["BATCHD_QUALITY_CHECKS"] == env["BATCHD_QUALITY_BLOCK_HOLD"] == "false"
    assert env["BATCHD_HOST_STATS_TOP"] == "7" and contender.uses_redis


@pytest.mark.once
def test_the_comparison_runs_mysql_beside_mysql_noquality():
    done = compare("--tasks", str(TASKS), "--rounds", "1", "--configs", "1x2", "--small", "0",
                   "--contenders", "mysql,mysql-noquality", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {row["contender"]: row for row in json.loads(done.stdout)["rows"]}
    assert sorted(rows) == ["mysql", "mysql-noquality"]
    for name, row in rows.items():
        assert row["every_task_done_and_stored"] and row["cpu_worker_ms_per_task"] > 0, name
    assert rows["mysql-noquality"]["title"].endswith("quality checks off")
