"""When a task is due again (BATCH_MODE = "due"), as Nutch's adaptive fetch schedule: its interval grows
x1.4 each time it is found unchanged and shrinks x0.8 each time it changed, within REVISIT_INTERVAL_MIN
and REVISIT_INTERVAL_MAX. A new task starts at one BATCH_INTERVAL (within the same bounds); a gone one
keeps its interval (it failed: a full or due batch tries it again when it is due)."""
from typing import Optional

from ..config import Settings
from ..errors import ConfigError
from ..model import Revisit
from .pages import CHANGED, UNCHANGED

GROWTH = {UNCHANGED: 1.4, CHANGED: 0.8}
HOUR = 3600.0


def check_bounds(settings: Settings) -> None:
    """REVISIT_INTERVAL_MIN <= REVISIT_INTERVAL_MAX, or a ConfigError naming both."""
    if settings.REVISIT_INTERVAL_MIN > settings.REVISIT_INTERVAL_MAX:
        raise ConfigError(f"setting REVISIT_INTERVAL_MIN: {settings.REVISIT_INTERVAL_MIN:g} is more than "
                          f"REVISIT_INTERVAL_MAX ({settings.REVISIT_INTERVAL_MAX:g})")


def first_interval(settings: Settings) -> float:
    unit = 24 * HOUR if settings.BATCH_INTERVAL_UNIT == "day" else HOUR
    return settings.BATCH_INTERVAL * unit


def next_revisit(task_id, previous: Optional[Revisit], verdict: str, now: float, batch_id: int,
                 settings: Settings) -> Revisit:
    """The task's revisit after a crawl at `now` that found `verdict`."""
    interval = first_interval(settings) if previous is None else previous.interval * GROWTH.get(verdict, 1.0)
    interval = min(settings.REVISIT_INTERVAL_MAX, max(settings.REVISIT_INTERVAL_MIN, interval))
    return Revisit(task_id=task_id, interval=interval, next_due=now + interval, verdict=verdict, batch_id=batch_id)
