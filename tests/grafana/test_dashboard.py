"""The Grafana dashboard the package installs (grafana/batchd.json, at /usr/share/batchd/grafana/batchd.json):
every metric its queries name is one a real `batchd run` serves on /metrics, so a renamed metric fails here;
it imports anywhere (its data source is an input), and every panel has a title and a query."""
import json
import os
import re
import signal

import pytest

from harness import wait_for
from procs import ROOT
from supervised import free_port, start_batchd, try_scrape, value

DASHBOARD = os.path.join(ROOT, "grafana", "batchd.json")
INSTALLED_AT = "/usr/share/batchd/grafana/batchd.json"
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
METRIC = re.compile(r"\bbatchd_[a-z_]+")
# The names of a family's samples, by its type: what a query may name.
SAMPLES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count"),
           "summary": ("", "_sum", "_count")}


def load() -> dict:
    with open(DASHBOARD, encoding="utf-8") as f:
        return json.load(f)


def panels(dashboard: dict) -> list:
    """The panels that draw (rows left out, a collapsed row's panels in)."""
    found = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            found.extend(panel.get("panels", []))
        else:
            found.append(panel)
    return found


def expressions(dashboard: dict) -> list:
    exprs = [target["expr"] for panel in panels(dashboard) for target in panel["targets"]]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            exprs.append(variable["definition"])
    return exprs


def queried_metrics(dashboard: dict) -> set:
    return {name for expr in expressions(dashboard) for name in METRIC.findall(expr)}


def exported(name: str, families: dict) -> bool:
    """Whether a query's metric is a sample name of one of these families ({name: type}; a counter's name
    without its `_total`)."""
    return any(name == family + suffix for family, kind in families.items() for suffix in SAMPLES[kind])


def test_the_dashboard_imports_anywhere_and_every_panel_has_a_title_and_a_query():
    dashboard = load()
    assert dashboard["uid"] == "batchd" and dashboard["title"] == "batchd"
    assert dashboard["schemaVersion"] >= 37
    assert [(i["name"], i["type"], i["pluginId"]) for i in dashboard["__inputs"]] == [
        ("DS_PROMETHEUS", "datasource", "prometheus")]
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    # A provisioned file is not imported (its inputs are not filled in): the variable of the same name is.
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["namespace"]["datasource"] == DATASOURCE
    assert variables["namespace"]["definition"].startswith("label_values(batchd_")
    drawn = panels(dashboard)
    assert len(drawn) >= 15
    for panel in drawn:
        assert panel.get("title"), panel
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert METRIC.search(target["expr"]), (panel["title"], target["expr"])
            assert 'namespace=~"$namespace"' in target["expr"], (panel["title"], target["expr"])
    ids = [panel["id"] for panel in drawn + [row for row in dashboard["panels"] if row["type"] == "row"]]
    assert len(ids) == len(set(ids))


def test_the_package_installs_the_dashboard():
    with open(os.path.join(ROOT, "debian", "batchd.install"), encoding="utf-8") as f:
        lines = [line.split() for line in f if line.strip() and not line.startswith("#")]
    assert ["grafana/batchd.json", os.path.dirname(INSTALLED_AT).lstrip("/") + "/"] in lines


def test_the_name_check_fails_on_a_metric_that_is_not_exported():
    families = {"batchd_tasks": "counter", "batchd_fetch_latency_seconds": "histogram",
                "batchd_workers_alive": "gauge"}
    assert exported("batchd_tasks_total", families) and exported("batchd_fetch_latency_seconds_bucket", families)
    assert exported("batchd_workers_alive", families)
    for wrong in ("batchd_task_total", "batchd_tasks", "batchd_workers_alive_total", "batchd_fetch_latency_seconds"):
        assert not exported(wrong, families), wrong
    assert queried_metrics({"panels": [{"type": "x", "targets": [
        {"expr": 'sum(rate(batchd_tasks_total{namespace=~"$namespace"}[5m])) / batchd_workers_alive'}]}],
        "templating": {"list": []}}) == {"batchd_tasks_total", "batchd_workers_alive"}


def exposed_families(port: int) -> dict:
    """{family: type} of one /metrics answer, from its # TYPE lines (a family without samples yet, such as the
    outage gauge before any outage, is there too); a counter's name without `_total`, whichever
    prometheus-client wrote it."""
    import requests
    answer = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    answer.raise_for_status()
    families = {}
    for line in answer.text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            families[name.removesuffix("_total") if kind == "counter" else name] = kind
    return families


def test_every_metric_the_dashboard_queries_is_exported_by_a_real_run(mysql_backend, site, procs):
    pytest.importorskip("prometheus_client")
    refused = f"http://127.0.0.1:{free_port()}/refused"        # nothing listens: a request error
    mysql_backend.create_tasks([site.url("/page/1"), site.url("/page/2"), site.url("/status/404?task=1"),
                                refused])
    port = free_port()
    proc = start_batchd(procs, mysql_backend, "run", "--workers", "1", METRICS_PORT=port,
                        BATCH_MONITOR_INTERVAL=0.2, SPIDER_MAX_RETRY_TIMES=0)

    def judged(samples: dict) -> bool:
        settled = sum(value(samples, "batchd_batch_settled_tasks", outcome=outcome) for outcome in ("done", "failed"))
        return settled == 4 and value(samples, "batchd_quality_batch_id") == 1
    wait_for(lambda: judged(try_scrape(port)), timeout=60, message="the four tasks settled, the batch judged")
    families = exposed_families(port)
    proc.send(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()

    queried = queried_metrics(load())
    assert {"batchd_tasks_total", "batchd_fetch_latency_seconds_bucket", "batchd_request_errors_total",
            "batchd_host_attempts", "batchd_backend_outage", "batchd_child_restarts_total",
            "batchd_recrawl_tasks_total", "batchd_quality_coverage", "batchd_quality_host_coverage",
            "batchd_quality_flags_total"} <= queried
    assert not [name for name in queried if not exported(name, families)], sorted(families)
