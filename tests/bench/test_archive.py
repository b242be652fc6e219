"""`python -m bench archive` runs archive off and on at a small size, and what it must find holds: every page
archived and read back, warcio's check passing, the batch reparsed from its archive with no request to the site,
each measure reported against its target; its export measure (`--export-only`) wrote every row of each table as
one JSON object a line, with its figures (the figures go in the closing note of a change, never in a test)."""
import json
import os
import subprocess
import sys

import pytest
from procs import ROOT as REPOSITORY

PAGES = 30
ROWS = 500


def bench_archive(*args) -> dict:
    """`python -m bench archive ARGS --json`'s report, once it exited 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHD_")}
    done = subprocess.run([sys.executable, "-m", "bench", "archive", *args, "--json"], cwd=REPOSITORY, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


@pytest.mark.once
def test_the_archive_bench_archives_every_page_and_reports_both_measures():
    report = bench_archive("--pages", str(PAGES), "--config", "1x4", "--rounds", "1", "--store", "sqlite",
                           "--export-rows", "0")
    assert report["pages"] == PAGES and report["store"] == "sqlite" and "gzipped" in report["site"]
    assert [len(report["runs"][side]) for side in ("archive-off", "archive-on")] == [1, 1]
    assert all(run["done"] == run["items"] == PAGES for side in report["runs"].values() for run in side)
    assert report["archived_whole"] == {"files": 1, "missing": 0, "check_failed": 0, "pass": True}
    written = report["bytes_written"]
    assert written["warc_bytes"] > written["gzipped_bodies"] > 0 and written["index_bytes"] > 0
    assert report["worker_cpu"]["ratio"] > 0
    assert [t["measure"] for t in report["targets"]] == ["worker_cpu", "bytes_written", "reparse"]
    reparsed, = report["reparse"]["rounds"]          # the same batch reparsed alone and under a daemon, no site hit
    assert reparsed["pass"] and reparsed["site_hits"] == 0 and reparsed["ratio"] > 0
    assert [reparsed[how]["replayed"] for how in ("alone", "queued")] == [PAGES, PAGES]
    assert "export" not in report


@pytest.mark.once
def test_the_export_measure_reads_every_row_back_and_samples_the_rss():
    # SQLite alone: MySQL's would start a private mariadbd for seconds more (tests/export/ reads MySQL's tables).
    export = bench_archive("--export-only", "--export-rows", str(ROWS), "--export-stores", "sqlite")["export"]
    assert export["rows"] == ROWS and export["target_rows_per_s"] == 100_000
    assert [(run["store"], run["table"]) for run in export["runs"]] == [("sqlite", "crawl_task_item"),
                                                                        ("sqlite", "products")]
    for run in export["runs"]:
        assert run["rows"] == ROWS and run["rows_per_s"] > 0 and run["elapsed_s"] > 0, run
        assert run["rss"]["samples"] >= 1 and run["rss"]["first_mb"] > 0, run
