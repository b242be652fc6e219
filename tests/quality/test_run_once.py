"""The three-site scenario of issue 33, end to end: `batchd run --once` twice on MySQL + Redis with loopback
shops, one unchanged, one whose layout changes on 30 % of its pages in batch 2, one that serves a captcha page
for every URL in batch 2. The captcha site is held behind its breaker from its first captcha page (point 4: the
tasks of its captcha pages go back to pending, and its probes meet the captcha page again) until it is down
(HOST_DOWN_GIVE_UP, short here), and its tasks fail. Batch 2 is flagged (one WARNING line per flag, counted on
the `batch 2 done:` line), `run --once` ends 65, and `batchd quality` and `batchd status` say so; a batch with failed tasks and no flag
ends 1."""
import json

from harness import batch_done, wait_for
from httpserver import TestSite
from supervised import batchd, start_batchd

SHOP = "spiders/shop.py:ShopTask"
PAGES = 20
TITLE = "crawl_task_item.title"


# A host held for its block page is probed quickly and is down after 3 s.
HOLD = {"HOST_BREAKER_PROBE": "0.2", "HOST_BREAKER_PROBE_MAX": "0.5", "HOST_DOWN_GIVE_UP": "3"}


def run_once(procs, backend, **settings) -> tuple:
    """One `batchd run --once` to its end: (exit code, output)."""
    proc = start_batchd(procs, backend, "run", "--workers", "2", "--once", spider=SHOP, **settings)
    code = proc.wait(90)
    return code, proc.output()


def host(site) -> str:
    return site.url("/").split("/")[2]


def test_a_changed_layout_and_a_captcha_site_flag_batch_2_and_run_once_ends_65(mysql_backend, site, procs):
    with TestSite() as relaid, TestSite() as captcha:
        sites = (site, relaid, captcha)
        mysql_backend.create_tasks([s.url(f"/shop/{n}") for s in sites for n in range(1, PAGES + 1)])
        code, output = run_once(procs, mysql_backend)
        assert code == 0, output[-3000:]
        assert "batch 1 done:" in output and "quality flag" not in output
        mysql_backend.age_last_batch(days=7)
        relaid.relaid.update(range(1, PAGES * 3 // 10 + 1))      # 30 % of its pages: the title moved
        captcha.captcha = True
        code, output = run_once(procs, mysql_backend, **HOLD)
    assert code == 65, output[-3000:]
    wait_for(lambda: batch_done(mysql_backend), message="batch 2 closed")
    warnings = [line for line in output.splitlines() if "WARNING" in line and "batch 2 quality:" in line]
    assert len(warnings) == 4 and all(len(line.split("batch 2 quality: ")[1]) <= 300 for line in warnings), warnings
    assert next(line for line in output.splitlines() if "batch 2 done:" in line).endswith(
        "4 quality flags (batchd quality)")
    assert mysql_backend.records()[-1]["outcome"] == "flagged"
    # No task of the captcha site was done with its captcha page: each failed once its host was down.
    failures = [f for (batch, _), f in mysql_backend.failures().items() if batch == 2]
    assert len(failures) == PAGES and all(f"host {host(captcha)} down since" in f["reason"] for f in failures)

    shown = batchd("quality", SHOP, "--json", backend=mysql_backend)
    assert shown.returncode == 65, shown.stderr
    report = json.loads(shown.stdout)
    assert report["batch"] == 2 and report["compared"] == [1]
    assert {(f["host"], f["kind"], f["field"]) for f in report["flags"]} == {
        (host(relaid), "coverage_drop", TITLE), (host(captcha), "soft_block", None),
        (host(captcha), "block_marker", "g-recaptcha"), (host(captcha), "items_drop", "crawl_task_item")}
    marker = next(f for f in report["flags"] if f["kind"] == "block_marker")
    assert "tasks put back to pending, the host held" in marker["message"], marker
    assert all(set(f) == {"host", "kind", "field", "now", "before", "message"} for f in report["flags"])
    rows = {row["host"]: row for row in report["hosts"]}
    assert rows[host(relaid)]["coverage"][TITLE] == 0.7 and rows[host(relaid)]["coverage_before"][TITLE] == 1.0
    assert rows[host(site)]["items"] == PAGES and rows[host(site)]["items_before"] == PAGES
    assert rows[host(captcha)]["top_body_share"] == 1.0 and rows[host(captcha)]["put_back"] >= 1

    text = batchd("quality", SHOP, "--host", host(captcha), backend=mysql_backend).stdout
    assert text.splitlines()[0].startswith("batch 2: flagged, 3 flags") and text.count("FLAG  ") == 3, text
    first = batchd("quality", SHOP, "--batch", "1", backend=mysql_backend)
    assert first.returncode == 0 and first.stdout.startswith("batch 1: clean, 0 flags"), first.stdout
    status = batchd("status", SHOP, backend=mysql_backend).stdout
    assert "quality  4 flags (batch 2), see batchd quality" in status, status



def test_a_batch_with_failed_tasks_and_no_flag_ends_1(mysql_backend, site, procs):
    mysql_backend.create_tasks([site.url(f"/shop/{n}") for n in range(1, 6)] + [site.url("/status/404")])
    code, output = run_once(procs, mysql_backend)
    assert code == 1, output[-3000:]
    assert mysql_backend.records()[-1]["outcome"] == "failed"
