"""The benchmark docs/performance.md shows runs, on both stores (a small batch: figures go in the closing note,
never in a test)."""
import os
import re
import subprocess
import sys

import pytest
from procs import ROOT as REPOSITORY

BENCH = os.path.join(REPOSITORY, "bench", "batch.py")


@pytest.mark.once
@pytest.mark.parametrize("store", ["mysql", "sqlite"])
def test_the_bench_runs_a_whole_batch(store):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHD_")}
    done = subprocess.run([sys.executable, BENCH, "--tasks", "60", "--workers", "1", "--store", store],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(rf"^{store}: 60 tasks, 1 workers x 4 threads: [\d.]+ s wall, \d+ tasks/s "
                     r"\(every task done, every item stored\)$", done.stdout, re.M)
