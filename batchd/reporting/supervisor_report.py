"""What one supervisor reports, made once per report tick: the figures behind its snapshot on the status
board, its STATUS= line and its /metrics gauges.

The supervisor supervises and does not count. At each report tick (every STATUS_INTERVAL, and when it says
READY or STOPPING, or that a reload failed) it hands its report what it knows, `Supervised`: the ledger
block, its children, the workers it wants, what the children gone left behind, its restarts. `tick` reads
the rows, the batch's tally and the board once into one `SupervisorFigures`, writes the snapshot on the board
and gives back the STATUS= text, which the supervisor sends on. Every view reads those figures and works
none out:

    snapshot()         the fields on the board (snapshots.py lists them), for `batchd status` and other hosts
    status_text()      the STATUS= line (snapshots.py status_line)
    metric_figures()   the gauges of a /metrics scrape (metrics.py SupervisorCollector)

Each worker's memory, its browsers included, is measured apart (process_memory.py `MemoryWatch`, a thread of
its own: reading Chromium's PSS is too slow for the loop); the tick takes its last measurement, at most
STATUS_INTERVAL old (longer only when measuring would keep that thread busy more than MOST_BUSY of the time),
so a scrape or a `batchd status` costs the supervisor no read of its own.

A scrape runs on the metrics thread: the figures are replaced whole at each tick and never changed, so a
scrape sees one tick's figures, at most STATUS_INTERVAL old, and reads nothing the loop changes meanwhile.
"""
import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Mapping, Optional

from ..backends.ports import SupervisorPorts
from ..config import Settings
from ..settle.progress_rate import ProgressRate
from ..settle.ledger import LedgerBlock
from .metrics import MetricsServer
from .process_memory import MemoryWatch, TreeMemory
from .snapshots import SettledSamples, SnapshotPublisher, status_line

log = logging.getLogger("batchd.report")


@dataclass(frozen=True)
class SupervisedChild:
    """One child as its supervisor's report sees it."""

    role: str            # "master" or "worker"
    name: str            # as `batchd status` lists it: "worker 2"
    pid: int
    row: int             # its row of the LedgerBlock
    serving: bool        # False once it is told to stop (a warm stop, a reload's retirement)
    number: int = 0      # its seat: 2 for "worker 2" (a retiring worker and its successor share one)


@dataclass(frozen=True)
class Supervised:
    """What the supervisor knows at a report tick."""

    block: LedgerBlock
    children: tuple                  # SupervisedChild, every child alive
    workers_wanted: int
    ended: Mapping[str, int]         # what the children gone had done: done, failed, items
    restarts: Mapping[str, int]      # role -> children that ended unasked


@dataclass(frozen=True)
class BatchFigures:
    """The batch as this host's master last wrote it in its ledger row (its last patrol), and the samples of
    the batch's tally this report took."""

    id: int
    settled: int
    total: int
    is_done: int
    done: int
    failed: int
    next_due: str
    paused_since: float          # Unix time; 0.0: not paused
    queued: int                  # tasks in the queue after its last refill (/metrics only)
    wait_until: float = 0.0      # Unix time the last host waiting for its crawl hours may go on; 0.0: none waits
    samples: Optional[str] = None    # the tally over the last RATE_WINDOW, while the batch runs
    life: Optional[str] = None       # the tally over the batch's whole life, thinned (its chart)

    def fields(self) -> dict:
        """As the snapshot names them (a sample series this report did not take is no field)."""
        fields = {"batch_id": self.id, "batch_settled": self.settled, "batch_total": self.total,
                  "batch_is_done": self.is_done, "batch_done": self.done, "batch_failed": self.failed,
                  "batch_next_due": self.next_due, "batch_paused_since": self.paused_since,
                  "batch_wait_until": self.wait_until}
        series = {"batch_samples": self.samples, "batch_life": self.life}
        return {**fields, **{name: value for name, value in series.items() if value is not None}}


