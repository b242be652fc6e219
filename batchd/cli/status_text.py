"""The text `batchd status` prints: the batch (`render_status`), `--hosts`, `--history`, `--why`, and `--json`.

The figures come gathered from reporting/ (status.py: gather_status, gather_hosts, gather_history; why.py:
gather_why); this module only lays them out for a terminal, so that the dashboard (web/html.py) draws the
same figures its own way. Names from a crawl or a host (hosts, workers, instances, failure kinds, task
keys) are shown with their control characters escaped.
"""
import json
import time
from typing import Optional

from ..hosts.counts import LATENCY_BOUNDS, OTHER
from ..recrawl.pages import VERDICTS
from ..reporting.snapshots import duration, paused_text, rate_text
from ..reporting.status import supervisor_name
from ..service.systemd import counted, escape_controls
from ..settle.batch_stats import size_text, summary


# Where the items are shown, how to get them out (a newcomer finds the verb here).
EXPORT_HINT = "export   batchd export -o items.jsonl (or .csv, .parquet; --batch N: one batch's rows)"

def render_json(data) -> str:
    return json.dumps(data, indent=2, sort_keys=True)


# -- `batchd status`

def render_status(status: dict) -> str:
    lines = [f"namespace {status['namespace']} (task table {status['table']})"]
    if status.get("config"):
        lines.append(f"config   {status['config']}")
    if status.get("spider"):
        lines.append(f"spider   {status['spider']}")
    lines += [f"MISSING  {reason}" for reason in status["unreachable"]]
    if status["paused_since"] is not None:
        lines.append(f"PAUSED   since {paused_text(status['paused_since'])}: nothing is claimed or leased "
                     "(batchd resume)")
    batch, tasks, queue = status["batch"], status["tasks"], status["queue"]
    if batch is None:
        lines.append("batch    none yet (the master opens the first one)" if status["store_reached"]
                     else "batch    unknown")
    else:
        opened = f" opened {batch['date']}" if batch["date"] else ""
        lines.append(f"batch    {batch_name(batch)}{opened}, {'finished' if batch['is_done'] else 'running'}")
    lines += _progress_lines(tasks)
    lines += calendar_lines(status)
    if status["counters"] is not None:
        lines.append(f"counters {summary(status['counters'])}")
    lines.append(f"items    in {status['items_in']}")
    lines.append(EXPORT_HINT)
    if status.get("quality") is not None:
        lines.append(quality_text(status["quality"]))
    if queue["waiting"] is not None:
        lines.append(f"queue    {queue['waiting']} waiting, {queue['leased']} leased")
    lines.append(f"rate     {pace_words(status)}")
    lines.append(f"workers  {status['workers_alive']} alive of {status['workers_wanted']} wanted: "
                 f"{workers_text(status['hosts'])}")
    for host in status["hosts"]:
        for w in host["workers"]:
            lines.append(f"  {escape_controls(host['host'])} {supervisor_name(host)}, {w['name']} "
                         f"(pid {w['pid']}): {w['done']} done, {w['failed']} failed, {w['items']} items, "
                         f"{counted(w['tasks'], 'task')} in hand, {w['unflushed']} unflushed, beat {w['silent']:.0f}s ago"
                         f"{worker_memory_text(w)}")
    if status.get("memory") is not None:
        lines.append(f"memory   {memory_text(status['memory'])}")
    lines.append(f"unflushed items {status['unflushed']}")
    return "\n".join(lines)


def calendar_lines(status: dict) -> list:
    """When the next batch is due, and the hosts waiting for their crawl hours (until when)."""
    lines = []
    next_batch = status.get("next_batch")
    if next_batch is not None:
        rule = f"BATCH_SCHEDULE {next_batch['schedule']!r}" if next_batch["schedule"] else "BATCH_INTERVAL"
        due = next_batch["due"] or "at once (no batch yet)"
        lines.append(f"next     batch due {due} ({rule})")
    for waiting in status.get("hosts_waiting") or ():
        hosts = "every host" if waiting["hosts"] == "*" else f"hosts {escape_controls(waiting['hosts'])}"
        lines.append(f"waiting  {hosts} until {waiting['until']} (crawl hours {', '.join(waiting['windows'])})")
    return lines


