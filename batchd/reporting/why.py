"""Why the open batch is not finished yet, in one place, gathered as plain data (`batchd status --why`, the
dashboard's batch page).

From the sources `batchd status` reads (reporting/status.py gather_status: the batch record, its tally, the
queue, the supervisors' snapshots) and three more reads, none of the task table: the leases as they stand
(LeaseQueue.held_leases: counted by holder, the oldest with their age), the workers' gauges per host
(tasks set aside waiting on a host: hosts/counts.py) and the batch's failure records, by kind.

A lease's token names the worker process that took it (worker/prefetch.py worker_token_prefix: host:pid:),
so a holder is matched with the worker a supervisor's snapshot lists on that host with that pid:

    live      listed, and renewing its leases (a worker renews them every quarter of BATCH_LOST_TASK_STALE)
    stalled   listed, but its leases went unrenewed for two such quarters and a second (stopped, hung)
    dead      no snapshot lists it and its leases are not renewed: its supervisor replaced it, or its
              supervisor's snapshot is gone with its host; the leases come back when they expire
    unlisted  no snapshot lists it but its leases are renewed: a worker run without a supervisor

`gather_why` gives it all as data, with a one-line `verdict` (cli/status_text.py lays it out as text). Host
names, worker names and failure kinds came from a crawl or a host: the verdict shows them with control
characters escaped. No URL is named (a task is named by its id).
"""
import time
from typing import Optional

from ..errors import BackendUnavailable, ConfigError
from ..model import FailureQuery
from ..service.systemd import counted, escape_controls
from ..schedule import due_text
from .snapshots import duration, paused_text
from .failed_tasks import summary as failure_summary
from .status import gather_status, read_or_note, supervisor_name

OLDEST_SHOWN = 5        # tasks in flight listed, the longest held first
HOSTS_SHOWN = 5         # hosts with tasks set aside, the most first
KINDS_SHOWN = 3         # kinds of failure named
LIVE, STALLED, DEAD, UNLISTED = "live", "stalled", "dead", "unlisted"


def gather_why(runtime) -> dict:
    """Why the batch stands where it does, as plain data, with a one-line `verdict`."""
    status = gather_status(runtime)
    unreachable = list(status["unreachable"])
    batch, backend = status["batch"], runtime.backend
    why = {"namespace": runtime.namespace, "unreachable": unreachable, "batch": batch, "time": status["time"],
           "paused_since": status["paused_since"], "workers_alive": status["workers_alive"],
           "outages": _outages(status["hosts"]), "next_due": None, "tasks": None, "holders": [], "oldest": [],
           "waiting_on_hosts": [], "failures": [], "eta_seconds": status["eta_seconds"],
           "hosts_waiting": status["hosts_waiting"]}
    reached = status["store_reached"]       # else the batch is the master's last word on it, and no record is read
    if batch is not None and batch["is_done"]:
        why["next_due"] = _next_due(runtime, status) if reached else None
    elif batch is not None:
        lease_seconds = runtime.settings.BATCH_LOST_TASK_STALE
        view = read_or_note(unreachable, lambda: backend.leases.held_leases(OLDEST_SHOWN))
        workers = _listed_workers(status["hosts"])
        holders = [_holder(name, count, expires_in, workers, lease_seconds)
                   for name, (count, expires_in) in (view.holders.items() if view else ())]
        holders.sort(key=lambda h: (h["state"] == LIVE, -h["leases"], h["holder"]))
        by_name = {h["holder"]: h for h in holders}
        why["holders"] = holders
        why["oldest"] = [_in_flight(lease, by_name) for lease in (view.oldest if view else ())]
        why["tasks"] = _task_counts(status, holders)
        gauges = read_or_note(unreachable, backend.counters.host_gauges) or {}
        why["waiting_on_hosts"] = _waiting_hosts(gauges)
        why["failures"] = _failure_kinds(runtime, batch["id"], unreachable) if reached else []
    why["verdict"] = verdict(why, runtime.settings.BATCH_LOST_TASK_STALE)
    return why


def _outages(hosts: list) -> list:
    return [{"host": h["host"], "supervisor": supervisor_name(h), **h["outage"]} for h in hosts if h.get("outage")]


def _next_due(runtime, status: dict) -> Optional[str]:
    """When the next batch is due, by the batch record and BATCH_INTERVAL or BATCH_SCHEDULE (as the master reckons it)."""
    try:
        record = runtime.store.last_batch()
    except BackendUnavailable:
        record = None
    if record is not None:
        return due_text(record, runtime.settings, runtime.store)
    return None


def _listed_workers(hosts: list) -> dict:
    """(host, pid) -> the worker a supervisor's snapshot lists, with its supervisor's name."""
    return {(h["host"], int(w["pid"])): {"worker": w["name"], "supervisor": supervisor_name(h),
                                          "beat_seconds_ago": w.get("silent")}
            for h in hosts for w in h["workers"]}


def _holder(name: str, count: int, expires_in: float, workers: dict, lease_seconds: float) -> dict:
    host, _, rest = name.partition(":")
    pid_text = rest.partition(":")[0]
    pid = int(pid_text) if pid_text.isdigit() else None
    listed = workers.get((host, pid))
    renewing = lease_seconds - expires_in <= 2 * max(0.2, lease_seconds / 4) + 1
    state = (LIVE if renewing else STALLED) if listed else (UNLISTED if renewing else DEAD)
    return {"holder": name, "host": host, "pid": pid, "state": state, "leases": count,
            "expires_in": round(expires_in, 1), **(listed or {"worker": None, "supervisor": None})}


