"""The dashboard's charts, drawn on the server as SVG: no script draws them and nothing is fetched.

Colours and fonts come from the stylesheet by class (the page's Content-Security-Policy allows no inline
style); every label is escaped.
"""
import html
import time
from typing import Optional

WIDTH, HEIGHT = 640, 180
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 14, 28          # margins: the axes' labels stand in them
BAR_SLOT_MOST = 48                                  # px per bar and its gap: a few batches are not wide slabs
SHARE_LEAST = 6                                     # px: the least width of a progress bar's share that is not 0


def _esc(value) -> str:
    return html.escape(str(value), quote=True)


def _svg(label: str, parts: list, height: int = HEIGHT) -> str:
    return (f'<svg class="chart" role="img" aria-label="{_esc(label)}" viewBox="0 0 {WIDTH} {height}" '
            f'width="{WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
            f'<title>{_esc(label)}</title>{"".join(parts)}</svg>')


def _figure(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    return f"{value:g}" if value != int(value) else str(int(value))


def _axes(top_value: float, unit: str = "") -> list:
    """The frame, and the value axis at 0, half and the top."""
    bottom_y, parts = HEIGHT - BOTTOM, [f'<rect class="frame" x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" '
                                        f'height="{HEIGHT - TOP - BOTTOM}"/>']
    for share in (0, 0.5, 1):
        y = bottom_y - share * (HEIGHT - TOP - BOTTOM)
        parts.append(f'<line class="grid" x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}"/>'
                     f'<text class="axis" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
                     f'{_esc(_figure(top_value * share) + unit)}</text>')
    return parts


def bar(done: int, failed: int, total: int) -> str:
    """The batch's progress bar: done, failed, still to go. A share that is not 0 is at least SHARE_LEAST wide:
    5 failed tasks among 10,000 are seen (their count is written beside the bar)."""
    width, height = WIDTH, 22
    if total <= 0:
        return _svg("no task in the batch", [f'<rect class="todo" x="0" y="0" width="{width}" height="{height}"/>'],
                    height)
    failed_w = _share_width(failed, total, width)
    done_w = min(_share_width(done, total, width), width - failed_w)
    return _svg(f"{done} done, {failed} failed of {total}", [
        f'<rect class="todo" x="0" y="0" width="{width}" height="{height}"/>',
        f'<rect class="done" x="0" y="0" width="{done_w:.1f}" height="{height}"/>',
        f'<rect class="failed" x="{done_w:.1f}" y="0" width="{failed_w:.1f}" height="{height}"/>'], height)


def _share_width(count: int, total: int, width: float) -> float:
    if count <= 0:
        return 0.0
    return min(width, max(width * count / total, SHARE_LEAST))


def progress(life: list, total: int, now: Optional[float] = None, drawn_from: Optional[str] = "samples") -> str:
    """Tasks settled over the batch's life, from its points (Unix time, settled), against its total. `drawn_from`
    "record": the two points of its record (its opening and its close), drawn dashed (nothing finer is known);
    None: no point is known at all."""
    if len(life) < 2:
        note = "samples arrive with the master's snapshots" if drawn_from else "its record keeps no close time"
        return _svg("progress: not enough samples yet", [*_axes(max(total, 1)), _note(note)])
    start, end = life[0][0], max(life[-1][0], now or 0.0)
    top = max(total, max(settled for _, settled in life), 1)
    span, inner_w, inner_h = max(end - start, 1e-9), WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    points = " ".join(f"{LEFT + inner_w * (t - start) / span:.1f},{HEIGHT - BOTTOM - inner_h * n / top:.1f}"
                      for t, n in life)
    from_record = drawn_from == "record"
    label = (f"tasks settled over the batch's life: {life[-1][1]} of {total}"
             + (", drawn from its record's opening and close" if from_record else ""))
    return _svg(label, [
        *_axes(top),
        f'<polyline class="line{" from-record" if from_record else ""}" points="{points}"/>',
        _time_label(start, LEFT, "start"), _time_label(end, WIDTH - RIGHT, "end")])


def _time_label(when: float, x: float, anchor: str) -> str:
    return (f'<text class="axis" x="{x:.1f}" y="{HEIGHT - 8}" text-anchor="{anchor}">'
            f'{_esc(time.strftime("%H:%M:%S", time.localtime(when)))}</text>')


def _note(text: str) -> str:
    return f'<text class="note" x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">{_esc(text)}</text>'


def bars(label: str, names: list, stacks: list, unit: str = "") -> str:
    """One bar per name, oldest left, each a stack of (css class, values) read bottom up."""
    if not names:
        return _svg(label, [*_axes(1), _note("no batch yet")])
    totals = [sum(values[i] or 0 for _, values in stacks) for i in range(len(names))]
    top = max(max(totals), 1)
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = min(inner_w / len(names), BAR_SLOT_MOST)
    parts = _axes(top, unit)
    for i, name in enumerate(names):
        x, base = LEFT + slot * i + slot * 0.15, float(HEIGHT - BOTTOM)
        for css, values in stacks:
            h = inner_h * (values[i] or 0) / top
            parts.append(f'<rect class="{css}" x="{x:.1f}" y="{base - h:.1f}" width="{slot * 0.7:.1f}" '
                         f'height="{h:.1f}"><title>{_esc(name)}: {_esc(_figure(values[i] or 0) + unit)}</title></rect>')
            base -= h
        if len(names) <= 16 or i % max(1, len(names) // 8) == 0:
            parts.append(f'<text class="axis" x="{x + slot * 0.35:.1f}" y="{HEIGHT - 8}" text-anchor="middle">'
                         f'{_esc(name)}</text>')
    return _svg(label, parts)
