"""`jobsup audit`: the operator actions recorded in the audit trail, newest first."""

from __future__ import annotations

import click

from jobsup.ops.options import Target, json_option, with_target
from jobsup.ops.tables import emit_json, emit_table

SHOWN_IDS = 5  # job ids shown per row in the table (--json has them all)


@click.command("audit")
@click.option("--since", help="Only actions this recent (e.g. 1h, 1d, 30d).")
@click.option("--actor", help="Only actions by this actor (e.g. os:alice).")
@click.option("--action", help="Only this action (queue.pause), or a prefix ending in a dot (queue.).")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@json_option
@with_target
def audit(target: Target, since: str | None, actor: str | None, action: str | None, limit: int, as_json: bool) -> None:
    """Operator actions, newest first: who did what, to which queue, schedule or jobs."""
    entries = target.client().audit.list(since=since, actor=actor, action=action, limit=limit)
    if as_json:
        emit_json([entry.to_dict() for entry in entries])
        return
    emit_table(
        ["at", "actor", "action", "target", "jobs", "outcome", "detail"],
        [
            (e.at, e.actor, e.action, e.target, _jobs(e.job_count, e.job_ids), e.outcome, _detail(e.detail))
            for e in entries
        ],
        empty="no audited actions",
    )


def _jobs(count: int | None, ids: tuple[int, ...]) -> str | None:
    if count is None:
        return None
    shown = ", ".join(map(str, ids[:SHOWN_IDS])) + (", ..." if count > SHOWN_IDS else "")
    return f"{count} ({shown})" if ids else str(count)


def _detail(detail: dict[str, object] | None) -> str | None:
    if not detail:
        return None
    return " ".join(f"{key}={value}" for key, value in detail.items() if value is not None) or None
