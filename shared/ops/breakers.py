"""`jobsup breaker list|reset`: the circuit breakers of job types (`jobsup.store.breakers`)."""

from __future__ import annotations

import click

from jobsup.ops.options import NotFound, Target, actor_option, json_option, with_target
from jobsup.ops.tables import age, emit_json, emit_table


@click.group()
def breaker() -> None:
    """Circuit breakers: job types whose jobs are held back after consecutive failures."""


@breaker.command("list")
@json_option
@with_target
def breaker_list(target: Target, as_json: bool) -> None:
    """Every job type's breaker that has counted a failure: its state, failures, and when it lets a probe through."""
    rows = target.client().breakers.list()
    if as_json:
        emit_json(rows)
        return
    emit_table(
        ["job", "state", "failures", "opened", "reopen at", "probe", "by", "changed"],
        [
            (
                *(r["name"], r["state"], r["failures"], age(r["opened_at"]), r["reopen_at"]),
                *(r["probe_job_id"], r["changed_by"], age(r["changed_at"])),
            )
            for r in rows
        ],
        empty="no breakers: no job type with a breaker has failed",
    )


@breaker.command("reset")
@click.argument("name")
@actor_option
@with_target
def breaker_reset(target: Target, name: str, actor: str | None) -> None:
    """Close NAME's breaker now: its jobs are claimed again and its failure count starts from zero."""
    client = target.client()
    if client.breakers.reset(name, actor=actor):
        click.echo(f"closed the breaker of {name}")
    elif name not in {row["name"] for row in client.breakers.list()}:
        raise NotFound(f"no breaker for {name!r}: its job type has no breaker, or has never failed")
    else:
        click.echo(f"the breaker of {name} was closed already")