def worker_memory_text(worker: dict) -> str:
    """A worker line's tail, `, memory 212.0 MB (browsers 160.0 MB)`: its process tree (nothing from an older
    batchd)."""
    if "memory" not in worker:
        return ""
    return (f", memory {size_text(worker['memory'])} (browsers {size_text(worker['browser_memory'])})"
            f"{measure_words(worker['memory_measure'])}")


def memory_text(memory: dict) -> str:
    """Every worker listed, with its browsers: `424.0 MB in 2 workers, browsers 320.0 MB of it`."""
    return (f"{size_text(memory['bytes'])} in {counted(memory['workers'], 'worker')}, browsers "
            f"{size_text(memory['browsers'])} of it{measure_words(memory['measure'])}")


def measure_words(measure: str) -> str:
    """Nothing for PSS (what the figures are); said when some processes could only be read as RSS."""
    return {"pss": "", "rss": " (RSS)"}.get(measure, " (PSS, RSS where unreadable)")


def quality_text(quality: dict) -> str:
    """The one line on the last closed batch's data: "quality  2 flags (batch 4), see batchd quality"."""
    flags = quality["flags"]
    if not flags:
        return f"quality  clean (batch {quality['batch']})"
    return f"quality  {flags} flag{'' if flags == 1 else 's'} (batch {quality['batch']}), see batchd quality"


def pace_words(status: dict) -> str:
    """The batch's rate and ETA as of now (reporting/status.py, batch_pace): over the last 30 s while the
    master samples the tally, on average since the opening while none does, on average over the whole batch
    once it is over (and then no ETA)."""
    rate, seconds, basis = status["rate"], status["rate_seconds"], status.get("rate_basis")
    finished = bool(status["batch"] and status["batch"]["is_done"])
    if basis == "whole_batch" and seconds < 1:      # the record keeps whole seconds
        return f"at least {rate:.1f} tasks/s: it closed within the second it opened; finished, no ETA"
    if basis == "whole_batch":
        return f"{rate:.1f} tasks/s on average from its opening to its close ({duration(seconds)}); finished, no ETA"
    if finished:
        return "unknown (its record keeps no close time); finished, no ETA"
    if basis == "so_far":
        words = (f"{rate:.1f} tasks/s on average since it opened {duration(seconds)} ago (no supervised master "
                 "samples its tally)")
    elif rate is not None:
        words = rate_text((rate, seconds))
    elif status["rate_as_of"] is not None:
        words = "unknown yet (one sample of the tally so far)"
    elif status["batch"] is not None and status["store_reached"]:
        words = "unknown yet (the batch opened this very second)"
    else:
        words = "unknown (the store is not reached and no supervised master publishes one)"
    return f"{words}, ETA {duration(status['eta_seconds'])}"


def workers_text(hosts: list) -> str:
    """host vm — 2 workers (batchd-worker@1), the master (batchd-master); host vm2 — ...: what each host's
    supervisors run, named as their units are. Host and instance names are shown escaped."""
    by_host: dict = {}
    for entry in hosts:
        by_host.setdefault(entry["host"], []).append(f"{_runs(entry)} ({supervisor_name(entry)})")
    text = "; ".join(f"host {escape_controls(host)} — {', '.join(seats)}" for host, seats in by_host.items())
    return text or "none reporting"


def _runs(entry: dict) -> str:
    parts = []
    if entry["role"] != "master":
        alive, wanted = entry["workers_alive"], entry["workers_wanted"]
        parts.append(f"{alive}{'' if alive == wanted else f' of {wanted}'} worker{'' if wanted == 1 else 's'}")
    if entry["role"] != "worker":
        parts.append("the master" if entry["master_alive"] else "no master")
    return " and ".join(parts)


