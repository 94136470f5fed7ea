"""Output for people and for scripts: aligned tables, or JSON with the API's field names."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import click


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, default=str))


def emit_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], empty: str = "(none)") -> None:
    if not rows:
        click.echo(empty)
        return
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [max(len(header), *(len(row[i]) for row in cells)) for i, header in enumerate(headers)]
    click.echo("  ".join(header.upper().ljust(width) for header, width in zip(headers, widths, strict=True)).rstrip())
    for row in cells:
        click.echo("  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip())


def age(moment: datetime | None, now: datetime | None = None) -> str:
    """``42s``, ``5m``, ``3h``, ``2d``: how long ago."""
    if moment is None:
        return "-"
    seconds = max(0.0, ((now or datetime.now(UTC)) - moment).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    text = str(value).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def status_counts(counts: dict[str, int]) -> str:
    """A workflow's or batch's jobs by status, those with none left out: ``2 succeeded, 1 running``."""
    return ", ".join(f"{n} {status}" for status, n in counts.items() if n) or "-"
