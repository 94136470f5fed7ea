"""`jobsup workflows list|show|cancel|retry`."""

from __future__ import annotations

import click

from jobsup.ops.options import NotFound, Target, actor_option, json_option, with_target
from jobsup.ops.tables import emit_json, emit_table, status_counts


@click.group()
def workflows() -> None:
    """Workflows: jobs that run after the jobs they depend on."""


@workflows.command("list")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@json_option
@with_target
def workflows_list(target: Target, limit: int, as_json: bool) -> None:
    """Workflows, newest first, with their steps' counts by status."""
    found = target.client().workflows.list(limit=limit)
    if as_json:
        emit_json([w.to_dict() for w in found])
        return
    rows = [(w.id, w.name, w.status, sum(w.counts.values()), status_counts(w.counts), w.created_at) for w in found]
    emit_table(["id", "name", "status", "steps", "counts", "created"], rows, empty="no workflows")


@workflows.command("show")
@click.argument("workflow_id", type=int)
@json_option
@with_target
def workflows_show(target: Target, workflow_id: int, as_json: bool) -> None:
    """One workflow with each step's status and dependencies."""
    found = target.client().workflows.get(workflow_id)
    if found is None:
        raise NotFound(f"no workflow with id {workflow_id}")
    if as_json:
        emit_json(found.to_dict())
        return
    click.echo(f"workflow {found.id} {found.name!r}: {found.status} ({status_counts(found.counts)})")
    emit_table(
        ["step", "job id", "job", "status", "after", "attempts", "last error"],
        [
            (s.name, s.job_id, s.job, s.status, ", ".join(s.depends_on) or "-", s.attempts, s.last_error)
            for s in found.steps
        ],
    )


@workflows.command("cancel")
@click.argument("workflow_id", type=int)
@actor_option
@with_target
def workflows_cancel(target: Target, workflow_id: int, actor: str | None) -> None:
    """Cancel every unfinished step."""
    client = target.client()
    if client.workflows.get(workflow_id) is None:
        raise NotFound(f"no workflow with id {workflow_id}")
    count = client.workflows.cancel(workflow_id, actor=actor)
    click.echo(f"cancelled {count} steps of workflow {workflow_id} (a running one ends once its worker stops it)")


@workflows.command("retry")
@click.argument("workflow_id", type=int)
@actor_option
@with_target
def workflows_retry(target: Target, workflow_id: int, actor: str | None) -> None:
    """Run a finished workflow's failed and cancelled steps again."""
    retried = target.client().workflows.retry(workflow_id, actor=actor)
    click.echo(f"retrying {len(retried)} steps of workflow {workflow_id}")
