"""Hosts' breakers kept in one process: the memory and SQLite backends' HostBreakers port (the Redis one
holds them for every worker of a namespace: backends/mysql_redis/lua/step_host_breaker.lua runs the same
steps).

A host's breaker is one record, changed only by `breaker_step` (here under a lock, in Redis in one
script), so that the workers sharing it see one story:

    closed   no record, or one that holds only a Retry-After's "not before" time
    open     `trip`: a worker saw HOST_BREAKER_FAILURES failures of the host in a row; its requests
             wait until `next_probe`
    probing  `claim`: one request, the probe, was let through (one at a time: a claim lasts `probe_until`,
             so a probe whose worker died is claimed again); `probe_failed` opens the breaker again with
             the wait doubled up to the cap, `close` (the probe answered) forgets the record
    down     the breaker has been open HOST_DOWN_GIVE_UP seconds (the middleware judges it from `since`):
             `say_down` marks it, and answers True once per host and batch, for the one log line and alert

Times are the caller's clock (Unix seconds: several machines agree on it closely enough for waits of
seconds). Records live RECORD_TTL after their last change; past KEPT_HOSTS of them the stale go first.
"""
import enum
import threading
import time
from typing import Any, Callable, NamedTuple, Optional

from ..errors import BackendUnavailable

KEPT_HOSTS = 10_000          # records kept at most before the stale are forgotten (the Redis index too)
LOOK_EVERY = 1.0             # s: a worker reads the breaker of a host that failed there at most this often
RECORD_TTL = 86_400.0        # s a record outlives its last change (a down host is probed, so changed, far more often)


