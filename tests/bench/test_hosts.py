"""`python -m bench.hosts` runs its mixes at a small size and its report holds together (the figures
themselves go in the closing note of a change, never in a test)."""
import json
import os
import subprocess
import sys

import pytest
from procs import ROOT as REPOSITORY

SCALE = 0.02        # alone: 40 fast tasks; slow: 6 on the slow host, then the 40


@pytest.mark.once
def test_the_hosts_bench_times_each_group_of_hosts_against_the_fast_ones_alone():
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHD_")}
    done = subprocess.run([sys.executable, "-m", "bench.hosts", "--mix", "slow,alone", "--scale", str(SCALE),
                           "--json"], cwd=REPOSITORY, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)

    mixes = {mix["mix"]: mix for mix in report["mixes"]}
    assert list(mixes) == ["alone", "slow"]            # alone first: the others are compared with it
    assert report["workers"] == 2 and report["threads"] == 8 and report["per_domain"] == 2
    for name, mix in mixes.items():
        assert mix["tasks"] == sum(group["tasks"] for group in mix["groups"]), name
        for group in mix["groups"]:
            assert group["done"] == group["tasks"] and group["failed"] == 0, (name, group)
            assert group["hits"] >= group["tasks"], (name, group)
            assert 0 < group["settled_s"] < mix["wall_s"], (name, group)
        assert 0 < mix["fast_settled_s"] and mix["fast_ratio_to_alone"] > 0, name
        assert mix["redis_round_trips_per_task"] > 0 and mix["mysql_statements_per_task"] > 0, name
        assert mix["cpu_ms_per_task"] > 0 and 0 < mix["batch_opened_s"] < mix["wall_s"], name
    assert mixes["alone"]["fast_ratio_to_alone"] == 1.0
    slow = {group["label"]: group for group in mixes["slow"]["groups"]}
    # The slow host answers in a second, at most 2 requests at once from each of the 2 workers.
    slow = {group["label"]: group for group in mixes["slow"]["groups"]}
    assert slow["slow"]["settled_s"] >= 1.0 * slow["slow"]["tasks"] / 4
