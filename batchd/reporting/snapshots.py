"""What a supervisor publishes about itself: its snapshot on the queue's status board, and its STATUS= line.

supervisor_report.py makes the figures, once per report tick; this module says how they are written on the
board (SnapshotPublisher), how the words of its STATUS= line read (status_line), and how anyone reads a
snapshot back (samples_of, window_rate, freshest_master).

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
    workers                                 JSON: a list, each worker's name pid done failed items unflushed
                                            tasks silent, and its process tree's memory in bytes, memory
                                            (browsers included) browser_memory memory_measure (pss; rss or
                                            pss+rss where a process's PSS cannot be read): process_memory.py
    batch_id batch_settled batch_total      the master's view (a supervisor running one)
    batch_samples                           ... the batch's tally over the last RATE_WINDOW (below)
    batch_life                              ... and over its whole life, thinned to LIFE_POINTS (its chart)
    batch_is_done batch_done batch_failed batch_next_due   ... and, once the batch is over, its result
    batch_wait_until                        ... when the last host waiting for its crawl hours may go on (0: none)
    outage_backend outage_since outage_reason       what its children wait for (only during an outage)

`batchd status` reads these snapshots back (reporting/status.py gathers them, cli/status_text.py lays them
out), with the words and figures of this module (paused_text, duration, eta, rate_text), so the journal's
STATUS= line, the command and the dashboard say the same.

The batch's rate and ETA are the tally's as it stands, not the master's last patrol (whose figures
are as old as BATCH_MONITOR_INTERVAL). The supervisor running the master reads the tally (the
BatchTally port: settled tasks, counted as write-backs land) at every snapshot and keeps the
samples, (Unix time, settled), back to the first one at least RATE_WINDOW old: `batch_samples`, a
JSON list (SettledSamples). Whoever reads the snapshot (`batchd status` in another process, STATUS=
of this supervisor and of the worker supervisors on other hosts) takes the rate over the window
from them (window_rate) and the ETA from it. Why there: the tally is the one count of the batch
that every backend keeps exactly as tasks settle, and the snapshot is already written every
STATUS_INTERVAL and read by every view, so one series serves them all, measured on one clock (the
sampling host's), whatever BATCH_MONITOR_INTERVAL is and whoever asks. The rate is as of the
newest sample: at most STATUS_INTERVAL old.
"""
import collections
import json
import logging
import time
from typing import Optional

from ..backends import open_supervisor_ports
from ..hosts.counts import bounded_rows, breaker_phases, host_rows
from ..backends.ports import SupervisorPorts

log = logging.getLogger("batchd.status")

PUBLISH_TIMEOUT = 1.0        # the supervisor's loop must not wait on a slow Redis for longer
MIN_SNAPSHOT_TTL = 10.0
RATE_WINDOW = 30.0           # seconds of the tally behind a batch's rate and ETA
MAX_SAMPLES = 30             # samples kept within the window: closer ones replace each other
LIFE_POINTS = 120            # samples of a batch's whole life kept for its chart (batch_life), at most


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


class SettledSamples:
    """One batch's tally as the supervisor running the master read it: (Unix time, settled) pairs, back to
    the first one at least RATE_WINDOW old (the window's start). A sample closer than RATE_WINDOW / MAX_SAMPLES
    to the one before the newest replaces the newest: any two in a row span that much, so a short
    STATUS_INTERVAL keeps at most 2 * MAX_SAMPLES + 2 of them."""

    def __init__(self):
        self.batch_id = 0
        self.samples: collections.deque = collections.deque()
        self.life: list = []                 # the batch's whole life, thinned (LIFE_POINTS)
        self.life_spacing = 0.0              # seconds between the points kept in it

    def add(self, batch_id: int, when: float, settled: int) -> None:
        if batch_id != self.batch_id:        # a new batch: its window starts with it
            self.batch_id, self.samples, self.life, self.life_spacing = batch_id, collections.deque(), [], 0.0
        sample = (round(when, 3), settled)
        self._add_to_life(sample)
        if len(self.samples) >= 2 and when - self.samples[-2][0] < RATE_WINDOW / MAX_SAMPLES:
            self.samples[-1] = sample
        else:
            self.samples.append(sample)
        while len(self.samples) > 2 and self.samples[1][0] <= when - RATE_WINDOW:
            self.samples.popleft()

    def close(self, when: float, settled: int) -> None:
        """The batch is over with `settled` tasks: its life ends there (once)."""
        if self.life and self.life[-1][1] != settled:
            self._add_to_life((round(when, 3), settled))

    def _add_to_life(self, sample: tuple) -> None:
        """A sample joins the life when it is `life_spacing` after the one before the newest, else it replaces
        the newest (which so stays fresh). Past LIFE_POINTS every other one goes, the first and the newest
        staying, and the spacing becomes the mean gap left: a batch of days is drawn from as many points as
        one of minutes, evenly spaced over its whole life."""
        if len(self.life) >= 2 and sample[0] - self.life[-2][0] < self.life_spacing:
            self.life[-1] = sample
        else:
            self.life.append(sample)
        if len(self.life) > LIFE_POINTS:
            newest = self.life[-1]
            self.life = self.life[:-1:2] + [newest]
            self.life_spacing = (newest[0] - self.life[0][0]) / (len(self.life) - 1)

    def field(self) -> str:
        return json.dumps([list(sample) for sample in self.samples])

    def life_field(self) -> str:
        return json.dumps([list(sample) for sample in self.life])