def _in_flight(lease, holders: dict) -> dict:
    holder = holders.get(lease.token[:lease.token.rfind(":") + 1] or lease.token, {})
    return {"task": lease.key, "host": holder.get("host"), "pid": holder.get("pid"), "worker": holder.get("worker"),
            "state": holder.get("state"), "held_seconds": None if lease.held is None else round(lease.held, 1),
            "expires_in": round(lease.expires_in, 1)}


def _task_counts(status: dict, holders: list) -> Optional[dict]:
    tasks, queue = status["tasks"], status["queue"]
    if tasks is None:
        return None
    leased = {state: sum(h["leases"] for h in holders if h["state"] == state)
              for state in (LIVE, STALLED, DEAD, UNLISTED)}
    return {"total": tasks["total"], "settled": tasks["settled"], "done": tasks["done"], "failed": tasks["failed"],
            "pending": tasks["pending"], "queued": queue["waiting"], "leased": queue["leased"],
            **{f"leased_{state}": n for state, n in leased.items()}}


def _waiting_hosts(gauges: dict) -> list:
    rows = [{"host": host, "waiting": int(fields.get("waiting", 0)), "in_flight": int(fields.get("in_flight", 0))}
            for host, fields in gauges.items() if int(fields.get("waiting", 0)) > 0]
    rows.sort(key=lambda row: (-row["waiting"], row["host"]))
    return rows[:HOSTS_SHOWN]


def _failure_kinds(runtime, batch_id: int, unreachable: list) -> list:
    try:
        groups = read_or_note(unreachable, lambda: runtime.store.failure_groups(FailureQuery(batch_id))) or []
    except ConfigError:      # a store that keeps no failure records: the tally's count stands alone
        return []
    return [{"kind": kind, "count": count} for kind, count in failure_summary(groups)[:KINDS_SHOWN]]


# -- the verdict
def verdict(why: dict, lease_seconds: float) -> str:
    """One line in plain words: the first reason that holds, in the order an operator would look."""
    batch, tasks = why["batch"], why["tasks"]
    if batch is None:
        return "cannot tell: " + "; ".join(why["unreachable"]) if why["unreachable"] else \
            "no batch yet: the master opens the first one"
    if batch["is_done"]:
        due = f"the next is due {why['next_due']}" if why["next_due"] else "the next is due when the calendar says"
        return f"batch {batch['id']} is finished: {due}"
    if why["paused_since"] is not None:
        return f"paused since {paused_text(why['paused_since'])}: nothing is leased until `batchd resume`"
    if why["outages"]:
        outage = min(why["outages"], key=lambda o: o["since"])
        return (f"the workers wait for {outage['backend']} since "
                f"{time.strftime('%H:%M:%S', time.localtime(outage['since']))} ({escape_controls(outage['reason'])})")
    if tasks is None:
        return "cannot tell: " + "; ".join(why["unreachable"])
    lost = [h for h in why["holders"] if h["state"] in (DEAD, STALLED)]
    if lost:
        return _lost_words(lost, lease_seconds)
    remaining = tasks["total"] - tasks["settled"]
    if remaining <= 0:
        return "every task is settled: the master closes the batch at its next patrol"
    # Nothing in the queue nor leased while hosts wait for their hours: the master holds their tasks back.
    if not tasks["queued"] and not tasks["leased"] and why.get("hosts_waiting"):
        shown = ", ".join(f"{'every host' if w['hosts'] == '*' else escape_controls(w['hosts'])} until {w['until']}"
                          for w in why["hosts_waiting"])
        return f"{counted(tasks['pending'], 'task')} pending, hosts outside their crawl hours: {shown} (CRAWL_HOURS)"
    if why["workers_alive"] == 0 and not any(h["state"] == UNLISTED for h in why["holders"]):
        return "the workers are idle: none alive"
    set_aside = sum(row["waiting"] for row in why["waiting_on_hosts"])
    if set_aside and set_aside * 2 >= (tasks["leased"] or 0):
        top = why["waiting_on_hosts"][0]
        return (f"{counted(set_aside, 'task')} in hand wait on their hosts' turn (most on {escape_controls(top['host'])}: "
                f"{top['waiting']}): DOMAIN_RATE_LIMIT, the hosts' terms or their breakers pace them")
    if not tasks["queued"] and not tasks["leased"]:
        return f"{counted(tasks['pending'], 'task')} wait to be claimed: the master claims them at its next patrol"
    return (f"working: {counted(tasks['leased'], 'task')} in flight with "
            f"{counted(why['workers_alive'], 'worker')} alive, "
            f"{remaining} to go, ETA {duration(why['eta_seconds'])}")


def _lost_words(lost: list, lease_seconds: float) -> str:
    first = lost[0]
    count = sum(h["leases"] for h in lost)
    who = (f"a dead worker (pid {first['pid']})" if first["state"] == DEAD
           else f"a stalled worker ({escape_controls(first['worker'] or '?')}, pid {first['pid']})")
    if len(lost) > 1:
        who += f" and {len(lost) - 1} more"
    expires_in = max(h["expires_in"] for h in lost)
    when = (f"their leases expire in {duration(expires_in)} (BATCH_LOST_TASK_STALE {lease_seconds:g} s)"
            if expires_in > 0 else "their leases are due: the master requeues them at its next patrol")
    return f"waiting on {counted(count, 'task')} held by {who} on host {escape_controls(first['host'])}: {when}"