class BreakerPhase(str, enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    PROBING = "probing"
    DOWN = "down"


class BreakerState(NamedTuple):
    """A host's breaker as `HostBreakers.look` and `states` give it (times: Unix seconds, 0 for none)."""
    phase: BreakerPhase
    since: float             # when it opened (0: closed)
    failures: int            # the failures that opened it, and every failed probe since
    next_probe: float        # when a probe may go (0: closed)
    not_before: float = 0.0  # no request before this (a Retry-After the host sent)


# The record's fields, in the order the Redis script returns them. The steps and their arguments:
#   trip failures first_wait | claim probe_seconds | probe_failed cap | release | hold_off until | say_down batch
FIELDS = ("phase", "since", "failures", "wait", "next_probe", "probe_until", "not_before", "down", "said")
STEPS = ("trip", "claim", "probe_failed", "release", "hold_off", "say_down")


def breaker_step(record: Optional[dict], step: str, now: float, arg) -> tuple:
    """(the record after `step`, or None: none to keep; the step's answer: 1 when a trip opened the breaker, a
    claim won the probe, a say_down was the first of its batch, else 0). step_host_breaker.lua runs the same."""
    if step not in STEPS:
        raise ValueError(f"no breaker step {step!r}")
    r: dict[str, Any] = dict(record) if record else {"phase": "closed", "since": 0.0, "failures": 0, "wait": 0.0, "next_probe": 0.0,
                                     "probe_until": 0.0, "not_before": 0.0, "down": 0, "said": ""}
    answer = 0
    if step == "hold_off":
        r["not_before"] = max(r["not_before"], float(arg))
    elif step == "trip":
        if r["phase"] == "closed":
            r.update(phase="open", since=now, failures=int(arg[0]), wait=float(arg[1]), next_probe=now + float(arg[1]))
            answer = 1
        else:
            r["failures"] += int(arg[0])
    elif r["phase"] == "closed":
        return record, 0             # a probe's or a give-up's step after another worker closed the breaker
    elif step == "claim":
        if max(r["next_probe"], r["not_before"]) <= now and not (r["phase"] == "probing" and r["probe_until"] > now):
            r.update(phase="probing", probe_until=now + float(arg))
            answer = 1
    elif step == "probe_failed":
        r["wait"] = min(r["wait"] * 2, float(arg))
        r.update(phase="open", failures=r["failures"] + 1, next_probe=now + r["wait"], probe_until=0.0)
    elif step == "release":
        if r["phase"] == "probing":
            r.update(phase="open", probe_until=0.0)
    elif step == "say_down":
        answer = int(r["said"] != str(arg))
        r.update(down=1, said=str(arg))
    return r, answer


def state_of(record: Optional[dict]) -> Optional[BreakerState]:
    """What a record shows: None for no record."""
    if not record:
        return None
    phase = BreakerPhase.DOWN if int(record["down"]) else BreakerPhase(record["phase"])
    return BreakerState(phase, float(record["since"]), int(record["failures"]), float(record["next_probe"]),
                        float(record["not_before"]))


class LocalHostBreakers:
    """HostBreakers within one process (`for_namespace`: the one every worker of the process shares)."""

    _shared: dict = {}
    _shared_lock = threading.Lock()

    @classmethod
    def for_namespace(cls, namespace: str) -> "LocalHostBreakers":
        with cls._shared_lock:
            return cls._shared.setdefault(namespace, cls())

    def __init__(self, clock: Callable[[], float] = time.time):
        self.clock = clock                 # only to forget stale records; the steps take the caller's `now`
        self._records: dict = {}           # host -> (the record, when it last changed)
        self._lock = threading.Lock()

    def step(self, host: str, step: str, now: float, arg=None) -> tuple:
        with self._lock:
            kept = self._records.get(host)
            record, answer = breaker_step(kept[0] if kept else None, step, now, arg)
            if record is not None:
                self._forget_stale()
                self._records[host] = (record, self.clock())
        return state_of(record), answer

    def look(self, host: str) -> Optional[BreakerState]:
        with self._lock:
            kept = self._records.get(host)
        return state_of(kept[0]) if kept else None

    def close(self, host: str) -> None:
        with self._lock:
            self._records.pop(host, None)

    def states(self, limit: int = 20) -> dict:
        with self._lock:
            newest = sorted(self._records.items(), key=lambda item: item[1][1], reverse=True)[:limit]
        return {host: state_of(record) for host, (record, _) in newest}

    def _forget_stale(self) -> None:
        if len(self._records) >= KEPT_HOSTS:
            now = self.clock()
            self._records = {host: kept for host, kept in self._records.items() if now - kept[1] < RECORD_TTL}
            if len(self._records) >= KEPT_HOSTS:        # none stale: the oldest half goes
                newest = sorted(self._records.items(), key=lambda item: item[1][1])[KEPT_HOSTS // 2:]
                self._records = dict(newest)


class BreakerView:
    """A worker's view of its hosts' breakers in a HostBreakers port (one port per namespace, shared by its
    workers): the failures in a row it saw of each host, and each breaker of a host that failed here as it last
    read it, read again once LOOK_EVERY old. A host that has not failed here costs no round trip; a port out of
    reach reads as no breaker (the breaker stays out of the way) and a step through it as no change."""

    def __init__(self, breakers, clock: Callable[[], float] = time.time):
        self.breakers, self.clock = breakers, clock
        self._lock = threading.Lock()
        self._streaks: dict = {}       # host -> its failures in a row seen here
        self._views: dict = {}         # host -> (its BreakerState or None, when read) for hosts that failed here
        self._said: set = set()        # (host, batch) this worker has said down (to the port)

    def watches(self, host: str) -> bool:
        """Whether `host` failed here (only then is its breaker looked at)."""
        return host in self._views

    def look(self, host: str, now: float) -> Optional[BreakerState]:
        """The host's breaker as last read, read again once LOOK_EVERY old."""
        kept = self._views.get(host)
        if kept is not None and now - kept[1] < LOOK_EVERY:
            return kept[0]
        try:
            state = self.breakers.look(host)
        except BackendUnavailable:
            state = None
        self._remember(host, state, now)
        return state

    def step(self, host: str, step: str, now: float, arg=None) -> tuple:
        """(the breaker after `step`, the step's answer: breaker_step says what each answers)."""
        try:
            state, answer = self.breakers.step(host, step, now, arg)
        except BackendUnavailable:
            return None, 0
        self._remember(host, state, now)
        return state, answer

    def failed_in_a_row(self, host: str) -> int:
        """One more failure of `host` in a row: how many now."""
        with self._lock:
            if len(self._streaks) >= KEPT_HOSTS:
                self._streaks.clear()
            streak = self._streaks[host] = self._streaks.get(host, 0) + 1
            return streak

    def start_over(self, host: str) -> None:
        """`host` answered (or its breaker opened): its failures in a row count from 0."""
        self._streaks.pop(host, None)

    def close(self, host: str) -> bool:
        """A probe answered: the host's breaker closes for every worker (False: the port is out of reach)."""
        try:
            self.breakers.close(host)
        except BackendUnavailable:
            return False
        self._views.pop(host, None)
        return True

    def forget_if_closed(self, host: str) -> None:
        """Stop watching `host` once its breaker reads closed, with no Retry-After still holding it off."""
        kept = self._views.get(host)
        if kept is not None and (kept[0] is None or kept[0].phase is BreakerPhase.CLOSED
                                 and kept[0].not_before <= self.clock()):
            self._views.pop(host, None)

    def first_to_say(self, host: str, batch_id) -> bool:
        """Whether this worker has yet to say `host` down in this batch (it asks the port once per host and
        batch, whose answer says whether it is the first of the namespace)."""
        said = (host, batch_id)
        if said in self._said:
            return False
        self._said.add(said)
        return True

    def _remember(self, host: str, state: Optional[BreakerState], now: float) -> None:
        with self._lock:
            if len(self._views) >= KEPT_HOSTS and host not in self._views:
                self._views = {h: kept for h, kept in self._views.items() if kept[0] is not None}
            self._views[host] = (state, now)

