"""The dashboard's pages, as HTML drawn on the server from the data api.py reads. Every value goes through
`esc` (html.escape, quotes too): a crawled URL, a failure's reason, a host's name, a worker's name all
came from outside and are shown as text. The pages carry no inline script or style (the Content-Security-
Policy forbids both); /static/app.js refreshes a page every REFRESH seconds and sends the actions.

    /ns/NS/            the open batch: progress bar (its counts written under it) and chart (what it is drawn
                       from said under it), done, failed, pending, in flight, bytes, 304s, new / changed /
                       unchanged / gone, rate, ETA, the top failure reasons (links to the failures page), why
                       it is not done (the verdict of `batchd status --why`, the oldest tasks in flight), the
                       queue, the workers per host, and the actions
    /ns/NS/hosts       the busiest hosts: waiting, in flight, done, failed, latency, breaker
    /ns/NS/failures    failures by reason, and the tasks behind a reason (URL, reason, attempts, time)
    /ns/NS/history     the last batches: charts of tasks, duration and items, and a table
    /ns/NS/quality     a closed batch's data quality (?batch=N, else the last one closed): its flags, and a
                       host × field table of coverage against the baseline, the flagged cells marked; below, the
                       hosts' render="auto" choices as they stand now (plain or rendered, since when, why); the
                       batch page shows the last closed batch's flags. The figures are `batchd quality`'s
                       (reporting/quality_report.py): the dashboard and the command say the same.
"""
import html
import time
from typing import Optional
from urllib.parse import quote

from ..recrawl.pages import VERDICTS
from ..reporting.quality_report import against, outcome_line
from ..reporting.snapshots import duration, rate_text
from ..reporting.status import supervisor_name
from ..settle.batch_stats import size_text
from . import charts

REFRESH = 5          # seconds between a page's reloads
TABS = (("", "Batch"), ("hosts", "Hosts"), ("failures", "Failures"), ("history", "History"), ("quality", "Quality"))
FLAGS_ON_BATCH_PAGE = 10     # the rest are on the quality page
# Where a flag of each kind is marked in the host × field table: its field's cell, or one of the host's.
FLAG_CELLS = {"coverage_drop": "field", "coverage_floor": "field", "items_drop": "items", "no_items": "items",
              "soft_block": "top-body", "block_marker": "host"}


def esc(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _figure(value) -> str:
    return "-" if value is None else esc(value)


def _when(unix: Optional[float]) -> str:
    return "-" if unix is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(unix))


def page(title: str, namespace: Optional[str], tab: Optional[str], body: str, namespaces: list,
         actions: bool = False) -> str:
    links = ""
    if namespace is not None:
        base = f"/ns/{quote(namespace, safe='')}/"
        here = ' class="here"'
        links = "".join(f'<a href="{base}{path}"{here if path == tab else ""}>{name}</a>' for path, name in TABS)
    others = "".join(f'<a href="/ns/{quote(n, safe="")}/">{esc(n)}</a>' for n in namespaces if n != namespace)
    return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)} · batchd</title><link rel=\"stylesheet\" href=\"/static/app.css\">"
            "<script src=\"/static/app.js\" defer></script></head>"
            f"<body data-refresh=\"{REFRESH}\" data-namespace=\"{esc(namespace or '')}\" "
            f"data-actions=\"{'on' if actions else 'off'}\">"
            f"<header><a class=\"brand\" href=\"/\">batchd</a><span class=\"ns\">{esc(namespace or '')}</span>"
            f"<nav>{links}</nav><nav class=\"others\">{others}</nav></header>"
            f"<main><h1>{esc(title)}</h1>{body}</main>"
            f"<footer>as of {_when(time.time())}; this page reloads every {REFRESH} s · "
            "<a href=\"/api/status\">JSON API</a></footer></body></html>")


def error_page(message: str) -> str:
    return page("Cannot read the namespace", None, None, f'<p class="error" id="error">{esc(message)}</p>', [])