def _progress_lines(tasks: Optional[dict]) -> list:
    if tasks is None:
        return []
    if tasks["done"] is None:          # the store is down: the master's last word on it
        ago = duration(time.time() - tasks["as_of"])
        return [f"progress {tasks['settled']}/{tasks['total']} (the master's figures {ago} ago)"]
    return [f"{bar(tasks['done'], tasks['failed'], tasks['total'])} {tasks['settled']}/{tasks['total']}",
            f"progress {tasks['settled']}/{tasks['total']}: {tasks['done']} done, {tasks['failed']} failed, "
            f"{tasks['processing']} processing, {tasks['pending']} pending"]


def batch_name(batch: dict) -> str:
    """A batch as its lines name it: "12", or "14 (reparse of 12)" for a batch that parsed 12's archive again."""
    of = batch.get("reparse_of")
    return f"{batch['id']}" if of is None else f"{batch['id']} (reparse of {of})"


def bar(done: int, failed: int, total: int, width: int = 30) -> str:
    """[#####xx.....]: # done, x failed, . still to go."""
    if total <= 0:
        return "[" + "." * width + "]"
    filled = min(width, round(width * done / total))
    spoiled = min(width - filled, round(width * failed / total))
    return "[" + "#" * filled + "x" * spoiled + "." * (width - filled - spoiled) + "]"


# -- `batchd status --hosts`

HOST_COLUMNS = ("host", "waiting", "in flight", "done", "failed", "p50", "p95", "breaker")


def render_hosts(status: dict) -> str:
    """A line per host under a header; a host's name is crawled text, shown with its control characters
    escaped."""
    lines = [f"namespace {status['namespace']}, batch {status['batch'] if status['batch'] is not None else 'none yet'}"]
    lines += [f"MISSING  {reason}" for reason in status["unreachable"]]
    if not status["hosts"]:
        return "\n".join(lines + ["no host counted yet"])
    rows = [(escape_controls(row["host"]), str(row["waiting"]), str(row["in_flight"]), str(row["done"]),
             str(row["failed"]), _latency_text(row["p50"]), _latency_text(row["p95"]), row["breaker"] or "-")
            for row in status["hosts"]]
    lines.append(render_table(HOST_COLUMNS, rows, text_columns=(0, 7)))
    lines.append(f"(p50, p95: the top of the latency bucket; past the busiest {status['top']} hosts, {OTHER})")
    return "\n".join(lines)


def _latency_text(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:g}s" if seconds != float("inf") else f">{LATENCY_BOUNDS[-2]:g}s"


# -- `batchd status --history`

HISTORY_COLUMNS = ("batch", "mode", "opened", "closed", "duration", "opened with", "done", "failed", "total", "items",
                   *VERDICTS, "rate", "spider")


def render_history(entries: list) -> str:
    """One line per batch under a header, columns aligned; a blank where a figure is unknown, 0 where it is 0.
    A batch that closed within the second it opened (the record keeps whole seconds) has a rate of at least
    its tasks per second: `>=3.0/s`."""
    if not entries:
        return "no batch yet (the master opens the first one)"
    return render_table(HISTORY_COLUMNS, [_history_row(entry) for entry in entries],
                        text_columns=(1, 2, 3, len(HISTORY_COLUMNS) - 1))


def _history_row(entry: dict) -> tuple:
    def blank_or(value, shown) -> str:
        return "" if value is None else shown(value)
    mode = entry["mode"] if entry["reset_failed"] or entry["mode"] == "incremental" else f"{entry['mode']}, failed kept"
    if entry.get("reparse_of") is not None:
        mode = f"reparse of {entry['reparse_of']}"
    found = entry["found"] or {}
    return (str(entry["id"]), mode, entry["opened"], entry["closed"] or ("" if entry["is_done"] else "(running)"),
            blank_or(entry["duration_seconds"], duration), blank_or(entry["opened_with"], str), str(entry["done"]),
            str(entry["failed"]), str(entry["total"]), blank_or(entry["items"], str),
            *(blank_or(found.get(verdict), str) for verdict in VERDICTS),
            blank_or(entry["rate"], lambda rate: f"{'>=' if entry['duration_seconds'] < 1 else ''}{rate:.1f}/s"),
            blank_or(entry["spider"], _spider_mark))


