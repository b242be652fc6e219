"""`batchd web`: the dashboard's JSON API and pages over a real `batchd run` on MySQL + Redis and on SQLite
(the figures the database holds, failures with crawled text escaped and passwords redacted, the actions and
their token, a flagged batch's quality as `batchd quality` gives it), and its server's bounds (a slow, huge or crowding client, a foreign Host) in-process.

The browser's view of the same pages is tests/web/test_browser.py."""
import json
import os
import socket
import time

import pytest
import requests

from batchd.web import server as web_server
from batchd.web.server import Answer, DashboardServer
from harness import wait_for
from procs import Proc
from supervised import SEED, batchd, batchd_command, free_port, one_error_line, slow_urls, start_batchd
from taskdb import SqliteBackend
from dashboards import (NAMING_SHOP, SCRIPT, TELLING, TOKEN, Web, answers, failing_urls, flagged_batch,
                        recrawled_batch, shop_tasks, table_counts)
from batchd.web import charts, html
from httpserver import TestSite



def test_the_api_and_the_pages_show_what_the_database_holds(shared_backend, site, procs):
    shared_backend.create_tasks(slow_urls(site, 40, seconds=0.05) + failing_urls(site))
    start_batchd(procs, shared_backend, "run", "--workers", "1", spider=TELLING)
    web = Web(procs, shared_backend)
    wait_for(lambda: (web.api("status")["batch"] or {}).get("is_done"), timeout=60, message="the batch finished")

    status, held = web.api("status"), table_counts(shared_backend)
    assert {k: status["tasks"][k] for k in held} == held == {"total": 45, "done": 40, "failed": 5}
    namespace = status["namespace"]
    assert web.api("namespaces") == [{"namespace": namespace, "table": "crawl_task"}]
    assert status["workers_alive"] == 1
    assert web.api("why")["verdict"].startswith("batch 1 is finished")
    (batch,) = web.api("history")
    assert (batch["id"], batch["done"], batch["failed"]) == (1, 40, 5)
    (host,) = web.api("hosts")["hosts"]
    # The host's attempts by outcome: the pages whose text failed their tasks were answered all right.
    assert (host["host"], host["done"], host["failed"]) == (site.url("/")[len("http://"):-1], 42, 3)

    failures = web.api("failures")
    assert failures["total"] == 5 and {k["kind"]: k["count"] for k in failures["kinds"]} == {"HTTP 404": 3,
                                                                                              "ValueError": 2}
    urls = [f["url"] for f in failures["failures"] if f["reason"] == "HTTP 404"]
    assert len(urls) == 3 and all("crawler:***@" in url for url in urls), urls
    assert SCRIPT in {f["reason"].partition(": ")[2] for f in failures["failures"]}
    assert web.api("failures", reason="ValueError")["total"] == 2

    pages = {path: web.get(f"/ns/{namespace}/{path}") for path in ("", "hosts", "failures", "history")}
    assert {path: page.status_code for path, page in pages.items()} == dict.fromkeys(pages, 200)
    everything = "".join(page.text for page in pages.values()) + json.dumps(failures)
    assert "hunter2" not in everything
    assert SCRIPT not in pages["failures"].text and "&lt;script&gt;alert(1)&lt;/script&gt;" in pages["failures"].text
    assert "Content-Security-Policy" in pages[""].headers and "script-src 'self'" in pages[""].headers[
        "Content-Security-Policy"]
    assert web.get("/").headers["Location"] == f"/ns/{namespace}/"
    assert web.get("/ns/nowhere/").status_code == 404 and web.get("/api/status?namespace=nowhere").status_code == 404


