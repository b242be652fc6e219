"""`python -m bench dedup` runs exact against bloom at a small size and its figures hold together (the figures
and targets themselves go in the closing note of a change, never in a test)."""
import json
import os
import subprocess
import sys

import pytest
from procs import ROOT as REPOSITORY

SIZE, TIMED = 3000, 600


@pytest.mark.once
def test_the_dedup_bench_measures_both_filters_through_the_worker_path():
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHD_")}
    done = subprocess.run([sys.executable, "-m", "bench", "dedup", "--sizes", str(SIZE), "--timed", str(TIMED),
                           "--rounds", "2", "--threads", "2", "--contenders", "exact,bloom,bloom-scaled", "--json"],
                          cwd=REPOSITORY, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    exact, bloom, scaled = report["rows"]
    assert [row["filter"] for row in report["rows"]] == ["exact", "bloom", "bloom-scaled"]
    assert all(row["told"] == SIZE and row["requests_per_s"] > 0 for row in report["rows"])
    # One round trip a request through the worker's path, whichever the filter.
    assert all(row["round_trips_per_request"] == pytest.approx(1, abs=0.01) for row in report["rows"])
    assert exact["false_positives"] == 0 and exact["x_exact"] == 1
    assert bloom["false_positives"] <= 2 * 0.001 * SIZE and scaled["false_positives"] <= 2 * 0.001 * SIZE
    assert bloom["capacity"] == SIZE and scaled["capacity"] == 1000
    assert bloom["bytes_per_fp"] < scaled["bytes_per_fp"] < exact["bytes_per_fp"] / 10
    # (At this size Redis's growth is mostly its clients' buffers: at a million, the keys' bytes.)
    assert report["used_memory_growth_per_fp"][str(SIZE)] > sum(row["bytes_per_fp"] for row in report["rows"])
    assert set(report["extrapolated_100m_bytes"]) == {"exact", "bloom", "bloom-scaled",
                                                      "bloom at capacity 100 M (geometry)"}