def index_page(entries: list) -> str:
    """Each namespace shown, with its batch's progress."""
    rows = "".join(f'<tr><td><a href="/ns/{quote(e["namespace"], safe="")}/">{esc(e["namespace"])}</a></td>'
                   f'<td>{esc(e["table"])}</td><td>{esc(e["summary"])}</td></tr>' for e in entries)
    body = f'<table><tr><th>namespace</th><th>task table</th><th>batch</th></tr>{rows}</table>'
    return page("Namespaces", None, None, body, [e["namespace"] for e in entries])


# -- the open batch
def batch_page(status: dict, figures: dict, why: dict, namespaces: list, actions: bool,
               quality: Optional[dict] = None) -> str:
    """`figures`: the page's own (reporting/batch_figures.py: failure reasons, bytes, 304s, what a re-crawl found,
    the chart's points); `quality`: Dashboard.last_quality's answer (the last closed batch's, or why it cannot
    be read)."""
    batch, tasks, queue = status["batch"], status["tasks"], status["queue"]
    parts = [f'<p class="missing">MISSING {esc(reason)}</p>'
             for reason in [*status["unreachable"], *figures["unreachable"]]]
    if status["paused_since"] is not None:
        parts.append(f'<p class="paused" id="paused">Paused since {_when(status["paused_since"])}: nothing is '
                     'claimed or leased</p>')
    if batch is None:
        parts.append('<p id="no-batch">No batch yet: the master opens the first one.</p>')
    else:
        state = "finished" if batch["is_done"] else "running"
        parts.append(f'<p class="batch">Batch <b id="batch-id">{esc(batch["id"])}</b>'
                     f'{" opened " + esc(batch["date"]) if batch["date"] else ""}, <span id="batch-state">{state}'
                     '</span></p>')
    parts.append(batch_calendar(status))
    if tasks is not None:
        parts.append(_progress(tasks, status, figures))
    if figures["failures"] and figures["failures"]["total"]:
        parts.append(_failure_reasons(status["namespace"], figures["failures"]))
    parts.append(f'<section><h2>Why it is not done</h2><p class="verdict" id="verdict">{esc(why["verdict"])}</p>'
                 f'{_why_details(why)}</section>')
    parts.append(f'<section><h2>Queue</h2><table class="figures"><tr><th>waiting</th><th>leased</th></tr>'
                 f'<tr><td id="queue-waiting">{_figure(queue["waiting"])}</td>'
                 f'<td id="queue-leased">{_figure(queue["leased"])}</td></tr></table></section>')
    parts.append(_workers(status))
    if quality is not None:
        parts.append(_quality_summary(status["namespace"], quality))
    if actions:
        parts.append(_actions())
    return page(f"Batch {batch['id']}" if batch else "No batch yet", status["namespace"], "", "".join(parts),
                namespaces, actions)


def batch_calendar(status: dict) -> str:
    """When the next batch is due; the hosts that wait for their crawl hours, and until when."""
    next_batch, shown = status.get("next_batch"), []
    if next_batch is not None and next_batch["due"]:
        schedule = next_batch["schedule"]
        rule = f'BATCH_SCHEDULE <code>{esc(schedule)}</code>' if schedule else "BATCH_INTERVAL"
        shown.append(f'<p id="next-batch">Next batch due <b>{esc(next_batch["due"])}</b> ({rule})</p>')
    waiting = status.get("hosts_waiting") or []
    if waiting:
        rows = "".join(f'<tr><td>{"every host" if w["hosts"] == "*" else esc(w["hosts"])}</td>'
                       f'<td>{esc(w["until"])}</td><td>{esc(", ".join(w["windows"]))}</td></tr>' for w in waiting)
        shown.append('<table class="figures" id="hosts-waiting"><tr><th>waiting for its crawl hours</th><th>until</th>'
                     f'<th>crawl hours</th></tr>{rows}</table>')
    return "".join(shown)


