"""When a child stops answering or will not stop: the supervisor's steps up to SIGKILL, and the rule
behind its WATCHDOG=1.

    silent past CHILD_TIMEOUT          SIGABRT (faulthandler prints its threads' stacks), SIGKILL after
                                       KILL_GRACE if it lingers
    retiring past STOP_TIMEOUT         SIGQUIT, a cold stop (what it still held is logged), SIGKILL after
      (+ STOP_MARGIN)                  KILL_GRACE
    SIGKILLed and still there          logged CRITICAL once: stuck in the kernel, the watchdog stops

A supervisor is healthy while every child beats within CHILD_TIMEOUT or is being replaced: systemd's
watchdog then ends only a supervisor that can no longer replace its children.
"""
import logging
import signal

from ..config import Settings
from ..service.systemd import watchdog_usec
from ..settle.ledger import LedgerBlock
from .child import Child

log = logging.getLogger("batchd.supervisor")

KILL_GRACE = 5.0          # after SIGABRT or SIGQUIT, this long before SIGKILL
STOP_MARGIN = 5.0         # a warm-stopping child has its own STOP_TIMEOUT deadline; this is on top


def escalate(children: list, ledger: LedgerBlock, settings: Settings, now: float) -> None:
    """The next step for every child that went silent or outstays its stop."""
    for child in children:
        if child.killed_since is not None:
            _note_stuck(child, now)
        elif child.aborted_since is not None or child.cold_since is not None:
            if now - max(child.aborted_since or 0, child.cold_since or 0) >= KILL_GRACE:
                log.error("%s still there %g s after SIG%s: SIGKILL", child.label, KILL_GRACE,
                          "ABRT" if child.aborted_since else "QUIT")
                child.killed_since = now
                child.send(signal.SIGKILL)
        elif ledger.silence(child.spec.row, now) > settings.CHILD_TIMEOUT:
            _abort(child, ledger.silence(child.spec.row, now), settings.CHILD_TIMEOUT, now)
        elif child.retiring_since is not None and now - child.retiring_since > settings.STOP_TIMEOUT + STOP_MARGIN:
            lost = ledger.lost(child.spec.row)
            log.warning("%s: STOP_TIMEOUT passed with %d items of %d tasks still in memory (tasks %s): "
                        "cold stop", child.label, lost.items, len(lost.task_keys), ", ".join(lost.task_keys) or "none")
            child.go_cold(now)


def _abort(child: Child, silence: float, child_timeout: float, now: float) -> None:
    log.error("%s silent for %.1f s (CHILD_TIMEOUT %g s): SIGABRT (its threads' stacks follow), SIGKILL "
              "in %g s if it lingers; it will be replaced", child.label, silence, child_timeout, KILL_GRACE)
    child.aborted_since = now
    child.send(signal.SIGABRT)
    child.send(signal.SIGCONT)     # a stopped process acts on SIGABRT only once continued


def _note_stuck(child: Child, now: float) -> None:
    if child.killed_since is not None and now - child.killed_since > KILL_GRACE and not child.stuck_logged:
        child.stuck_logged = True
        log.critical("%s has not died %g s after SIGKILL (stuck in the kernel?); the watchdog stops "
                     "until it does", child.label, KILL_GRACE)


def healthy(children: list, ledger: LedgerBlock, child_timeout: float, now: float) -> bool:
    """Every child beats within CHILD_TIMEOUT or is being replaced; a SIGKILL that did not end its
    child within KILL_GRACE means this supervisor can no longer replace it."""
    for child in children:
        if child.killed_since is not None:
            if now - child.killed_since > KILL_GRACE:
                return False
        elif child.aborted_since is None and ledger.silence(child.spec.row, now) > child_timeout:
            return False
    return True


def warn_short_watchdog(child_timeout: float) -> None:
    """WatchdogSec= must leave the time to replace a hung child twice over."""
    seconds, needed = watchdog_usec() / 1e6, 2 * (child_timeout + KILL_GRACE)
    if seconds and seconds < needed:
        log.warning("WatchdogSec=%gs is below 2 x (CHILD_TIMEOUT %g s + kill grace %g s) = %g s: replacing "
                    "a hung child could cost the service its watchdog; raise WatchdogSec= or lower "
                    "CHILD_TIMEOUT", seconds, child_timeout, KILL_GRACE, needed)
