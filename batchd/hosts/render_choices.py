"""Whether a host's render="auto" pages need a browser: the choice batchd learns per host, kept across batches
(the RenderChoices port: a Redis hash, an SQLite table, this module's LocalRenderChoices for the memory store).

A host's choice is one record, changed only by `choice_step` (under a lock here, in a WATCH/MULTI transaction in
Redis, in a BEGIN IMMEDIATE transaction in SQLite), so that every worker of a namespace tells one story:

    (none)     never met: its render="auto" pages are rendered, and sampled (as `learning`)
    learning   `sample`: a page was rendered and also fetched plain, and the callback's yield of each compared
               (`shortfall`); RENDER_AUTO_SAMPLE pages where plain yields as much decide it `plain`, the first
               where it yields less decides it `rendered` at once (one page is proof enough that plain loses data)
    plain      its render="auto" pages are fetched without a browser
    rendered   they are rendered, as render=True's are
    `relearn`  a plain host whose data fell at a batch's close (RELEARN_RULES) is learning again

Why a shortfall loses the vote: while a host is learning its pages are rendered and the rendered items are the
ones stored, so learning never costs data; a host wrongly decided plain would cost every page until the quality
checks flag it.
"""
import enum
import json
import logging
import threading
from dataclasses import asdict, dataclass, field
from typing import Iterable, Optional

log = logging.getLogger("batchd.master")

KEPT_HOSTS = 100_000        # records kept per namespace; a host met beyond it is rendered, and not learnt
SAMPLE, RELEARN = "sample", "relearn"
# The quality rules whose flag on a plain host sends it back to learning: its fields or its items fell.
RELEARN_RULES = ("coverage_drop", "coverage_floor", "items_drop", "no_items")


class RenderMode(str, enum.Enum):
    LEARNING = "learning"
    PLAIN = "plain"
    RENDERED = "rendered"


@dataclass
class RenderChoice:
    """One host's record: its mode, since when (Unix seconds) and in which batch it came, the pages sampled
    since it last started learning, and why it is what it is (a shortfall, or the flag that reset it)."""
    mode: RenderMode
    since: float
    batch: Optional[int] = None
    samples: int = 0
    why: str = ""

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "mode": self.mode.value}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text) -> "RenderChoice":
        data = json.loads(text)
        return cls(RenderMode(data["mode"]), float(data["since"]), data.get("batch"), int(data.get("samples", 0)),
                   data.get("why", ""))


def choice_step(record: Optional[RenderChoice], step: str, now: float, batch: Optional[int], why: str,
                sample_size: int) -> tuple:
    """(the record after `step`, whether its mode changed). `sample`: a page sampled while learning, `why` its
    shortfall ('' when plain yielded as much); a host decided already ignores it (another worker decided
    first). `relearn`: a plain host goes back to learning, `why` the flag that sent it; any other is left."""
    if step == SAMPLE:
        if record is not None and record.mode != RenderMode.LEARNING:
            return record, False
        samples = (record.samples if record is not None else 0) + 1
        if why:
            return RenderChoice(RenderMode.RENDERED, now, batch, samples, why), True
        if samples >= sample_size:
            return RenderChoice(RenderMode.PLAIN, now, batch, samples,
                                f"plain gave the same items on {samples} sampled pages"), True
        since = record.since if record is not None else now
        return RenderChoice(RenderMode.LEARNING, since, batch, samples, ""), record is None
    if step == RELEARN:
        if record is None or record.mode != RenderMode.PLAIN:
            return record, False
        return RenderChoice(RenderMode.LEARNING, now, batch, 0, why), True
    raise ValueError(f"no render choice step {step!r}")


@dataclass
class PageYield:
    """What a callback made of one page, as the quality counters measure items: items per table, of them those
    with a good value per `table.field`, and the follow-up requests."""
    items: dict = field(default_factory=dict)
    good: dict = field(default_factory=dict)
    follow_ups: int = 0

    def add_item(self, table: str, fields: Iterable[tuple]) -> None:
        """An item of `table`, with (field, good) for each of its fields."""
        self.items[table] = self.items.get(table, 0) + 1
        for name, good in fields:
            key = f"{table}.{name}"
            self.good[key] = self.good.get(key, 0) + int(good)


def shortfall(plain: PageYield, rendered: PageYield) -> str:
    """Why the plain page's yield is worse than the rendered one's ('' when it is not): fewer items of a table,
    fewer good values of a field, or fewer follow-up requests (a listing whose links a script writes)."""
    for table, n in sorted(rendered.items.items()):
        if plain.items.get(table, 0) < n:
            return f"plain gave {plain.items.get(table, 0)} items for {table}, rendered {n}"
    for key, n in sorted(rendered.good.items()):
        if plain.good.get(key, 0) < n:
            return f"plain gave {key} a value in {plain.good.get(key, 0)} items, rendered in {n}"
    if plain.follow_ups < rendered.follow_ups:
        return f"plain gave {plain.follow_ups} follow-up requests, rendered {rendered.follow_ups}"
    return ""


def hosts_to_relearn(flags: Iterable) -> dict:
    """host -> the message of its first flag that sends a plain host back to learning (RELEARN_RULES)."""
    found: dict = {}
    for flag in flags:
        if flag.kind in RELEARN_RULES:
            found.setdefault(flag.host, f"{flag.kind}: {flag.message}")
    return found


def relearn_flagged(choices, flags: Iterable, batch: Optional[int], now: float) -> dict:
    """Send every plain host that `flags` (a batch's quality flags) flag for RELEARN_RULES back to learning, in
    the RenderChoices port `choices`: host -> why, of those sent (a host learning or rendered already is left),
    each said in one line."""
    sent = {}
    for host, why in hosts_to_relearn(flags).items():
        record, changed = choices.step(host, RELEARN, now, batch, why, 0)
        if changed:
            sent[host] = why
            log.info("render=\"auto\": %s is learning again, its data fell in batch %s (%s)", host, batch, why)
    return sent


class LocalRenderChoices:
    """RenderChoices within one process (the memory store's)."""

    def __init__(self) -> None:
        self._records: dict = {}        # host -> RenderChoice
        self._lock = threading.Lock()

    def choice(self, host: str) -> Optional[RenderChoice]:
        with self._lock:
            return self._records.get(host)

    def step(self, host: str, step: str, now: float, batch: Optional[int], why: str, sample_size: int) -> tuple:
        with self._lock:
            kept = self._records.get(host)
            if kept is None and len(self._records) >= KEPT_HOSTS:
                return None, False
            record, changed = choice_step(kept, step, now, batch, why, sample_size)
            if record is not None:
                self._records[host] = record
            return record, changed

    def choices(self, limit: int = 1000) -> dict:
        with self._lock:
            newest = sorted(self._records.items(), key=lambda item: item[1].since, reverse=True)[:limit]
        return dict(newest)