def test_the_batch_page_names_its_failures_counts_its_responses_and_draws_a_closed_batch_from_its_record(
        shared_backend, site, procs):
    recrawled_batch(shared_backend, site)
    web = Web(procs, shared_backend)
    namespace, record = web.api("namespaces")[0]["namespace"], shared_backend.records()[-1]
    figures, counters = web.api("batch"), json.loads(record["stats"])
    assert figures["failures"] == {"total": 2, "kinds_total": 1, "reasons": [{"kind": "HTTP 404", "count": 2}]}
    assert figures["found"] == {"new": 0, "changed": 1, "unchanged": 2, "gone": 0}
    assert figures["responses"] == {"bytes": counters["downloader/response_bytes"], "not_modified": 2}
    assert figures["life"]["drawn_from"] == "record" and [n for _, n in figures["life"]["points"]] == [0, 5]

    page = web.get(f"/ns/{namespace}/").text
    link = f'href="/ns/{namespace}/failures?reason=HTTP%20404">HTTP 404</a></td><td>2</td>'
    assert link in page and 'class="line from-record"' in page
    assert 'id="chart-source">Drawn from the batch&#x27;s record' in page
    for cell, shown in (("found-changed", "1"), ("found-unchanged", "2"), ("not-modified", "2"),
                        ("bar-failed", "2 failed (40.0%)")):
        assert f'id="{cell}">{shown}<' in page, cell
    assert web.api("failures", reason="HTTP 404")["total"] == 2          # the link's filter


def test_crawled_failure_reasons_are_escaped_on_the_batch_page():
    status = {"namespace": "ns", "unreachable": [], "paused_since": None, "batch": {"id": 1, "date": None,
              "is_done": True}, "tasks": {"total": 3, "settled": 3, "done": 2, "failed": 1, "pending": 0,
              "processing": 0}, "queue": {"waiting": 0, "leased": 0}, "rate": None, "rate_seconds": None,
              "eta_seconds": None, "time": 0.0, "hosts": [], "workers_alive": 0, "workers_wanted": 0, "unflushed": 0}
    figures = {"unreachable": [], "responses": None, "found": None, "life": None,
               "failures": {"total": 1, "kinds_total": 1, "reasons": [{"kind": SCRIPT, "count": 1}]}}
    why = {"verdict": "finished", "waiting_on_hosts": [], "outages": [], "oldest": []}
    page = html.batch_page(status, figures, why, ["ns"], False)
    assert SCRIPT not in page and "?reason=%3Cscript%3Ealert%281%29%3C%2Fscript%3E\">&lt;script&gt;" in page


def test_a_few_failures_among_many_are_seen_on_the_bar():
    drawn = charts.bar(9995, 5, 10000)
    assert 'class="failed" x="634.0" y="0" width="6.0"' in drawn and 'class="done" x="0" y="0" width="634.0"' in drawn


def test_the_quality_api_and_page_say_what_batchd_quality_says(shared_backend, site, procs):
    with TestSite() as captcha:
        shop_tasks(shared_backend, site, captcha)
        web = Web(procs, shared_backend, spider=NAMING_SHOP)
        namespace = web.api("namespaces")[0]["namespace"]
        none_yet = web.get("/api/quality")
        assert none_yet.status_code == 404 and "no batch has been opened yet" in none_yet.json()["error"]
        assert "No batch has closed yet" in web.get(f"/ns/{namespace}/").text
        flagged_batch(procs, shared_backend)
        site_host, captcha_host = (s.url("/").split("/")[2] for s in (site, captcha))
    shown = batchd("quality", NAMING_SHOP, "--json", backend=shared_backend)
    assert shown.returncode == 65, shown.stderr
    report = web.api("quality")
    assert {k: report[k] for k in ("batch", "reparse_of", "outcome", "flags", "hosts", "compared", "render")} \
        == json.loads(shown.stdout)
    assert report["render"] == []        # no render="auto" request: no host learnt
    assert web.api("quality", batch="1") == report
    assert {(f["host"], f["kind"], f["field"]) for f in report["flags"]} == {
        (captcha_host, "soft_block", None), (captcha_host, "block_marker", "g-recaptcha"),
        (site_host, "coverage_floor", "crawl_task_item.title")}
    assert web.get("/api/quality?batch=2").status_code == 404
    assert web.get("/api/quality?batch=x%3Cb%3E").status_code == 400

    page = web.get(f"/ns/{namespace}/quality").text
    assert page.count('class="flagged"') == 3 and page.count('<tr class="flag">') == 3
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and SCRIPT not in page      # the crawl's field name
    batch_page = web.get(f"/ns/{namespace}/").text
    assert 'id="batch-flags"' in batch_page and batch_page.count('<li class="flag"') == 3
    assert f'href="/ns/{namespace}/quality?batch=1"' in batch_page
    assert "no such batch (the last is 1)" in web.get(f"/ns/{namespace}/quality?batch=2").text