def _progress(tasks: dict, status: dict, figures: dict) -> str:
    finished = bool(status["batch"] and status["batch"]["is_done"])     # its chart ends at its close, not now
    figures_table = _figures_table([("total", tasks["total"]), ("settled", tasks["settled"]), ("done", tasks["done"]),
                                    ("failed", tasks["failed"]), ("pending", tasks["pending"]),
                                    ("processing", tasks["processing"])])
    measured = (status["rate"], status["rate_seconds"]) if status["rate"] is not None else None
    pace = ('<b id="rate">finished</b>' if finished else
            f'<b id="rate">{esc(rate_text(measured))}</b>; ETA <b id="eta">{esc(duration(status["eta_seconds"]))}</b>')
    bar = charts.bar(tasks["done"] or 0, tasks["failed"] or 0, tasks["total"])
    life = figures["life"]
    chart = charts.progress([tuple(point) for point in life["points"]] if life else [], tasks["total"],
                            None if finished else status["time"], life["drawn_from"] if life else None)
    return (f'<section><h2>Progress</h2><div id="progress-bar">{bar}</div>{_bar_legend(tasks)}{figures_table}'
            f'{_crawl_figures(figures)}<p>{pace}</p>'
            f'<h3>Tasks settled over the batch\'s life</h3><div id="progress-chart">{chart}</div>'
            f'<p id="chart-source">{esc(_chart_source(life, finished))}</p></section>')


def _figures_table(figures: list) -> str:
    """A row of (name, value) under their names; each value's cell has the name as its id."""
    head = "".join(f"<th>{name}</th>" for name, _ in figures)
    cells = "".join(f'<td id="{name.replace(" ", "-")}">{_figure(value)}</td>' for name, value in figures)
    return f'<table class="figures"><tr>{head}</tr><tr>{cells}</tr></table>'


def _bar_legend(tasks: dict) -> str:
    """The bar's shares written out: a few failed tasks among many are a sliver, but their count is here."""
    if tasks["done"] is None:
        return ""
    to_go = tasks["total"] - tasks["done"] - tasks["failed"]
    failed_class = "failed-count" if tasks["failed"] else ""
    return (f'<p class="legend" id="bar-legend"><span class="done-count">{esc(tasks["done"])} done</span> · '
            f'<span class="{failed_class}" id="bar-failed">{esc(tasks["failed"])} failed'
            f'{_share_of(tasks["failed"], tasks["total"])}</span> · {esc(to_go)} to go</p>')


def _share_of(part: int, total: int) -> str:
    if not part or total <= 0:
        return ""
    share = 100 * part / total
    return esc(f" ({share:.1f}%)" if share >= 0.1 else " (under 0.1%)")


def _crawl_figures(figures: dict) -> str:
    """The responses' bytes and 304s, and what a re-crawl found of the tasks (new, changed, unchanged, gone)."""
    responses, found = figures["responses"], figures["found"]
    size = '<td id="bytes">-</td>' if responses is None else (
        f'<td id="bytes" title="{esc(responses["bytes"])} bytes">{esc(size_text(responses["bytes"]))}</td>')
    cells = [size, f'<td id="not-modified">{_figure(responses and responses["not_modified"])}</td>']
    cells += [f'<td id="found-{verdict}">{_figure(found[verdict] if found else None)}</td>' for verdict in VERDICTS]
    head = "".join(f"<th>{name}</th>" for name in ("bytes", "304s", *VERDICTS))
    return (f'<table class="figures" id="crawl-figures"><tr>{head}</tr><tr>{"".join(cells)}</tr></table>'
            + ('' if found else '<p class="note">No page was kept in this batch yet: new, changed, unchanged and '
                                'gone count the pages a re-crawl compares.</p>'))


def _chart_source(life: Optional[dict], finished: bool) -> str:
    if life is None:
        return "Not drawn: the batch's record keeps no close time, and the master's samples are gone."
    if life["drawn_from"] == "record":
        return ("Drawn from the batch's record: 0 settled at its opening, its settled tasks at its close (the "
                "master's samples went with its snapshot, and the store keeps nothing finer).")
    if finished:
        return "Drawn from the master's samples of the tally, up to the batch's close."
    return "Drawn from the master's samples of the tally, published with its snapshot."


