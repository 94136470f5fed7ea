"""`jobsup queues pause|resume|list`: stop and restart claiming a queue on every instance."""

from __future__ import annotations

import click

from jobsup.ops.options import Target, actor_option, json_option, with_target
from jobsup.ops.tables import emit_json, emit_table


@click.group()
def queues() -> None:
    """Queues: their depth, and pausing them on every instance."""


@queues.command("pause")
@click.argument("queue")
@click.option("--reason", help="Why, shown by `jobsup queues list` and kept in the audit trail.")
@click.option("--force", is_flag=True, help="Pause a queue nothing names yet (ahead of the deploy that brings it).")
@actor_option
@with_target
def queues_pause(target: Target, queue: str, reason: str | None, force: bool, actor: str | None) -> None:
    """Stop every instance from claiming jobs of QUEUE; running jobs finish, enqueueing goes on."""
    if target.client().queues.pause(queue, reason=reason, actor=actor, allow_unknown=force):
        click.echo(f"paused queue {queue}")
    else:
        click.echo(f"queue {queue} was paused already")


@queues.command("resume")
@click.argument("queue")
@actor_option
@with_target
def queues_resume(target: Target, queue: str, actor: str | None) -> None:
    """Let every instance claim jobs of QUEUE again."""
    if target.client().queues.resume(queue, actor=actor):
        click.echo(f"resumed queue {queue}")
    else:
        click.echo(f"queue {queue} was not paused")


@queues.command("list")
@json_option
@with_target
def queues_list(target: Target, as_json: bool) -> None:
    """Every known queue: pending and running jobs, and whether it is paused, why, by whom, since when."""
    rows = target.client().queues.list()
    if as_json:
        emit_json(rows)
        return
    emit_table(
        ["queue", "state", "pending", "running", "reason", "by", "since"],
        [(r["queue"], r["state"], r["pending"], r["running"], r["reason"], r["changed_by"], r["since"]) for r in rows],
        empty="no queues: no job, definition, schedule or pause names one",
    )
