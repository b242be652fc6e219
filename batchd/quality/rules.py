"""The rules that flag a batch's data, host by host, against the baseline of the batches before
(docs/quality.md says what each catches and what it costs):

    coverage_drop    a field's coverage fell by more than QUALITY_DROP (a changed layout: a selector finds nothing)
    items_drop       a host's items fell by more than QUALITY_DROP of its baseline
    no_items         the share of its tasks done with no item rose by more than QUALITY_DROP
    soft_block       QUALITY_SOFT_BLOCK_PAGES pages or more, and QUALITY_SOFT_BLOCK_SHARE of them one body
    block_marker     pages matching a challenge or captcha marker (built in, and BLOCK_MARKERS)
    coverage_floor   a field under its QUALITY_MIN_COVERAGE floor

With no baseline (a first batch, a new host) only the last three can flag. soft_block and block_marker also
say how many of the host's tasks were put back to pending for a block page found mid-batch (QUALITY_BLOCK_HOLD),
and soft_block flags a host whose tasks were put back for one body however few of its pages had it. A task done unchanged (a 304)
keeps what its batch before measured: it counts the items per task of the baseline, with their coverage
(HostMeasures.stand_for_kept), and is neither a task with no item nor a body; so a host all of whose pages
answer 304 is never flagged, and one that changed a few pages is judged on all of them.

The crawl's text (a host, a field, a marker) reaches a log line and a terminal: `shown` escapes and cuts it.
"""
from dataclasses import asdict, dataclass
from typing import Mapping, Optional

from ..config import Settings
from ..hosts.counts import OTHER
from .measures import BY_BODY, BY_MARKER, Baseline, HostMeasures

MESSAGE_MOST = 280      # characters of a flag's message (a log line adds its batch: under 300 in all)
TEXT_MOST = 80          # characters of one text from the crawl in a message


@dataclass(frozen=True)
class Flag:
    host: str
    kind: str                 # one of config.QUALITY_RULES
    field: Optional[str]      # table.field, table, or a marker; None when the rule is about the host
    now: float
    before: Optional[float]   # the baseline's; None when the rule needs none
    message: str

    def to_json(self) -> dict:
        return asdict(self)


def shown(text: str, most: int = TEXT_MOST) -> str:
    """Text from the crawl, safe on one line: control and invisible characters escaped, cut to `most`."""
    escaped = repr(str(text))[1:-1]
    return escaped if len(escaped) <= most else escaped[:most - 1] + "…"


def host_flags(host: str, measures: HostMeasures, baseline: Baseline, settings: Settings) -> list:
    """One host's flags, rule by rule (those of QUALITY_RULES_OFF left out)."""
    off = settings.QUALITY_RULES_OFF or ()
    return [flag for kind, rule in RULES if kind not in off for flag in rule(host, measures, baseline, settings)]


def in_order(flags: list) -> list:
    """A batch's flags host by host, the others' entry last; each host's in the order of its rules."""
    return sorted(flags, key=lambda flag: (flag.host == OTHER, flag.host))


def _flag(host: str, kind: str, field: Optional[str], now: float, before: Optional[float], text: str) -> Flag:
    message = f"{shown(host)}: {text}"
    if len(message) > MESSAGE_MOST:
        message = message[:MESSAGE_MOST - 1] + "…"
    return Flag(host, kind, field, round(now, 4), None if before is None else round(before, 4), message)


def coverage_drop(host: str, m: HostMeasures, baseline: Baseline, settings: Settings) -> list:
    coverage, flags = m.coverage(), []
    for key, before in sorted(baseline.coverage.items()):
        if not m.items.get(key.partition(".")[0]):
            continue             # the table got no item at all: items_drop tells that
        now = coverage.get(key, 0.0)
        if before - now > settings.QUALITY_DROP:
            flags.append(_flag(host, "coverage_drop", key, now, before,
                               f"{shown(key)} has a value in {now:.0%} of its items, {before:.0%} before "
                               f"(QUALITY_DROP={settings.QUALITY_DROP:g})"))
    return flags


def items_drop(host: str, m: HostMeasures, baseline: Baseline, settings: Settings) -> list:
    if host == OTHER:            # the others' entry holds other hosts from batch to batch
        return []
    flags = []
    for table, before in sorted(baseline.items.items()):
        now = m.items.get(table, 0) + m.kept_items.get(table, 0.0)
        if before and now < before * (1 - settings.QUALITY_DROP):
            flags.append(_flag(host, "items_drop", table, now, before,
                               f"{now:.0f} items for {shown(table)}, {before:.0f} before "
                               f"(QUALITY_DROP={settings.QUALITY_DROP:g})"))
    return flags


def no_items(host: str, m: HostMeasures, baseline: Baseline, settings: Settings) -> list:
    now, before = m.no_item_share(), baseline.no_item_share
    if now is None or before is None or now - before <= settings.QUALITY_DROP:
        return []
    return [_flag(host, "no_items", None, now, before,
                  f"{m.no_item} of {m.tasks} tasks done yielded no item ({now:.0%}, {before:.0%} before)")]


def soft_block(host: str, m: HostMeasures, baseline: Baseline, settings: Settings) -> list:
    if host == OTHER:
        return []
    share, put_back = m.top_body_share(), m.put_back.get(BY_BODY, 0)
    most = m.bodies >= settings.QUALITY_SOFT_BLOCK_PAGES and share >= settings.QUALITY_SOFT_BLOCK_SHARE
    if not (most or put_back):
        return []
    said = ": a block page served for every URL?" if most else ", most of its last pages for a while"
    return [_flag(host, "soft_block", None, share, None,
                  f"{m.top_body} of {m.bodies} pages had one body ({share:.0%}){said}" + _put_back(put_back))]


def block_marker(host: str, m: HostMeasures, baseline: Baseline, settings: Settings) -> list:
    if not m.markers:
        return []
    pages = sum(m.markers.values())
    marker = max(sorted(m.markers), key=lambda found: m.markers[found])
    return [_flag(host, "block_marker", marker, pages, None,
                  f"{pages} of {m.bodies} pages match a block marker (most: '{shown(marker)}')"
                  + _put_back(m.put_back.get(BY_MARKER, 0)))]


def _put_back(tasks: int) -> str:
    """What a block rule's message adds of the tasks put back to pending for its block page mid-batch."""
    return f"; {tasks} task{'' if tasks == 1 else 's'} put back to pending, the host held" if tasks else ""


def coverage_floor(host: str, m: HostMeasures, baseline: Baseline, settings: Settings) -> list:
    coverage, flags = m.coverage(), []
    for table in sorted(t for t, n in m.items.items() if n):
        for field, floor in floors_of(table, settings.QUALITY_MIN_COVERAGE).items():
            key = f"{table}.{field}"
            now = coverage.get(key, 0.0)
            if now < floor:
                flags.append(_flag(host, "coverage_floor", key, now, floor,
                                   f"{shown(key)} has a value in {now:.0%} of its items, under its floor of "
                                   f"{floor:.0%} (QUALITY_MIN_COVERAGE)"))
    return flags


def floors_of(table: str, floors: Mapping[str, float]) -> dict:
    """field -> floor for one table: "table.field" keys over plain "field" ones."""
    found = {key: floor for key, floor in floors.items() if "." not in key}
    found.update({key.partition(".")[2]: floor for key, floor in floors.items() if key.partition(".")[0] == table
                  and "." in key})
    return found


RULES = (("coverage_drop", coverage_drop), ("items_drop", items_drop), ("no_items", no_items),
         ("soft_block", soft_block), ("block_marker", block_marker), ("coverage_floor", coverage_floor))
