"""Where a batch stands: the supervisors' snapshots in Redis, their STATUS= line, `batchd status`.

Each supervisor publishes a snapshot every STATUS_INTERVAL seconds into the hash
`<ns>:status:<host>:<instance>` (key from `Keys.status`), with a TTL of a few intervals,
so a host that died drops out on its own. Fields, all strings:

    role host instance pid updated          who, and when (Unix time)
    workers_alive workers_wanted master_alive
    done failed items                       tasks written back and items landed by its workers
    unflushed in_flight                     items in memory, tasks held (from the ledger)
    rate                                    its workers' settled tasks per second
    batch_id batch_settled batch_total batch_rate   the master's view (a supervisor running one)

`gather_status` reads the store, the queue and every snapshot into one dict; `render_status`
turns it into text (`--json` prints the dict). Keeping the two apart lets another view (a
progress bar, a watch loop) reuse the gathering.
"""
import json
import logging
import time
from typing import Optional

from .queue.redis_queue import Keys, connect_redis

log = logging.getLogger("batchd.status")

PUBLISH_TIMEOUT = 1.0        # the supervisor's loop must not wait on a slow Redis for longer
MIN_SNAPSHOT_TTL = 10.0


def snapshot_ttl(interval: float) -> int:
    return int(max(MIN_SNAPSHOT_TTL, 3 * interval)) + 1


def duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "unknown"
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def eta(remaining: int, rate: Optional[float]) -> Optional[float]:
    if remaining <= 0:
        return 0.0
    return remaining / rate if rate else None


# -- the supervisor's side

class SnapshotPublisher:
    """Writes one supervisor's snapshot; a Redis outage costs a log line, never the supervisor."""

    def __init__(self, redis_url: str, namespace: str, host: str, instance: str, interval: float):
        self.keys = Keys(namespace)
        self.key = self.keys.status(host, instance)
        self.ttl = snapshot_ttl(interval)
        self.client = connect_redis(redis_url, timeout=PUBLISH_TIMEOUT)
        self._failing = False

    def publish(self, snapshot: dict) -> None:
        self._guarded("publish the status snapshot", self._write, snapshot)

    def _write(self, snapshot: dict) -> None:
        with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(self.key)
            pipe.hset(self.key, mapping={k: str(v) for k, v in snapshot.items() if v is not None})
            pipe.expire(self.key, self.ttl)
            pipe.execute()

    def master_view(self) -> Optional[dict]:
        """The batch as the master's supervisor last published it, wherever it runs."""
        snapshots = self._guarded("read the master's snapshot", read_snapshots, self.client, self.keys) or []
        return freshest_master(snapshots)

    def withdraw(self) -> None:
        self._guarded("remove the status snapshot", self.client.delete, self.key)

    def close(self) -> None:
        self.client.close()

    def _guarded(self, what: str, action, *args):
        import redis
        try:
            result = action(*args)
        except (redis.RedisError, OSError) as e:
            if not self._failing:
                log.warning("cannot %s: %s (batchd status will not show this host until Redis answers)", what, e)
            self._failing = True
            return None
        if self._failing:
            log.info("Redis answers again: status snapshots resume")
        self._failing = False
        return result


def read_snapshots(client, keys: Keys) -> list:
    snapshots = []
    for key in client.scan_iter(match=keys.status_pattern(), count=100):
        fields = client.hgetall(key)
        if fields:
            snapshots.append({k.decode(): v.decode() for k, v in fields.items()})
    return snapshots


def freshest_master(snapshots: list) -> Optional[dict]:
    masters = [s for s in snapshots if int(s.get("batch_id", 0) or 0) > 0]
    return max(masters, key=lambda s: float(s.get("updated", 0))) if masters else None


