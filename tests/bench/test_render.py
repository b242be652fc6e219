"""`python -m bench render` (bench/render.py), batchd's side alone, at a tiny size: it runs a real batch of
rendered pages and prints its table (figures go in the closing note, never in a test; the kills are
tests/render/test_processes.py's)."""
import os
import re
import shutil
import subprocess
import sys

import pytest
from procs import ROOT as REPOSITORY


@pytest.mark.once
@pytest.mark.skipif(not (shutil.which("chromium") and shutil.which("chromedriver")), reason="no chromium here")
def test_the_render_bench_runs_batchd_side():
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHD_")}
    done = subprocess.run([sys.executable, "-m", "bench", "render", "--pages", "9", "--only", "batchd",
                           "--kills", "none"], cwd=REPOSITORY, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^9 pages, 1 round\(s\), batchd 2 workers x RENDER_CONCURRENCY 2, ", done.stdout, re.M)
    # pages/s, PSS, the browsers' PSS, restarts, left after the run (no kills, no bare loop to be a ratio of, too
    # few pages for the memory's buckets)
    assert re.search(r"^\| batchd \(render=True\) \| [\d.]+ \| – \| [\d,]+ \| – \| [\d,]+ \| \d+ \| 0 \| – \| – \| – \|$",
                     done.stdout, re.M), done.stdout