def _failure_reasons(namespace: str, failures: dict) -> str:
    """The top failure reasons with their counts, each a link to its tasks on the failures page."""
    base = f"/ns/{quote(namespace, safe='')}/failures"
    rows = "".join(f'<tr><td class="reason"><a href="{base}?reason={quote(r["kind"], safe="")}">{esc(r["kind"])}'
                   f'</a></td><td>{esc(r["count"])}</td></tr>' for r in failures["reasons"])
    more = failures["kinds_total"] - len(failures["reasons"])
    others = f" ({more} more reasons there)" if more > 0 else ""
    return (f'<section id="failure-reasons"><h2>Why tasks failed</h2><table id="top-reasons"><tr><th>reason</th>'
            f'<th>tasks</th></tr>{rows}</table><p><a id="all-failures" href="{base}">All '
            f'{esc(failures["total"])} failed tasks on the Failures page</a>{esc(others)}</p></section>')


def _why_details(why: dict) -> str:
    parts = []
    tasks = why.get("tasks")
    if tasks:
        parts.append(f'<p>{esc(tasks["pending"])} pending (not claimed), {esc(tasks["queued"])} queued, '
                     f'{esc(tasks["leased"])} leased: {esc(tasks["leased_live"])} by live workers, '
                     f'{esc(tasks["leased_stalled"])} by stalled ones, {esc(tasks["leased_dead"])} by dead ones</p>')
    if why["waiting_on_hosts"]:
        parts.append("<p>Set aside, waiting on their host: " + ", ".join(
            f'{esc(row["host"])} {esc(row["waiting"])}' for row in why["waiting_on_hosts"]) + "</p>")
    for outage in why["outages"]:
        parts.append(f'<p class="missing">{esc(outage["host"])} {esc(outage["supervisor"])} waits for '
                     f'{esc(outage["backend"])} since {_when(outage["since"])} ({esc(outage["reason"])})</p>')
    if why["oldest"]:
        rows = "".join(f'<tr><td>{esc(t["task"])}</td><td>{esc(duration(t["held_seconds"]))}</td>'
                       f'<td>{esc(t["worker"] or "?")}</td><td>{esc(t["pid"])}</td><td>{esc(t["state"])}</td>'
                       f'<td>{esc(t["host"] or "?")}</td><td>{esc(duration(t["expires_in"]))}</td></tr>'
                       for t in why["oldest"])
        parts.append('<h3>Oldest in flight</h3><table id="oldest"><tr><th>task</th><th>held</th><th>worker</th>'
                     f'<th>pid</th><th>state</th><th>host</th><th>lease expires in</th></tr>{rows}</table>')
    return "".join(parts)


def _workers(status: dict) -> str:
    rows = []
    for host in status["hosts"]:
        outage = host.get("outage")
        waits = f'{esc(outage["backend"])} since {_when(outage["since"])}' if outage else "-"
        supervisor = esc(supervisor_name(host))
        for w in host["workers"] or [{}]:
            rows.append(f'<tr><td>{esc(host["host"])}</td><td>{supervisor}</td><td>{esc(w.get("name", "-"))}</td>'
                        f'<td>{esc(w.get("pid", "-"))}</td><td>{esc(w.get("tasks", "-"))}</td>'
                        f'<td>{esc(w.get("unflushed", "-"))}</td><td>{esc(w.get("done", "-"))}</td>'
                        f'<td>{esc(w.get("failed", "-"))}</td><td>{esc(_memory(w))}</td><td>{waits}</td></tr>')
    return (f'<section><h2>Workers</h2><p id="workers-alive">{esc(status["workers_alive"])} alive of '
            f'{esc(status["workers_wanted"])} wanted; {esc(status["unflushed"])} items unflushed</p>'
            '<table id="workers"><tr><th>host</th><th>supervisor</th><th>worker</th><th>pid</th><th>tasks in hand</th>'
            f'<th>unflushed</th><th>done</th><th>failed</th><th>memory</th><th>outage</th></tr>{"".join(rows)}</table>'
            '</section>')


