"""The text and the JSON `batchd failed` prints: a batch's failed tasks, counted by kind, then listed in a
table. The report comes gathered from reporting/failed_tasks.py (the dashboard's failures page draws the same
report its own way).
"""
import json
from urllib.parse import urlsplit

from ..service.systemd import counted
from .status_text import render_table


def render_json(report: dict) -> str:
    """The report as scripts read it (`batchd failed --json`): dates as text, keys in the report's order."""
    return json.dumps(report, default=str, indent=2)


# (title, field, widest): a column is as wide as its widest cell, up to `widest`. The site is the host the task
# crawled (from its URL); the worker, the machine whose worker recorded the failure (the record's `host`).
COLUMNS = (("id", "task_id", 20), ("time", "time", 19), ("tries", "attempts", 5), ("site", "site", 30),
           ("url", "url", 60), ("reason", "reason", 100), ("worker", "host", 24))


def render_text(report: dict) -> str:
    if report["batch"] is None:
        return "no batch has been opened yet: no task has failed"
    which = "failed task" if report["still_failed"] else "failure record"
    matching = f" whose reason holds {report['reason']!r}" if report["reason"] else ""
    state = "open" if report["open"] else "closed"
    head = f"batch {report['batch']} ({state}): {counted(report['total'], which)}{matching}"
    if not report["total"]:
        return head
    lines = [head + ": " + ", ".join(f"{k['count']} {k['kind']}" for k in report["kinds"]), ""]
    rows = [tuple(_cell(cells[field], widest) for _, field, widest in COLUMNS)
            for cells in (dict(record, site=_site(record["url"])) for record in report["failures"])]
    lines.append(render_table(tuple(title for title, _, _ in COLUMNS), rows, text_columns=tuple(range(len(COLUMNS)))))
    if report["total"] > len(report["failures"]):
        lines.append(f"... {report['total'] - len(report['failures'])} more (--limit N shows more, --json for "
                     "scripts)")
    return "\n".join(lines)


def _site(url) -> str:
    return (urlsplit(url).hostname or "") if url else ""


def _cell(value, widest: int) -> str:
    text = "-" if value is None else (f"{value:%Y-%m-%d %H:%M:%S}" if hasattr(value, "strftime") else str(value))
    return text if len(text) <= widest else text[:widest - 1] + "…"