@dataclass(frozen=True)
class SupervisorFigures:
    """Everything one supervisor reports, as of one report tick."""

    namespace: str
    updated: float = 0.0           # Unix time of the tick
    workers_alive: int = 0         # its workers not told to stop
    workers_wanted: int = 0
    master_alive: int = 0          # 1 while a master not told to stop runs
    done: int = 0                  # tasks its workers wrote back, those gone included
    failed: int = 0
    items: int = 0                 # items its workers landed, those gone included
    unflushed: int = 0             # items in its workers' memory now
    in_flight: int = 0             # tasks its workers hold now
    rate: float = 0.0              # its workers' settled tasks per second
    workers: tuple = ()            # each worker as `batchd status` lists it, its memory included
    memory: Mapping[str, TreeMemory] = field(default_factory=dict)   # worker seat ("1") -> its workers' memory
    outages: tuple = ()            # (backends, since as Unix time, reason) of each child waiting for one
    restarts: Mapping[str, int] = field(default_factory=dict)
    batch: Optional[BatchFigures] = None     # this host's master's view; the last one's once it stopped
    master_view: Optional[dict] = None       # a worker-only supervisor: the master's snapshot on the board
    hosts: Optional[list] = None             # the batch's busiest hosts (hosts/counts.py rows), with /metrics

    def oldest_outage(self) -> Optional[tuple]:
        return min(self.outages, key=lambda outage: outage[1], default=None)

    def backends_down(self) -> set:
        """Every backend a child waits for (a row names several as `MySQL+Redis`)."""
        return {name for backends, _, _ in self.outages for name in backends.split("+")}


@dataclass(frozen=True)
class Reporter:
    """Who reports: the snapshot's identity and its seat on the board."""

    role: str            # the verb: "run", "master" or "worker"
    host: str
    instance: str        # the instance's key (its name, else the verb)
    seat: str            # "worker@news": the board keeps one snapshot per host and seat
    pid: int

    @property
    def runs_master(self) -> bool:
        return self.role != "worker"


def _worker_entry(block: LedgerBlock, child: SupervisedChild, memory: Optional[TreeMemory]) -> dict:
    """A worker as `batchd status` lists it; no memory fields for one that ended before it was measured."""
    return {"name": child.name, "pid": child.pid, **block.view(child.row),
            **(memory.fields() if memory is not None else {})}


def memory_by_seat(workers: list, memory: Mapping[int, TreeMemory]) -> dict:
    """seat number (as text, the label's value) -> the memory of its workers: during a reload a retiring worker
    and its successor hold one seat, and their memory is summed into it rather than told apart by pid (which
    would leave a series behind each worker that ever ran)."""
    seats: dict = {}
    for child in workers:
        tree = memory.get(child.pid)
        if tree is None:
            continue
        seat = str(child.number)
        seats[seat] = seats[seat].plus(tree) if seat in seats else tree
    return seats


