"""`jobsup workers` and `jobsup stats`: who runs what, and how each queue is doing."""

from __future__ import annotations

import click

from jobsup.ops.options import Target, json_option, with_target
from jobsup.ops.tables import age, emit_json, emit_table


@click.command()
@json_option
@with_target
def workers(target: Target, as_json: bool) -> None:
    """Supervisors and workers of every instance, with their current job."""
    rows = target.client().workers.list()
    if as_json:
        emit_json(rows)
        return
    emit_table(
        ["kind", "host", "pid", "queue", "state", "job", "heartbeat age"],
        [(r["kind"], r["host"], r["pid"], r["queue"], r["state"], r["job"], age(r["heartbeat_at"])) for r in rows],
        empty="no jobsup processes are registered",
    )


@click.command()
@click.option("--window", default="5m", show_default=True, help="Throughput over this last stretch of time.")
@json_option
@with_target
def stats(target: Target, window: str, as_json: bool) -> None:
    """Per queue: waiting, pending (retrying, scheduled), running, finished jobs; throughput.

    Waiting jobs are those held back by their concurrency key; retrying and scheduled are
    parts of pending (after a failed attempt; not yet tried and due later). Then succeeded
    and dead-lettered jobs, the oldest due pending job's age, and successes per minute."""
    rows = target.client().queues.stats(window=window)
    if as_json:
        emit_json(rows)
        return
    emit_table(
        [
            *("queue", "waiting", "pending", "retrying", "scheduled", "running"),
            *("succeeded", "dead lettered", "oldest pending", "per minute"),
        ],
        [
            (
                r["queue"],
                r["waiting"],
                r["pending"],
                r["retrying"],
                r["scheduled"],
                r["running"],
                r["succeeded"],
                r["dead_lettered"],
                "-" if r["oldest_pending_seconds"] is None else f"{r['oldest_pending_seconds']:.0f}s",
                f"{r['per_minute']:.1f}",
            )
            for r in rows
        ],
        empty="no jobs",
    )