def test_the_actions_take_the_token_and_nothing_else(mysql_backend, site, procs):
    mysql_backend.create_tasks([site.url("/slow?seconds=60")] + failing_urls(site))
    start_batchd(procs, mysql_backend, "run", "--workers", "1", spider=TELLING)
    read_only = Web(procs, mysql_backend)
    web = Web(procs, mysql_backend, token=TOKEN)
    wait_for(lambda: web.api("status")["tasks"] and web.api("status")["tasks"]["failed"] == 5, timeout=60,
             message="the five failures settled, the slow task still open")

    assert read_only.post("pause", token=TOKEN).status_code == 404          # no token set: no actions at all
    refused = web.post("pause")
    assert refused.status_code == 401 and refused.headers["WWW-Authenticate"].startswith("Bearer")
    assert web.post("pause", token="s3cret-token-for-the-tesT").status_code == 403
    assert web.get("/api/pause").status_code == 405
    assert web.api("status")["paused_since"] is None, "a refused action changed nothing"

    paused = web.post("pause", token=TOKEN)
    assert paused.status_code == 200 and "paused" in paused.json()["said"]
    assert json.loads(batchd("status", TELLING, "--json", backend=mysql_backend).stdout)["paused_since"] is not None
    assert web.post("resume", token=TOKEN).status_code == 200
    wait_for(lambda: web.api("status")["paused_since"] is None, timeout=30, message="resumed, past the cache")

    requeued = web.post("requeue", token=TOKEN, reason="HTTP 404")
    assert requeued.status_code == 200 and "3 failed tasks" in requeued.json()["said"], requeued.text
    still_open = web.post("open-batch", token=TOKEN)
    assert still_open.status_code == 409 and "still open" in still_open.json()["error"]
    wait_for(lambda: table_counts(mysql_backend)["failed"] == 5, timeout=30,
             message="the requeued 404s crawled again (and failed again)")


OTHER_SPIDER = """from spiders.seed import CrawlTask


class OtherTask(CrawlTask):
    __task_table__ = "other_task"
"""


def test_one_dashboard_shows_the_namespaces_of_several_spiders(tmp_path, failed_items_path, procs):
    """`batchd web A B`: each spider's namespace (its task table, NAMESPACE unset), listed on the first page and
    in /api/namespaces, each page and API answer of its own."""
    backend = SqliteBackend(tmp_path / "batchd.db", failed_items_path)
    try:
        backend.create_tasks(["http://127.0.0.1:1/a"], table="crawl_task")
        backend.create_tasks(["http://127.0.0.1:1/b", "http://127.0.0.1:1/c"], table="other_task")
        (tmp_path / "other.py").write_text(OTHER_SPIDER)
        env = {k: v for k, v in backend.env().items() if k != "BATCHD_NAMESPACE"}
        base = f"http://127.0.0.1:{free_port()}"
        procs.add(Proc(batchd_command("web", SEED, f"{tmp_path / 'other.py'}:OtherTask", "--listen",
                                      base[len("http://"):]), env={**env, "BATCHD_CONFIG": os.devnull}))
        wait_for(lambda: answers(base), timeout=20, message="batchd web answering")
        assert requests.get(f"{base}/api/namespaces", timeout=5).json() == [
            {"namespace": "crawl_task", "table": "crawl_task"}, {"namespace": "other_task", "table": "other_task"}]
        index = requests.get(base + "/", timeout=5)
        assert index.status_code == 200 and '<a href="/ns/other_task/">other_task</a>' in index.text
        assert requests.get(f"{base}/api/status?namespace=other_task", timeout=5).json()["table"] == "other_task"
        assert requests.get(f"{base}/ns/other_task/history", timeout=5).status_code == 200
    finally:
        backend.close()