def _memory(worker: dict) -> str:
    """212.4 MB (browsers 160.2 MB): the worker's process tree as its supervisor measured it (batchd status's words)."""
    if "memory" not in worker:
        return "-"
    return f'{size_text(worker["memory"])} (browsers {size_text(worker["browser_memory"])})'


def _quality_summary(namespace: str, answer: dict) -> str:
    """The last closed batch's flags, the first FLAGS_ON_BATCH_PAGE of them, and a link to its table."""
    quality = answer.get("quality")
    if quality is None:
        said = (f'<p class="missing">MISSING {esc(answer["unread"])}</p>' if "unread" in answer else
                "<p id=\"quality-outcome\">No batch has closed yet: a batch's data is judged at its close.</p>")
        return f'<section id="quality"><h2>Quality</h2>{said}</section>'
    link = f'/ns/{quote(namespace, safe="")}/quality?batch={quality["batch"]}'
    flags = quality["flags"]
    items = "".join(f'<li class="flag" data-kind="{esc(f["kind"])}">{esc(f["message"])}</li>'
                    for f in flags[:FLAGS_ON_BATCH_PAGE])
    more = f'<p>… and {len(flags) - FLAGS_ON_BATCH_PAGE} more.</p>' if len(flags) > FLAGS_ON_BATCH_PAGE else ""
    return (f'<section id="quality"><h2>Quality of batch {esc(quality["batch"])}</h2>'
            f'<p id="quality-outcome">{esc(outcome_line(quality))} · <a href="{link}">per host and field</a></p>'
            f'<ul id="batch-flags">{items}</ul>{more}</section>')


def _actions() -> str:
    buttons = "".join(f'<button type="button" data-action="{name}">{label}</button>'
                      for name, label in (("pause", "Pause"), ("resume", "Resume"), ("open-batch", "Open batch")))
    return f'<section class="actions"><h2>Actions</h2>{_token_field(buttons)}</section>'


def _token_field(buttons: str = "") -> str:
    """The token's field (app.js keeps what is typed in the tab's sessionStorage), the buttons beside it, and
    where an action's answer is shown."""
    return (f'<p><label>Token <input id="token" type="password" autocomplete="off"></label> {buttons}</p>'
            '<p id="action-result" role="status"></p>')


# -- hosts, failures, history
def hosts_page(report: dict, namespaces: list) -> str:
    parts = [f'<p class="missing">MISSING {esc(reason)}</p>' for reason in report["unreachable"]]
    rows = "".join(f'<tr><td>{esc(r["host"])}</td><td>{esc(r["waiting"])}</td><td>{esc(r["in_flight"])}</td>'
                   f'<td>{esc(r["done"])}</td><td>{esc(r["failed"])}</td><td>{_seconds(r["p50"])}</td>'
                   f'<td>{_seconds(r["p95"])}</td><td class="breaker-{esc(r["breaker"] or "closed")}">'
                   f'{esc(r["breaker"] or "-")}</td></tr>' for r in report["hosts"])
    parts.append('<table id="hosts"><tr><th>host</th><th>waiting</th><th>in flight</th><th>done</th><th>failed</th>'
                 f'<th>p50</th><th>p95</th><th>breaker</th></tr>{rows}</table>'
                 f'<p>The busiest {esc(report["top"])} hosts of batch {_figure(report["batch"])}; the rest count '
                 'as "other".</p>')
    return page("Hosts", report["namespace"], "hosts", "".join(parts), namespaces)


def _seconds(value) -> str:
    if value is None:
        return "-"
    return "&gt;30s" if value == float("inf") else esc(f"{value:g}s")


