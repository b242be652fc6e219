"""`python -m bench recrawl` runs its three batches at a small size and what they must count holds: every
page new, then every page unchanged, then exactly the changed pages changed, with their items updated
(the speed figures and targets go in the closing note of a change, never in a test)."""
import json
import os
import subprocess
import sys

import pytest
from procs import ROOT as REPOSITORY

PAGES, CHANGED = 60, 6


@pytest.mark.once
@pytest.mark.parametrize("store", ["mysql", "sqlite"])
def test_the_recrawl_bench_counts_new_unchanged_and_changed_pages(store):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHD_")}
    done = subprocess.run([sys.executable, "-m", "bench", "recrawl", "--pages", str(PAGES), "--config", "1x4",
                           "--store", store, "--json"],
                          cwd=REPOSITORY, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)

    assert report["pages"] == PAGES and report["changed"] == CHANGED and report["store"] == store
    assert report["batchd_settings"] == {"REVALIDATE": "true", "BATCH_MODE": "full"}
    first, second, third = report["batches"]
    assert [b["batch"] for b in report["batches"]] == [1, 2, 3]
    assert [b["batch_id"] for b in report["batches"]] == sorted({b["batch_id"] for b in report["batches"]})
    for batch in report["batches"]:
        assert batch["new_batch"] and batch["is_done"], batch
        assert batch["tasks_done"] == batch["record_done"] == PAGES and batch["record_failed"] == 0, batch
        assert batch["elapsed_s"] > 0 and batch["cpu_ms_per_task"] > 0 and batch["requests"] >= PAGES, batch
        assert not batch["recrawl_gone"], batch
    counts = [(b["recrawl_new"] or 0, b["recrawl_changed"] or 0, b["recrawl_unchanged"] or 0)
              for b in report["batches"]]
    assert counts == [(PAGES, 0, 0), (0, 0, PAGES), (0, CHANGED, PAGES - CHANGED)]

    # What nginx sent: every page whole at first, then 304s, then the changed pages whole again.
    assert first["statuses"] == {"200": PAGES}
    assert second["statuses"] == {"304": PAGES}
    assert third["statuses"] == {"200": CHANGED, "304": PAGES - CHANGED}
    assert second["bytes"] < first["bytes"] * 0.05
    assert second["bytes"] * 5 < third["bytes"] < first["bytes"] * 0.15
    assert report["ratios"]["batch2"]["bytes"] == second["bytes"] / first["bytes"]

    # Every correctness check passed (the changed pages' latest items carry the new lead paragraph among them);
    # each target is reported, passed or not.
    assert report["correct"] and all(check["pass"] for check in report["checks"]), report["checks"]
    assert any("latest items" in check["name"] for check in report["checks"])
    assert [(t["batch"], t["measure"]) for t in report["targets"]] == [(2, "bytes"), (2, "time"), (3, "bytes"),
                                                                       (3, "time")]