class SupervisorReport:
    """One supervisor's report: its figures at each tick, and every view of them (the board, STATUS=,
    /metrics)."""

    def __init__(self, reporter: Reporter):
        self.reporter = reporter
        self.settings: Optional[Settings] = None     # these three once the spider is loaded (adopt)
        self.namespace = ""
        self.where = ""                              # "news@2": the namespace, and the instance when named
        self.figures = SupervisorFigures(namespace="")
        self.board: Optional[SnapshotPublisher] = None    # on the supervisor's ports: withdraw() before they close
        self.metrics: Optional[MetricsServer] = None
        self._rate = ProgressRate()             # its workers' settled tasks
        self._samples = SettledSamples()        # the batch's tally at each tick (its rate, its ETA, its chart)
        self._batch: Optional[BatchFigures] = None
        self.memory: Optional[MemoryWatch] = None       # its children's memory, measured once the spider is loaded

    # -- what the supervisor tells it
    def adopt(self, settings: Settings, namespace: str, where: str, ports: Optional[SupervisorPorts]) -> None:
        """Report on these settings and this namespace, on the board behind `ports` (at start, and after a
        reload, once the former board's snapshot is withdrawn)."""
        if self.settings is not None and ((settings.METRICS_PORT, settings.METRICS_ADDRESS)
                                          != (self.settings.METRICS_PORT, self.settings.METRICS_ADDRESS)):
            log.warning("METRICS_PORT and METRICS_ADDRESS take effect at a restart, not at a reload")
        self.settings, self.namespace, self.where = settings, namespace, where
        if self.memory is None:
            self.memory = MemoryWatch(self.reporter.pid, settings.STATUS_INTERVAL)
            self.memory.start()
        self.memory.interval = settings.STATUS_INTERVAL
        # A scrape until the next tick sees the last tick's figures, under the namespace's new name.
        self.figures = dataclasses.replace(self.figures, namespace=namespace)
        if ports is not None:
            self.board = SnapshotPublisher(ports, self.reporter.host, self.reporter.seat, settings.STATUS_INTERVAL)

    def serve_metrics(self, address: str, port: int) -> None:
        """/metrics, from before the first fork: the children count into its directory."""
        self.metrics = MetricsServer(address, port, self.reporter.instance, self.metric_figures,
                                     self.reporter.runs_master)

    def child_ended(self, pid: int) -> None:
        """A reaped child's live gauge goes from /metrics; its counters stay in the sums."""
        if self.metrics is not None:
            self.metrics.child_ended(pid)

    def forget_in_child(self) -> None:
        """In a forked child: what the report holds open is the supervisor's alone."""
        if self.metrics is not None:
            self.metrics.forget_in_child()

    # -- a tick
    def tick(self, supervised: Supervised) -> str:
        """The figures now, once: written on the board; the STATUS= text back."""
        self.figures = self._measure(supervised)
        if self.board is not None:
            self.board.publish(self.snapshot())
        return self.status_text()

    def _measure(self, supervised: Supervised) -> SupervisorFigures:
        block, children = supervised.block, supervised.children
        workers = [child for child in children if child.role == "worker"]
        totals = block.totals(child.row for child in workers)
        ended = supervised.ended
        done, failed = totals["done"] + ended["done"], totals["failed"] + ended["failed"]
        self._rate.add(done + failed)
        batch = self._batch_now(block, [child for child in children if child.role == "master"])
        memory = self.memory.trees() if self.memory is not None else {}
        return SupervisorFigures(
            namespace=self.namespace, updated=round(time.time(), 3),
            workers_alive=sum(1 for child in workers if child.serving), workers_wanted=supervised.workers_wanted,
            master_alive=int(any(child.role == "master" and child.serving for child in children)),
            done=done, failed=failed, items=totals["items"] + ended["items"],
            unflushed=totals["unflushed"], in_flight=totals["in_flight"], rate=round(self._rate.per_second(), 3),
            workers=tuple(_worker_entry(block, child, memory.get(child.pid)) for child in workers),
            memory=memory_by_seat(workers, memory),
            outages=tuple(outage for outage in map(block.outage, (child.row for child in children))
                          if outage is not None),
            restarts=dict(supervised.restarts), batch=batch,
            master_view=self._master_view() if not self.reporter.runs_master else None,
            hosts=self._hosts(batch) if self.metrics is not None else None)

    def _batch_now(self, block: LedgerBlock, masters: list) -> Optional[BatchFigures]:
        """The batch by the freshest master row that has one; the last figures of a master that stopped still
        describe the batch (a reload, the end of a stop)."""
        rows = [block.row(child.row) for child in masters]
        row = max((r for r in rows if r.batch_id > 0), key=lambda r: r.heartbeat, default=None)
        if row is not None:
            self._batch = BatchFigures(
                id=row.batch_id, settled=row.settled, total=row.total, is_done=row.is_done,
                done=row.done_count, failed=row.fail_count, next_due=row.next_due.decode("ascii", "replace"),
                paused_since=row.paused_since, queued=row.queued, wait_until=row.wait_until,
                **self._tally_samples(row))
        return self._batch

    def _tally_samples(self, row) -> dict:
        """The open batch's tally now, added to its samples: its series over the window and over its life; once
        it is over, its life alone, ending at its close (as long as this report saw it run)."""
        samples = self._samples
        if row.is_done:
            if samples.batch_id != row.batch_id:
                return {}
            samples.close(time.time(), row.done_count + row.fail_count)
            return {"life": samples.life_field()}
        settled = self.board.settled(row.batch_id) if self.board is not None else None
        if settled is not None:
            samples.add(row.batch_id, time.time(), settled)
        if samples.batch_id != row.batch_id:
            return {}
        return {"samples": samples.field(), "life": samples.life_field()}

    def _master_view(self) -> Optional[dict]:
        return self.board.master_view() if self.board is not None else None

    def _hosts(self, batch: Optional[BatchFigures]) -> Optional[list]:
        """The batch's busiest hosts for /metrics; not while the board is out of reach: a few more round trips
        that would time out would hold the loop up."""
        if batch is None or self.board is None or not self.board.reachable or self.settings is None:
            return None
        return self.board.hosts(batch.id, self.settings.HOST_STATS_TOP)

    # -- the views
    def snapshot(self) -> dict:
        """The figures as the snapshot on the board names them (snapshots.py)."""
        figures, reporter = self.figures, self.reporter
        snapshot = {"role": reporter.role, "host": reporter.host, "instance": reporter.instance,
                    "pid": reporter.pid, "updated": figures.updated,
                    "workers_alive": figures.workers_alive, "workers_wanted": figures.workers_wanted,
                    "master_alive": figures.master_alive, "done": figures.done, "failed": figures.failed,
                    "items": figures.items, "unflushed": figures.unflushed, "in_flight": figures.in_flight,
                    "rate": figures.rate, "workers": json.dumps(list(figures.workers))}
        outage = figures.oldest_outage()
        if outage is not None:
            backends, since, reason = outage
            snapshot.update(outage_backend=backends, outage_since=round(since, 3), outage_reason=reason)
        return {**snapshot, **(figures.batch.fields() if figures.batch is not None else {})}

    def status_text(self) -> str:
        """The STATUS= line: the batch by this host's master, else by the master's snapshot on the board."""
        snapshot = self.snapshot()
        batch = snapshot if "batch_id" in snapshot else self.figures.master_view
        return status_line(f"{self.reporter.role} {self.where}", snapshot, batch)

    def metric_figures(self) -> dict:
        """The figures as SupervisorCollector shows them (metrics.py); called from the metrics thread."""
        figures = self.figures      # one tick's, whatever the loop does meanwhile
        gauges = {"namespace": figures.namespace, "workers_alive": figures.workers_alive,
                  "unflushed": figures.unflushed, "in_flight": figures.in_flight,
                  "restarts": dict(figures.restarts), "outages": figures.backends_down()}
        batch = figures.batch
        if batch is not None:
            gauges["batch"] = {"id": batch.id, "total": batch.total, "done": batch.done, "failed": batch.failed,
                               "queued": batch.queued}
        if figures.hosts is not None:
            gauges["hosts"] = figures.hosts
        gauges["memory"] = {seat: (tree.total, tree.browsers) for seat, tree in figures.memory.items()}
        return gauges

    # -- the end
    def withdraw(self) -> None:
        """The snapshot off the board, and the board let go (before a reload, at the end)."""
        board, self.board = self.board, None
        if board is not None:
            board.withdraw()

    def stop_measuring(self) -> None:
        if self.memory is not None:
            self.memory.stop()

    def stop_serving_metrics(self) -> None:
        metrics, self.metrics = self.metrics, None
        if metrics is not None:
            metrics.close()