def status_line(who: str, snapshot: dict, batch: Optional[dict]) -> str:
    """One line for STATUS=: role, batch, progress X/Y, rate, workers alive, unflushed items."""
    parts = []
    if batch:
        settled, total, rate = int(batch["batch_settled"]), int(batch["batch_total"]), float(batch["batch_rate"])
        parts.append(f"batch {batch['batch_id']} {settled}/{total} ({rate:.1f} tasks/s, "
                     f"ETA {duration(eta(total - settled, rate))})")
    else:
        parts.append("batch ?")
    if int(snapshot["workers_wanted"]) or snapshot["role"] != "master":
        parts.append(f"workers {snapshot['workers_alive']}/{snapshot['workers_wanted']} alive, "
                     f"{snapshot['done']} done {snapshot['failed']} failed here ({float(snapshot['rate']):.1f}/s)")
    parts.append(f"{snapshot['unflushed']} unflushed items")
    return f"{who}: " + ", ".join(parts)


# -- `batchd status`

def gather_status(spider) -> dict:
    """Everything `batchd status` shows, as plain data: the store's counts, the queue, the snapshots."""
    store, queue, layout = spider.store, spider.queue, spider.layout
    store.open(layout)
    batch, progress = store.last_batch(), store.progress()
    client = getattr(queue, "redis", None)
    snapshots = read_snapshots(client, Keys(spider.namespace)) if client is not None else []
    master = freshest_master(snapshots)
    rate = float(master["batch_rate"]) if master else None
    remaining = progress.total - progress.settled
    return {
        "namespace": spider.namespace,
        "table": layout.table,
        "batch": None if batch is None else {"id": batch.id, "date": batch.batch_date.isoformat(sep=" "),
                                             "is_done": bool(batch.is_done)},
        "tasks": {"total": progress.total, "settled": progress.settled, "done": progress.done,
                  "failed": progress.failed, "processing": progress.processing, "pending": progress.pending},
        "queue": {"waiting": queue.pending_count(), "leased": queue.leased_count()},
        "rate": rate,
        "eta_seconds": eta(remaining, rate),
        "hosts": [_host_entry(s) for s in sorted(snapshots, key=lambda s: (s["host"], s["instance"]))],
        "workers_alive": sum(int(s.get("workers_alive", 0)) for s in snapshots),
        "unflushed": sum(int(s.get("unflushed", 0)) for s in snapshots),
        "time": time.time(),
    }


def _host_entry(snapshot: dict) -> dict:
    numbers = ("pid", "workers_alive", "workers_wanted", "master_alive", "done", "failed", "items",
               "unflushed", "in_flight")
    entry = {name: int(snapshot.get(name, 0)) for name in numbers}
    entry.update(host=snapshot["host"], instance=snapshot["instance"], role=snapshot["role"],
                 rate=float(snapshot.get("rate", 0)), seconds_ago=round(time.time() - float(snapshot["updated"]), 1))
    return entry


def render_status(status: dict) -> str:
    lines = [f"namespace {status['namespace']} (task table {status['table']})"]
    batch, tasks, queue = status["batch"], status["tasks"], status["queue"]
    if batch is None:
        lines.append("batch    none yet (the master opens the first one)")
    else:
        lines.append(f"batch    {batch['id']} opened {batch['date']}, {'finished' if batch['is_done'] else 'running'}")
    lines.append(f"progress {tasks['settled']}/{tasks['total']}: {tasks['done']} done, {tasks['failed']} failed, "
                 f"{tasks['processing']} processing, {tasks['pending']} pending")
    lines.append(f"queue    {queue['waiting']} waiting, {queue['leased']} leased")
    rate = "unknown (no supervised master publishes one)" if status["rate"] is None else f"{status['rate']:.1f} tasks/s"
    lines.append(f"rate     {rate}, ETA {duration(status['eta_seconds'])}")
    hosts = ", ".join(f"{h['host']} {h['workers_alive']} ({h['role']}@{h['instance']}"
                      f"{', master' if h['master_alive'] else ''})" for h in status["hosts"]) or "none reporting"
    lines.append(f"workers  {status['workers_alive']} alive: {hosts}")
    lines.append(f"unflushed items {status['unflushed']}")
    return "\n".join(lines)


def render_json(status: dict) -> str:
    return json.dumps(status, indent=2, sort_keys=True)
