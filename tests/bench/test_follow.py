"""`python -m bench follow` spends an incremental batch's re-found links the three ways and its figures hold
together (the figures themselves go in the closing note of a change, never in a test)."""
import json
import os
import subprocess
import sys

import pytest
from procs import ROOT as REPOSITORY

INDEXES, LINKS = 2, 10        # 20 articles; batch 2's index pages link to 18 of them and 2 new ones


@pytest.mark.once
def test_the_follow_bench_drops_the_known_links_only_across_batches():
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHD_")}
    done = subprocess.run([sys.executable, "-m", "bench", "follow", "--indexes", str(INDEXES), "--links", str(LINKS),
                           "--rounds", "1", "--threads", "2", "--json"],
                          cwd=REPOSITORY, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {row["contender"]: row for row in json.loads(done.stdout)["rows"]}
    articles, new = INDEXES * LINKS, 2
    assert (rows["refetch"]["articles_200"], rows["refetch"]["articles_304"]) == (articles, 0)
    assert (rows["revalidate"]["articles_200"], rows["revalidate"]["articles_304"]) == (new, articles - new)
    assert (rows["across"]["articles_200"], rows["across"]["articles_304"]) == (new, 0)
    assert rows["across"]["requests"] == INDEXES + new and rows["across"]["items"] == new
    assert rows["refetch"]["items"] == articles
    assert all(row["wall_s"] > 0 and row["cpu_s"] > 0 for row in rows.values())
    assert rows["revalidate"]["wall_x_revalidate"] == 1
