"""What a supervisor publishes about itself: its snapshot on the queue's status board, and its STATUS= line.

Each supervisor publishes a snapshot every STATUS_INTERVAL seconds on its queue's status
board (Redis: the hash `<ns>:status:<host>:<seat>`; SQLite: a row of batchd_status), with a
TTL of a few intervals, so a host that died drops out on its own. The seat is the verb, with
`@NAME` for a named instance: batchd-master@news and batchd-worker@news of one spider share a
namespace and a host, and must not overwrite each other's snapshot. Fields, all strings:

    role host instance pid updated          who, and when (Unix time)
    workers_alive workers_wanted master_alive
    done failed items                       tasks written back and items landed by its workers
    unflushed in_flight                     items in memory, tasks held (from the ledger)
    rate                                    its workers' settled tasks per second
    batch_id batch_settled batch_total batch_rate   the master's view (a supervisor running one)
    batch_is_done batch_done batch_failed batch_next_due   ... and, once the batch is over, its result
    outage_backend outage_since outage_reason       what its children wait for (only during an outage)

`batchd status` (cli/status.py) reads these snapshots back, with the words and figures of this
module (paused_text, duration, eta), so the journal's STATUS= line and the command say the same.
"""
import logging
import time
from typing import Optional

from ..backends import open_supervisor_ports
from ..backends.ports import SupervisorPorts

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


def supervisor_ports(settings, namespace: str) -> Optional[SupervisorPorts]:
    """The ports a supervisor publishes on and gives leases back through (Redis, or the SQLite file), with
    short timeouts: its loop must never wait long on them. None when there are none."""
    return open_supervisor_ports(settings, namespace, PUBLISH_TIMEOUT)


class SnapshotPublisher:
    """Writes one supervisor's snapshot on the board; an outage costs a log line, never the supervisor."""

    def __init__(self, ports: SupervisorPorts, host: str, seat: str, interval: float):
        self.ports = ports
        self.key = f"{host}:{seat}"
        self.ttl = snapshot_ttl(interval)
        self._failing = False

    def publish(self, snapshot: dict) -> None:
        fields = {k: str(v) for k, v in snapshot.items() if v is not None}
        self._guarded("publish the status snapshot", self.ports.board.write_status, self.key, fields, self.ttl)

    def master_view(self) -> Optional[dict]:
        """The batch as the master's supervisor last published it, wherever it runs."""
        return freshest_master(self._guarded("read the master's snapshot", self.ports.board.read_statuses) or [])

    def give_back_leases_of(self, token_prefix: str) -> int:
        """A dead worker's leases, due at once, and the master woken to requeue them."""
        given = self._guarded("give back a dead worker's leases", self.ports.leases.expire_leases_of, token_prefix) or 0
        if given:
            self._guarded("wake the master", self.ports.wake.wake_master)
        return given

    def withdraw(self) -> None:
        self._guarded("remove the status snapshot", self.ports.board.delete_status, self.key)

    def close(self) -> None:
        self.ports.close()

    def _guarded(self, what: str, action, *args):
        try:
            result = action(*args)
        except Exception as e:   # the board is a convenience: no failure of it may stop the supervisor
            if not self._failing:
                log.warning("cannot %s: %s (batchd status will not show this host until it works again)", what, e)
            self._failing = True
            return None
        if self._failing:
            log.info("status snapshots resume")
        self._failing = False
        return result


def paused_text(since: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))


def freshest_master(snapshots: list) -> Optional[dict]:
    masters = [s for s in snapshots if int(s.get("batch_id", 0) or 0) > 0]
    return max(masters, key=lambda s: float(s.get("updated", 0))) if masters else None


def status_line(who: str, snapshot: dict, batch: Optional[dict]) -> str:
    """One line for STATUS=: an outage first, then the batch (progress X/Y, rate; or, once it is over,
    its result and when the next is due), workers alive, unflushed items."""
    parts = []
    if batch and float(batch.get("batch_paused_since") or 0):
        parts.append(f"paused since {paused_text(float(batch['batch_paused_since']))}")
    if snapshot.get("outage_since"):
        since = time.strftime("%H:%M:%S", time.localtime(float(snapshot["outage_since"])))
        parts.append(f"waiting for {snapshot['outage_backend']} since {since} ({snapshot['outage_reason']})")
    if batch and int(batch.get("batch_is_done", 0)):
        parts.append(f"batch {batch['batch_id']} finished: {batch['batch_done']} done, {batch['batch_failed']} "
                     f"failed of {batch['batch_total']}; next due {batch['batch_next_due']}")
    elif batch:
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