def test_bad_settings_end_the_command_with_one_line(shared_backend, tmp_path):
    def fails(*args, env=None) -> str:
        result = batchd("web", TELLING, *args, backend=shared_backend, env=env)
        assert result.returncode == 78, result.stderr
        return one_error_line(result)

    assert "--listen / WEB_LISTEN 'nowhere'" in fails("--listen", "nowhere")
    missing = tmp_path / "no-token"
    assert f"WEB_TOKEN_FILE {missing}: cannot be read" in fails(env={"BATCHD_WEB_TOKEN_FILE": str(missing)})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert "cannot listen there" in fails("--listen", f"127.0.0.1:{port}")


# -- the server's bounds, in-process
@pytest.fixture
def bounded():
    """A DashboardServer on a free port whose one route says ok, with a deadline of 1 s."""
    server = DashboardServer("127.0.0.1:0", lambda request: Answer.json({"ok": True, "path": request.path}), TOKEN)
    server.deadlines.seconds = 1.0
    from batchd.service.threads import start_thread
    start_thread(server.serve_forever, "test-web")
    yield server
    server.shutdown()
    server.server_close()


def stalled_connection(server) -> socket.socket:
    sock = socket.create_connection(server.server_address[:2])
    sock.sendall(b"GET /api/x HTTP/1.0\r\nHost: localh")              # and nothing more
    return sock


def test_a_slow_client_holds_nothing_up_and_is_cut_at_its_deadline(bounded):
    # A deadline of 2 s: an answer held up behind the slow client would come after it, one not held up well
    # before, even on a busy machine (where an answer in-process can take a few hundred ms).
    bounded.deadlines.seconds = 2.0
    slow = stalled_connection(bounded)
    started = time.monotonic()
    answer = requests.get(bounded.url + "api/x", timeout=5)
    assert answer.status_code == 200 and time.monotonic() - started < 1.5
    slow.settimeout(10)
    assert slow.recv(100) == b"" and time.monotonic() - started < 4.5, "cut at its deadline"
    slow.close()


def test_a_crowd_is_answered_503_beyond_the_bound_and_served_again_after(bounded):
    bounded.deadlines.seconds = 30.0            # the crowd stays until it leaves
    crowd = [stalled_connection(bounded) for _ in range(web_server.MAX_CONNECTIONS)]
    wait_for(lambda: bounded.slots._value == 0, timeout=30, message="every slot taken")
    one_more = requests.get(bounded.url + "api/x", timeout=5)
    assert one_more.status_code == 503 and one_more.headers["Retry-After"] == "1"
    for sock in crowd:
        sock.close()
    wait_for(lambda: requests.get(bounded.url + "api/x", timeout=5).status_code == 200, timeout=30,
             message="served again once the crowd is gone")


def test_a_huge_body_is_refused_unread(bounded):
    with socket.create_connection(bounded.server_address[:2]) as sock:
        sock.sendall(b"POST /api/pause HTTP/1.0\r\nHost: localhost\r\nContent-Length: 1000000000\r\n\r\n")
        sock.settimeout(5)
        assert sock.recv(100).startswith(b"HTTP/1.0 413")


def test_a_foreign_host_name_is_refused_on_loopback(bounded):
    answer = requests.get(bounded.url + "api/x", headers={"Host": "rebound.example:9380"}, timeout=5)
    assert answer.status_code == 421
    assert requests.get(bounded.url + "api/x", headers={"Host": "localhost:9380"}, timeout=5).status_code == 200


def test_the_token_is_compared_whole_and_only_as_a_bearer(bounded):
    assert bounded.authorized(f"Bearer {TOKEN}") and bounded.authorized(f"bearer {TOKEN}")
    for header in (None, "", TOKEN, f"Basic {TOKEN}", f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN}x", "Bearer "):
        assert not bounded.authorized(header), header