def _spider_mark(spider: dict) -> str:
    """Where the spider changed ("code changed", "settings changed"), or --refetch; blank when it did not."""
    marks = [f"{'+'.join(spider['changed'])} changed"] if spider["changed"] else []
    return ", ".join(marks + (["--refetch"] if spider["forced"] else []))


def render_table(columns: tuple, rows: list, text_columns: tuple) -> str:
    """`rows` of cells under `columns`, aligned: the `text_columns` read left to right, figures line up on
    their right."""
    rows = [columns] + rows
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(width) if i in text_columns else cell.rjust(width)
                               for i, (cell, width) in enumerate(zip(row, widths))).rstrip() for row in rows)


# -- `batchd status --why`

def render_why(why: dict) -> str:
    lines = [f"namespace {why['namespace']}"]
    lines += [f"MISSING  {escape_controls(reason)}" for reason in why["unreachable"]]
    batch, tasks = why["batch"], why["tasks"]
    if batch is not None:
        opened = f" opened {batch['date']}" if batch["date"] else ""
        lines.append(f"batch    {batch_name(batch)}{opened}, {'finished' if batch['is_done'] else 'running'}")
    if why["paused_since"] is not None:
        lines.append(f"paused   since {paused_text(why['paused_since'])} (batchd resume)")
    for outage in why["outages"]:
        since = time.strftime("%H:%M:%S", time.localtime(outage["since"]))
        lines.append(f"outage   {escape_controls(outage['host'])} {outage['supervisor']} waits for "
                     f"{outage['backend']} since {since} ({escape_controls(outage['reason'])})")
    if tasks is not None:
        lines.append(f"tasks    {tasks['settled']}/{tasks['total']} settled ({tasks['done']} done, "
                     f"{tasks['failed']} failed); {tasks['pending']} pending (not claimed), {tasks['queued']} queued, "
                     f"{tasks['leased']} leased")
        unlisted = tasks["leased_unlisted"]
        lines.append(f"leased   {tasks['leased_live']} by live workers, {tasks['leased_stalled']} by stalled ones, "
                     f"{tasks['leased_dead']} by dead ones"
                     + (f", {unlisted} by workers no supervisor lists" if unlisted else ""))
    for h in why["holders"]:
        name = f"{escape_controls(h['worker'])} of {h['supervisor']}" if h["worker"] else "no supervisor lists it"
        lines.append(f"  {h['state']:<8} {escape_controls(h['host'])} pid {h['pid']} ({name}): {h['leases']} leases, "
                     f"{_expiry(h['expires_in'])}")
    if why["waiting_on_hosts"]:
        lines.append("set aside, waiting on their host: " + ", ".join(
            f"{escape_controls(row['host'])} {row['waiting']}" for row in why["waiting_on_hosts"]))
    if why["failures"]:
        lines.append("failed   " + ", ".join(f"{row['count']} {escape_controls(row['kind'])}"
                                              for row in why["failures"]))
    if why["oldest"]:
        lines += ["oldest in flight:", *map(_in_flight_line, why["oldest"])]
    lines.append(f"verdict  {why['verdict']}")
    return "\n".join(lines)


def _in_flight_line(task: dict) -> str:
    held = "held ?" if task["held_seconds"] is None else f"held {duration(task['held_seconds'])}"
    return (f"  task {escape_controls(task['task'])}: {held} by {escape_controls(task['worker'] or '?')} "
            f"(pid {task['pid']}, {task['state']}) on {escape_controls(task['host'] or '?')}, "
            f"{_expiry(task['expires_in'])}")


def _expiry(expires_in: float) -> str:
    return f"lease expires in {duration(expires_in)}" if expires_in > 0 else "lease due (requeued at the next patrol)"