def failures_page(namespace: str, report: dict, namespaces: list, actions: bool) -> str:
    base, requeue = f"/ns/{quote(namespace, safe='')}/failures", actions and report["open"]
    kinds = "".join(f'<tr><td><a href="{base}?reason={quote(k["kind"], safe="")}">{esc(k["kind"])}</a></td>'
                    f'<td>{esc(k["count"])}</td>{_requeue_button(k["kind"]) if requeue else ""}</tr>'
                    for k in report["kinds"])
    rows = "".join(f'<tr><td>{esc(f["task_id"])}</td><td class="url">{esc(f["url"])}</td>'
                   f'<td class="reason">{esc(f["reason"])}</td><td>{esc(f["attempts"])}</td>'
                   f'<td>{esc(f["time"])}</td></tr>' for f in report["failures"])
    which = f' whose reason holds “{esc(report["reason"])}”' if report["reason"] else ""
    body = (f'<p id="failed-total">Batch {_figure(report["batch"])}: {esc(report["total"])} failed tasks{which}</p>'
            f'<table id="kinds"><tr><th>reason</th><th>tasks</th></tr>{kinds}</table>'
            '<h2>Tasks</h2><table id="failures"><tr><th>task</th><th>URL</th><th>reason</th><th>attempts</th>'
            f'<th>time</th></tr>{rows}</table>{_token_field() if requeue else ""}')
    return page("Failures", namespace, "failures", body, namespaces, actions)


def _requeue_button(kind: str) -> str:
    return f'<td><button type="button" data-action="requeue" data-reason="{esc(kind)}">Requeue</button></td>'


def history_page(namespace: str, entries: list, namespaces: list) -> str:
    oldest_first = list(reversed(entries))
    names = [str(e["id"]) for e in oldest_first]

    def chart(title: str, element_id: str, stacks: list, unit: str = "") -> str:
        drawn = charts.bars(title, names, [(css, [e[field] for e in oldest_first]) for css, field in stacks], unit)
        return f'<h2>{esc(title)}</h2><div id="{element_id}">{drawn}</div>'

    charts_html = (chart("Tasks per batch: done, failed", "history-tasks", [("done", "done"), ("failed", "failed")])
                   + chart("Duration", "history-duration", [("line-bar", "duration_seconds")], "s")
                   + chart("Items stored", "history-items", [("items", "items")]))
    rows = "".join(f'<tr><td>{esc(e["id"])}</td><td>{esc(e["mode"])}</td><td>{esc(e["opened"])}</td>'
                   f'<td>{esc(e["closed"] or ("" if e["is_done"] else "(running)"))}</td>'
                   f'<td>{esc(duration(e["duration_seconds"]) if e["duration_seconds"] is not None else "-")}</td>'
                   f'<td>{esc(e["done"])}</td><td>{esc(e["failed"])}</td><td>{esc(e["total"])}</td>'
                   f'<td>{_figure(e["items"])}</td></tr>' for e in entries)
    body = (charts_html + '<table id="history"><tr><th>batch</th><th>mode</th><th>opened</th><th>closed</th>'
            f'<th>duration</th><th>done</th><th>failed</th><th>total</th><th>items</th></tr>{rows}</table>')
    return page("History", namespace, "history", body, namespaces)


# -- a closed batch's quality
def quality_page(namespace: str, quality: Optional[dict], namespaces: list, words: str = "") -> str:
    """`quality` as reporting/quality_report.py gathers it; None: `words` say why there is none."""
    if quality is None:
        return page("Quality", namespace, "quality", f'<p id="quality-outcome">{esc(words)}</p>', namespaces)
    flags = "".join(f'<tr class="flag"><td>{esc(f["host"])}</td><td>{esc(f["kind"])}</td><td>{_figure(f["field"])}'
                    f'</td><td>{_share(f["now"], f["kind"])}</td><td>{_share(f["before"], f["kind"])}</td>'
                    f'<td class="reason">{esc(f["message"])}</td></tr>' for f in quality["flags"])
    earlier = (f' · <a id="earlier" href="/ns/{quote(namespace, safe="")}/quality?batch={quality["batch"] - 1}">'
               'the batch before</a>' if quality["batch"] > 1 else "")
    body = (f'<p id="quality-outcome">{esc(outcome_line(quality))}{earlier}</p>'
            '<section><h2>Flags</h2><table id="flags"><tr><th>host</th><th>rule</th><th>field</th><th>now</th>'
            f'<th>before</th><th>message</th></tr>{flags}</table></section>'
            f'<section><h2>Hosts × fields</h2><p>Each figure against its baseline (in brackets); a flagged '
            f'cell is marked, its flag in its tooltip.</p>{_host_field_table(quality)}</section>'
            f'{_render_choices(quality.get("render"))}')
    return page(f"Quality of batch {quality['batch']}", namespace, "quality", body, namespaces)


