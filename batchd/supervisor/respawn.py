"""What follows a child's end: a new one now, a new one after a backoff, or the supervisor's stop.

    it was told to stop                     nothing follows (a stop, a reload, a retirement)
    --once, and the batch is over           the supervisor stops with the master's code (0, 3, 65, 69, 75), or 69
                                            when a worker could not reach its backends; with `batchd worker
                                            --once` each worker that exits 0 is not replaced, and the last
                                            one's end stops the supervisor with 0
    it had served (leased a task,           a new one at once
      finished a patrol)
    it died before serving: a crash loop    a new one after a backoff (capped at child.py's RESPAWN_CAP)
    a configuration error (78)              the same, and CONFIG_ATTEMPTS in a row stop the supervisor with 78

Any end but the first two is a restart, counted for /metrics. A child that ran STABLE_AFTER before it ended
starts a fresh backoff.
"""
from dataclasses import dataclass
from typing import Optional

from ..errors import ExitCode
from .child import Child, Plan, Seats

# A once-mode master's end: the command's exit code and why.
ONCE_ENDS = {ExitCode.OK: (ExitCode.OK, "the batch is over (--once)"),
             ExitCode.TASKS_FAILED: (ExitCode.FAILURE, "the batch is over with failed tasks (--once ends with 1)"),
             ExitCode.DATAERR: (ExitCode.DATAERR,
                                "the batch is over and its quality checks flagged it (--once ends with 65; batchd quality)")}

CONFIG_ATTEMPTS = 3       # configuration failures in a row before giving up with exit 78
STABLE_AFTER = 30.0       # a child that ran this long before it ended starts a fresh backoff


@dataclass(frozen=True)
class AfterEnd:
    tail: str = ""                     # the end of the child's last log line: what happens next
    stop: Optional[tuple] = None       # (exit code, reason) when its end stops the supervisor
    restart: bool = False              # it ended unasked, and is replaced


def after_end(plan: Plan, seats: Seats, child: Child, code: int, now: float, served: bool) -> AfterEnd:
    """What follows the end of `child` (with exit `code`); its seats' backoff and wanted count follow too."""
    if child.retiring_since is not None:
        return AfterEnd()
    role = child.spec.role
    if plan.once and role == "master" and code in (ExitCode.OK, ExitCode.UNAVAILABLE, ExitCode.TEMPFAIL,
                                                   ExitCode.DATAERR, ExitCode.TASKS_FAILED):
        return AfterEnd(stop=ONCE_ENDS.get(ExitCode(code), (ExitCode(code), f"--once ends with {code}")))
    if plan.once and code == ExitCode.UNAVAILABLE:     # a once-mode worker gave up on an outage
        return AfterEnd(stop=(ExitCode.UNAVAILABLE, "--once ends with 69: a worker could not reach its backends"))
    if plan.once and plan.verb == "worker" and code == 0:    # keep_alive=False: its batch is done
        seats.wanted -= 1
        return AfterEnd(stop=(ExitCode.OK, "every worker is done (--once)") if seats.wanted == 0 else None)
    if now - child.spawned_at >= STABLE_AFTER:
        seats.backoff.reset()
        seats.config_failures = 0
    if code == ExitCode.CONFIG:
        return _after_config_failure(seats, child, now)
    seats.config_failures = 0
    if served:
        seats.backoff.reset()
        return AfterEnd(tail=f"; a new {role} now (it had served)", restart=True)
    return AfterEnd(tail=f"; a new {role} in {_back_off(seats, now):.1f} s", restart=True)


def _after_config_failure(seats: Seats, child: Child, now: float) -> AfterEnd:
    if child.spawned_at > seats.last_config_failure:    # its siblings of the same attempt count once
        seats.config_failures += 1
        seats.last_config_failure = now
    if seats.config_failures >= CONFIG_ATTEMPTS:
        return AfterEnd(stop=(ExitCode.CONFIG, f"the {child.spec.role} failed on its configuration "
                                               f"{seats.config_failures} times in a row; giving up (exit 78)"),
                        restart=True)
    return AfterEnd(tail=f"; configuration error {seats.config_failures} of {CONFIG_ATTEMPTS}, trying again "
                         f"in {_back_off(seats, now):.1f} s", restart=True)


def _back_off(seats: Seats, now: float) -> float:
    """The next spawn waits the backoff's next delay (returned)."""
    delay = seats.backoff.next_delay()
    seats.next_spawn = max(seats.next_spawn, now + delay)
    return delay
