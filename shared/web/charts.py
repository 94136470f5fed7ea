"""Small SVG charts drawn here (no chart library, no script: the CSP stays as it is): the last
hour of a queue as bars (succeeded, and failed stacked on them) or as a line (latency).

Each has a value axis (zero, the top, a gridline half-way, and the unit) and a time axis
(an hour ago, half an hour ago, now); each bar and each point carries its figure and its
five minutes as an SVG title, which a browser shows under the cursor and a screen reader
reads."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from markupsafe import Markup, escape

WIDTH, HEIGHT = 320, 120
LEFT, RIGHT, TOP, BOTTOM = 42, 6, 8, 16  # room for the value labels and the time labels
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
BUCKET_MINUTES = 5


def bars(succeeded: Sequence[int], failed: Sequence[int], *, label: str) -> Markup:
    top = nice_top(max([a + b for a, b in zip(succeeded, failed, strict=True)] + [0]))
    count = max(len(succeeded), 1)
    step = PLOT_W / count
    parts = []
    for index, (ok, bad) in enumerate(zip(succeeded, failed, strict=True)):
        x = LEFT + index * step + 1
        ok_h, bad_h = PLOT_H * ok / top, PLOT_H * bad / top
        when = _when(index, count)
        parts.append(_rect(x, TOP + PLOT_H - ok_h, step - 2, ok_h, "ok", f"{when}: {ok} succeeded"))
        parts.append(_rect(x, TOP + PLOT_H - ok_h - bad_h, step - 2, bad_h, "bad", f"{when}: {bad} failed"))
    summary = f"{label}: {sum(succeeded)} succeeded, {sum(failed)} failed in the last hour"
    return _svg(_axes(top, "jobs / 5 min", _whole) + "".join(parts), summary)


def line(values: Sequence[float | None], *, label: str) -> Markup:
    known = [v for v in values if v is not None]
    top = nice_top(max([*known, 0.0]))
    count = max(len(values), 1)
    step = PLOT_W / count
    points = [
        (LEFT + (index + 0.5) * step, TOP + PLOT_H - PLOT_H * value / top, value, _when(index, count))
        for index, value in enumerate(values)
        if value is not None
    ]
    shape = ""
    if len(points) > 1:
        shape = '<polyline class="lat" points="' + " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in points) + '"/>'
    dots = "".join(
        f'<circle class="lat" cx="{x:.1f}" cy="{y:.1f}" r="3"><title>{when}: {_seconds(value)} mean</title></circle>'
        for x, y, value, when in points
    )
    summary = f"{label}: up to {_seconds(max(known))} from due to done" if known else f"{label}: nothing finished"
    return _svg(_axes(top, "seconds", _seconds) + shape + dots, summary)


# A batch's children by how far they got, in the bar's order, and the class that colours each.
PROGRESS = (("succeeded", "ok"), ("dead_lettered", "bad"), ("cancelled", "warn"), ("running", "run"))


def progress(counts: dict[str, int], total: int, *, label: str) -> Markup:
    """A batch's progress: one bar, a segment per end state and running (the rest, pending or
    waiting, is the bar's background), each segment's count as its title, and the counts in
    words under it."""
    whole = max(total, sum(counts.values()), 1)
    x, parts, words = 0.0, [], []
    for status, kind in PROGRESS:
        count = counts.get(status, 0)
        if count:
            width = WIDTH * count / whole
            title = f"{count} {status.replace('_', '-')}"
            parts.append(
                f'<rect class="{kind}" x="{x:.1f}" y="0" width="{width:.1f}" height="14"><title>{title}</title></rect>'
            )
            words.append(title)
            x += width
    done = sum(counts.get(status, 0) for status in ("succeeded", "dead_lettered", "cancelled"))
    summary = f"{label}: {done} of {total} finished" + (f" ({', '.join(words)})" if words else "")
    text = escape(summary)
    return Markup(
        f'<svg class="progress" viewBox="0 0 {WIDTH} 14" role="img" aria-label="{text}"><title>{text}</title>'
        f'<rect class="rest" x="0" y="0" width="{WIDTH}" height="14"/>{"".join(parts)}</svg>'
        f'<p class="progress-words">{text}</p>'
    )


def nice_top(value: float) -> float:
    """The axis's top: the first of 1, 2, 2.5, 5 times a power of ten at or above `value`
    (so the half-way gridline falls on a round figure too); 1 for nothing at all."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next(power * factor for factor in (1, 2, 2.5, 5, 10) if power * factor >= value)


def _axes(top: float, unit: str, shown: Callable[[float], str]) -> str:
    bottom_y, middle_y = TOP + PLOT_H, TOP + PLOT_H / 2
    parts = [
        f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom_y}"/>',
        f'<line class="axis" x1="{LEFT}" y1="{bottom_y}" x2="{WIDTH - RIGHT}" y2="{bottom_y}"/>',
        f'<line class="grid" x1="{LEFT}" y1="{middle_y}" x2="{WIDTH - RIGHT}" y2="{middle_y}"/>',
        f'<line class="grid" x1="{LEFT}" y1="{TOP}" x2="{WIDTH - RIGHT}" y2="{TOP}"/>',
        _text(LEFT - 3, TOP + 4, shown(top), "end"),
        _text(LEFT - 3, middle_y + 3, shown(top / 2), "end"),
        _text(LEFT - 3, bottom_y, "0", "end"),
        _text(LEFT + 3, TOP + 9, unit, "start", "unit"),
        _text(LEFT, HEIGHT - 3, "-60 min", "start"),
        _text(LEFT + PLOT_W / 2, HEIGHT - 3, "-30 min", "middle"),
        _text(WIDTH - RIGHT, HEIGHT - 3, "now", "end"),
    ]
    return "".join(parts)


def _when(index: int, count: int) -> str:
    """Bucket `index` of `count` five-minute buckets ending now, in minutes ago."""
    start = (count - index) * BUCKET_MINUTES
    return f"{start}-{start - BUCKET_MINUTES} min ago" if start > BUCKET_MINUTES else "the last 5 min"


def _whole(value: float) -> str:
    return f"{value:g}" if value < 10_000 else f"{value / 1000:g}k"


def _seconds(value: float) -> str:
    if value >= 1:
        return f"{value:g} s" if value >= 10 else f"{value:.2g} s"
    return f"{value * 1000:.3g} ms"


def _text(x: float, y: float, words: str, anchor: str, kind: str = "tick") -> str:
    return f'<text class="{kind}" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">{escape(words)}</text>'


def _rect(x: float, y: float, w: float, h: float, kind: str, title: str) -> str:
    if h <= 0:
        return ""
    shape = f'x="{x:.1f}" y="{y:.1f}" width="{max(w, 1):.1f}" height="{h:.1f}"'
    return f'<rect class="{kind}" {shape}><title>{escape(title)}</title></rect>'


def _svg(body: str, summary: str) -> Markup:
    text = escape(summary)
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{text}">'
        f"<title>{text}</title>{body}</svg>"
    )