def samples_of(snapshot: Optional[dict], field: str = "batch_samples") -> list:
    """The snapshot's batch_samples (or batch_life) as (time, settled) pairs; [] when it has none (an older
    batchd)."""
    try:
        return [(float(t), int(n)) for t, n in json.loads((snapshot or {}).get(field) or "[]")]
    except (ValueError, TypeError):
        return []


def window_rate(samples: list) -> Optional[tuple]:
    """(settled tasks per second, seconds measured) from the last sample at least RATE_WINDOW before the
    newest (or the oldest, in a younger batch) to the newest; None before two samples."""
    if len(samples) < 2:
        return None
    end, end_settled = samples[-1]
    start, start_settled = next((s for s in reversed(samples) if s[0] <= end - RATE_WINDOW), samples[0])
    if end <= start:
        return None
    return max(0.0, (end_settled - start_settled) / (end - start)), end - start


def rate_text(measured: Optional[tuple]) -> str:
    """290.1 tasks/s over the last 30 s; 0.0 in a paused batch, or one where nothing settled meanwhile."""
    if measured is None:
        return "rate unknown yet"
    rate, seconds = measured
    return f"{rate:.1f} tasks/s over the last {seconds:.0f} s"


def supervisor_ports(settings, namespace: str) -> Optional[SupervisorPorts]:
    """The ports a supervisor publishes on and gives leases back through (Redis, or the SQLite file), with
    short timeouts: its loop must never wait long on them. None when there are none."""
    return open_supervisor_ports(settings, namespace, PUBLISH_TIMEOUT)


class SnapshotPublisher:
    """One supervisor's place on the board: writes its snapshot, reads what its report needs (the batch's
    tally, the master's snapshot, the counters per host); an outage costs a log line, never the supervisor."""

    def __init__(self, ports: SupervisorPorts, host: str, seat: str, interval: float):
        self.ports = ports
        self.key = f"{host}:{seat}"
        self.ttl = snapshot_ttl(interval)
        self._failing = False
        self._hosts_failing = False

    def publish(self, snapshot: dict) -> None:
        fields = {k: str(v) for k, v in snapshot.items() if v is not None}
        self._guarded("publish the status snapshot", self.ports.board.write_status, self.key, fields, self.ttl)

    def settled(self, batch_id: int) -> Optional[int]:
        """The batch's settled tasks by its tally now; None while the tally cannot be read or is not held."""
        tally = self._guarded("read the batch's tally", self.ports.tally.settled, batch_id)
        return None if tally is None else sum(tally)

    def master_view(self) -> Optional[dict]:
        """The batch as the master's supervisor last published it, wherever it runs."""
        return freshest_master(self._guarded("read the master's snapshot", self.ports.board.read_statuses) or [])

    @property
    def reachable(self) -> bool:
        """Its last read or write of the board went through."""
        return not self._failing

    def hosts(self, batch_id: int, top: int) -> Optional[list]:
        """The batch's `top` busiest hosts and OTHER as rows (hosts/counts.py), for /metrics; None
        while the counters cannot be read (one WARNING until they can)."""
        ports = self.ports
        try:
            breakers = breaker_phases(ports.breakers) if ports.breakers is not None else {}
            rows = host_rows(dict(ports.counters.host_counts(batch_id)), ports.counters.host_gauges(), breakers)
        except Exception as e:    # /metrics shows what it can: no failure here may fail a scrape
            if not self._hosts_failing:
                log.warning("cannot read the counters per host for /metrics: %s", e)
            self._hosts_failing = True
            return None
        self._hosts_failing = False
        return bounded_rows(rows, top)

    def withdraw(self) -> None:
        self._guarded("remove the status snapshot", self.ports.board.delete_status, self.key)

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
    paused_since = float((batch or {}).get("batch_paused_since") or 0)
    if paused_since:
        parts.append(f"paused since {paused_text(paused_since)}")
    if snapshot.get("outage_since"):
        since = time.strftime("%H:%M:%S", time.localtime(float(snapshot["outage_since"])))
        parts.append(f"waiting for {snapshot['outage_backend']} since {since} ({snapshot['outage_reason']})")
    if batch and int(batch.get("batch_is_done", 0)):
        parts.append(f"batch {batch['batch_id']} finished: {batch['batch_done']} done, {batch['batch_failed']} "
                     f"failed of {batch['batch_total']}; next due {batch['batch_next_due']}")
    elif batch:
        samples, total = samples_of(batch), int(batch["batch_total"])
        settled = samples[-1][1] if samples else int(batch["batch_settled"])
        measured = window_rate(samples)
        rate = measured[0] if measured and not paused_since else None      # paused: no ETA
        parts.append(f"batch {batch['batch_id']} {settled}/{total} ({rate_text(measured)}, "
                     f"ETA {duration(eta(total - settled, rate))})")
    else:
        parts.append("batch ?")
    if int(snapshot["workers_wanted"]) or snapshot["role"] != "master":
        parts.append(f"workers {snapshot['workers_alive']}/{snapshot['workers_wanted']} alive, "
                     f"{snapshot['done']} done {snapshot['failed']} failed here ({float(snapshot['rate']):.1f}/s)")
    parts.append(f"{snapshot['unflushed']} unflushed items")
    return f"{who}: " + ", ".join(parts)
