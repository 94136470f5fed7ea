"""`jobsup events parked|retry|discard`: outbox events the destination refused for good
(`jobsup.store.outbox`)."""

from __future__ import annotations

import click

from jobsup.ops.options import NotFound, Target, actor_option, json_option, with_target
from jobsup.ops.tables import age, emit_json, emit_table


@click.group()
def events() -> None:
    """Events on their way to the publisher: those parked because it refused them for good."""


@events.command("parked")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@json_option
@with_target
def events_parked(target: Target, limit: int, as_json: bool) -> None:
    """Parked events, oldest first: no relay delivers them until they are retried."""
    rows = target.client().events.parked(limit=limit)
    if as_json:
        emit_json(rows)
        return
    emit_table(
        ["id", "type", "of", "created", "parked", "tries", "last error"],
        [
            (
                *(r["id"], r["type"], r["job_id"] if r["job_id"] is not None else r["subject"]),
                *(age(r["created_at"]), age(r["parked_at"]), r["attempts"], r["last_error"]),
            )
            for r in rows
        ],
        empty="no parked events",
    )


def _chosen(ids: tuple[int, ...], everything: bool) -> list[int] | None:
    if bool(ids) == everything:
        raise click.UsageError("give event ids or --all (not both)")
    return None if everything else list(ids)


def _report(done: list[int], asked: list[int] | None, verb: str) -> None:
    click.echo(f"{verb} {len(done)} events")
    missing = [] if asked is None else sorted(set(asked) - set(done))
    if missing:
        raise NotFound(f"not parked: {', '.join(map(str, missing))} (see `jobsup events parked`)")


@events.command("retry")
@click.argument("ids", type=click.IntRange(min=1), nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Retry every parked event.")
@actor_option
@with_target
def events_retry(target: Target, ids: tuple[int, ...], everything: bool, actor: str | None) -> None:
    """Deliver parked events again (after whatever their job announced since they parked)."""
    asked = _chosen(ids, everything)
    _report(target.client().events.retry(asked, actor=actor), asked, "retried")


@events.command("discard")
@click.argument("ids", type=click.IntRange(min=1), nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Discard every parked event.")
@actor_option
@with_target
def events_discard(target: Target, ids: tuple[int, ...], everything: bool, actor: str | None) -> None:
    """Delete parked events without delivering them."""
    asked = _chosen(ids, everything)
    _report(target.client().events.discard(asked, actor=actor), asked, "discarded")