def _render_choices(rows: Optional[list]) -> str:
    """The hosts' render="auto" choices as they stand now (none learnt: no section)."""
    if rows is None:
        return ('<section id="render-choices"><h2>Rendered or plain</h2><p>The hosts\' render="auto" choices '
                'cannot be read now (the backend is unreachable).</p></section>')
    if not rows:
        return ""
    lines = "".join(f'<tr data-host="{esc(row["host"])}"><td>{esc(row["host"])}</td>'
                    f'<td class="choice">{esc(row["choice"])}</td><td>{esc(row["since"])}</td>'
                    f'<td>{esc(row["batch"])}</td><td class="reason">{esc(row["why"])}</td></tr>' for row in rows)
    return ('<section id="render-choices"><h2>Rendered or plain</h2><p>How each host\'s render="auto" pages '
            'are crawled now, as batchd learnt it: plain when a plain fetch gave the same items as a browser.</p>'
            '<table id="render-choices-table"><tr><th>host</th><th>crawled</th><th>since</th><th>batch</th>'
            f'<th>why</th></tr>{lines}</table></section>')


def _share(value, kind: str) -> str:
    """A flag's figure: a share as a percentage, a count (items, marked pages) as it is."""
    if value is None:
        return "-"
    return esc(f"{value:.0f}") if kind in ("items_drop", "block_marker") else esc(f"{value:.0%}")


def _host_field_table(quality: dict) -> str:
    keys = sorted({key for row in quality["hosts"] for key in (*row["coverage"], *row["coverage_before"])})
    one_table = len({key.partition(".")[0] for key in keys}) <= 1
    head = "".join(f'<th title="{esc(key)}">{esc(key.partition(".")[2] if one_table else key)}</th>' for key in keys)
    marks = _flag_marks(quality["flags"])
    rows = []
    for row in quality["hosts"]:
        host = row["host"]

        def cell(where: str, text: str, field: str = "") -> str:
            said = marks.get((host, where, field))
            mark = f' class="flagged" title="{esc(said)}"' if said else ""
            return f'<td data-cell="{esc(where)}" data-field="{esc(field)}"{mark}>{text}</td>'

        coverage = "".join(cell("field", esc(against(row["coverage"].get(key), row["coverage_before"].get(key),
                                                     "{:.0%}")), key) for key in keys)
        rows.append(f'<tr data-host="{esc(host)}">{cell("host", esc(host))}'
                    f'{cell("items", esc(against(row["items"], row["items_before"], "{:.0f}")))}'
                    f'{cell("top-body", esc(against(row["top_body_share"], None, "{:.0%}")))}'
                    f'<td>{esc(row["kept"])}</td>{coverage}</tr>')
    return ('<table id="quality-hosts"><tr><th>host</th><th>items</th><th>top body</th><th>unchanged</th>'
            f'{head}</tr>{"".join(rows)}</table>')


def _flag_marks(flags: list) -> dict:
    """(host, cell, field) -> the messages of the flags marked there."""
    marks: dict = {}
    for f in flags:
        where = FLAG_CELLS.get(f["kind"], "host")
        key = (f["host"], where, f["field"] if where == "field" else "")
        marks[key] = f"{marks[key]}; {f['message']}" if key in marks else f["message"]
    return marks
