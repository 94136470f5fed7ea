"""`jobsup batches list|show|cancel|enqueue`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from jobsup.audit import actor_of
from jobsup.errors import BadInput
from jobsup.ops.options import NotFound, Target, actor_option, json_option, parse_payload, with_target
from jobsup.ops.tables import emit_json, emit_table, status_counts


@click.group()
def batches() -> None:
    """Batches: many jobs with callbacks once they have all ended."""


@batches.command("list")
@click.option("--unfinished", is_flag=True, help="Only batches whose callbacks have not fired.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@json_option
@with_target
def batches_list(target: Target, unfinished: bool, limit: int, as_json: bool) -> None:
    """Batches, newest first, with their children's counts by status."""
    found = target.client().batches.list(unfinished=unfinished, limit=limit)
    if as_json:
        emit_json([b.to_dict() for b in found])
        return
    rows = [(b.id, b.name, b.status, b.total, status_counts(b.counts), b.created_at) for b in found]
    emit_table(["id", "name", "status", "children", "counts", "created"], rows, empty="no batches")


@batches.command("show")
@click.argument("batch_id", type=int)
@json_option
@with_target
def batches_show(target: Target, batch_id: int, as_json: bool) -> None:
    """One batch: its children's counts and its callbacks."""
    found = target.client().batches.get(batch_id)
    if found is None:
        raise NotFound(f"no batch with id {batch_id}")
    fields = found.to_dict()
    if as_json:
        emit_json(fields)
        return
    width = max(len(key) for key in fields)
    for key, value in fields.items():
        click.echo(f"{key.ljust(width)}  {json.dumps(value) if isinstance(value, dict | list) else value}")


@batches.command("cancel")
@click.argument("batch_id", type=int)
@actor_option
@with_target
def batches_cancel(target: Target, batch_id: int, actor: str | None) -> None:
    """Cancel every unfinished child; the callbacks then fire with the counts."""
    count = target.client().batches.cancel(batch_id, actor=actor)
    click.echo(f"cancelled {count} children of batch {batch_id} (a running one ends once its worker stops it)")


@batches.command("enqueue")
@click.argument("children", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", help="A label for the batch.")
@click.option("--on-complete", help="Job to enqueue once every child has ended.")
@click.option("--on-success", help="Job to enqueue once every child has succeeded.")
@click.option("--on-failure", help="Job to enqueue once every child has ended, not all succeeded.")
@click.option("--callback-payload", help="JSON object given to each callback (with the batch's counts).")
@click.option("--allow-unknown", is_flag=True, help="Enqueue names no definition knows (with the defaults).")
@actor_option
@json_option
@with_target
def batches_enqueue(target: Target, children: Path, callback_payload: str | None, as_json: bool, **given: Any) -> None:
    """Enqueue the jobs of CHILDREN (a JSON Lines file, one {"name", "payload", ...} per
    line, as `enqueue_many` takes) as one batch, atomically, and print its id (audited,
    as an operator's enqueue)."""
    who = actor_of(given.pop("actor"))
    specs = _read_lines(children)
    payload = parse_payload(callback_payload)
    on = {
        key: None if given[key] is None else (given[key], payload)
        for key in ("on_complete", "on_success", "on_failure")
    }
    progress: Any = click.progressbar(length=len(specs), label="enqueuing", file=sys.stderr)
    client = target.client()
    with progress as bar:
        batch_id = client.batches.enqueue(
            specs,
            on_complete=on["on_complete"],
            on_success=on["on_success"],
            on_failure=on["on_failure"],
            name=given["name"],
            allow_unknown=given["allow_unknown"],
            progress=bar.update,
        )
    client.audit.record(who, "batch.enqueue", target=f"batch:{batch_id}", job_count=len(specs))
    emit_json({"id": batch_id, "children": len(specs)}) if as_json else click.echo(batch_id)


def _read_lines(path: Path) -> list[Any]:
    specs = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                specs.append(json.loads(line))
            except ValueError as exc:
                raise BadInput(f"{path}:{number}: not JSON ({exc})") from None
    return specs
