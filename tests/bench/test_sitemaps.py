"""bench/sitemaps.py runs at a small size and its figures hold together (the figures themselves go in the
closing note of a change, never in a test)."""
import json
import subprocess
import sys

import pytest
from procs import ROOT as REPOSITORY


@pytest.mark.once
def test_the_sitemaps_bench_imports_and_measures():
    done = subprocess.run([sys.executable, "-m", "bench.sitemaps", "--sizes", "3000", "--json"], cwd=REPOSITORY,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    [figures] = json.loads(done.stdout.splitlines()[-1])
    assert figures["store"] == "SQLite" and figures["urls"] == 3000
    assert figures["urls_per_s"] > 0 and figures["again_per_s"] > 0 and figures["peak_growth_kb"] >= 0
