"""Small SVG charts drawn here (no chart library): the last hour of a queue as bars
(succeeded, and failed stacked on them) or as a line (latency)."""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

WIDTH, HEIGHT, PAD = 240, 60, 2


def bars(succeeded: Sequence[int], failed: Sequence[int], *, label: str) -> Markup:
    top = max([a + b for a, b in zip(succeeded, failed, strict=True)] + [1])
    step = WIDTH / max(len(succeeded), 1)
    parts = []
    for index, (ok, bad) in enumerate(zip(succeeded, failed, strict=True)):
        x = index * step + PAD
        ok_h = (HEIGHT - PAD) * ok / top
        bad_h = (HEIGHT - PAD) * bad / top
        parts.append(_rect(x, HEIGHT - ok_h, step - 2 * PAD, ok_h, "ok", f"{ok} succeeded"))
        parts.append(_rect(x, HEIGHT - ok_h - bad_h, step - 2 * PAD, bad_h, "bad", f"{bad} failed"))
    return _svg("".join(parts), f"{label}: {sum(succeeded)} succeeded, {sum(failed)} failed in the last hour")


def line(values: Sequence[float | None], *, label: str) -> Markup:
    known = [v for v in values if v is not None]
    top = max([*known, 0.001])
    step = WIDTH / max(len(values) - 1, 1)
    points = [
        f"{index * step:.1f},{HEIGHT - PAD - (HEIGHT - 2 * PAD) * value / top:.1f}"
        for index, value in enumerate(values)
        if value is not None
    ]
    shape = f'<polyline class="lat" points="{" ".join(points)}"/>' if len(points) > 1 else ""
    dots = "".join(f'<circle class="lat" cx="{p.split(",")[0]}" cy="{p.split(",")[1]}" r="2"/>' for p in points)
    summary = f"{label}: up to {top:.2f}s from due to done" if known else f"{label}: nothing finished"
    return _svg(shape + dots, summary)


def _rect(x: float, y: float, w: float, h: float, kind: str, title: str) -> str:
    if h <= 0:
        return ""
    shape = f'x="{x:.1f}" y="{y:.1f}" width="{max(w, 1):.1f}" height="{h:.1f}"'
    return f'<rect class="{kind}" {shape}><title>{title}</title></rect>'


def _svg(body: str, summary: str) -> Markup:
    text = escape(summary)
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{text}">'
        f"<title>{text}</title>{body}</svg>"
    )
