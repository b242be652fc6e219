"""bench/scale.py runs on both stores at a small size and its figures hold together (the figures
themselves go in the closing note of a change, never in a test)."""
import json
import os
import subprocess
import sys

import pytest
from procs import ROOT as REPOSITORY

BENCH = os.path.join(REPOSITORY, "bench", "scale.py")
ROWS = 20000
DUE_EVERY = 10      # bench/scale.py --mode due: the tasks with id % 10 = 0 are due


@pytest.mark.once
# The due walk's SQL is the SQL stores' shared code: one store runs it here (MariaDB's plan for it is
# tests/backends/test_page_store.py's).
@pytest.mark.parametrize("store, mode", [("mysql", "full"), ("sqlite", "full"), ("sqlite", "due")])
def test_the_scale_bench_measures_a_reset_and_steady_patrols(store, mode):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHD_")}
    done = subprocess.run([sys.executable, BENCH, "--rows", str(ROWS), "--steady", "5", "--store", store,
                           "--mode", mode, "--buffer-pool", "256M", "--json"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(done.stdout.splitlines()[-1])

    assert figures["rows"] == figures["reset_rows"] == ROWS
    # The reset set back every row (full) or the due ones alone (due), as the table and the simulator saw too.
    assert figures["reset_moved"] == figures["set_back_expected"] == (ROWS // DUE_EVERY if mode == "due" else ROWS)
    assert figures["set_back_errors"] == []
    assert figures["reset_s"] > 0 and figures["reset_rows_per_s"] > 0
    assert figures["reset_longest_statement_ms"] > 0 and figures["patrol_longest_statement_ms"] > 0
    assert figures["patrols"] > 0 and 0 < figures["patrol_p50_ms"] <= figures["patrol_p99_ms"]
    assert figures["reset_chunk_timed"] and figures["reset_chunks"] > 0      # the master's reset step is found
    # Every task leased was written back, and every write-back's latency is among the recorded ones: the
    # rows they moved are exactly the rows done in the table (the reset left none done).
    assert figures["steady_writebacks"] > 0 and figures["steady_writeback_p99_ms"] > 0
    assert figures["tasks_leased"] == figures["tasks_written_back"] == figures["tasks_done_in_table"] > 0
    assert figures["first_lease_after_open_s"] >= 0
    assert 0 < figures["master_rss_start_mb"] <= figures["master_rss_peak_mb"]
    assert figures["master_rss_end_mb"] <= figures["master_rss_peak_mb"]
