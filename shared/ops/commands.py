"""The operator's commands: enqueue, inspect and cancel jobs, handle dead letters and
recurring schedules, see workers and queue statistics. Every list has `--json` (an array of
objects with the API's field names); `show` prints one object."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click

from jobsup.cli import EXIT_FAILURE, cli, configured_url
from jobsup.errors import BadInput, JobsupError
from jobsup.ops.tables import age, emit_json, emit_table
from jobsup.store.schema import STATUSES

database_option = click.option("--database-url", envvar="JOBSUP_DATABASE_URL", help="Default: sqlite:///jobsup.db.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


class NotFound(JobsupError):
    """Nothing matched (exit status 1)."""


def client_for(url: str | None) -> Any:
    from jobsup.client import Client

    return Client(configured_url(url))


def parse_payload(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise BadInput(f"--payload is not valid JSON: {exc}") from None


def parse_instant(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadInput(f"--run-at {text!r} is not an ISO 8601 time like 2030-01-01T09:00:00+00:00") from None
    if moment.tzinfo is None:
        raise BadInput(f"--run-at {text!r} has no time zone: add one, e.g. +00:00 or Z")
    return moment


@cli.command()
@click.argument("name")
@click.option("--payload", help="The job's payload as JSON.")
@click.option("--queue")
@click.option("--priority", type=int)
@click.option("--delay", help="Run after this long (10s, 5m, 1h).")
@click.option("--run-at", help="Run at this ISO 8601 time (with a time zone).")
@click.option("--max-attempts", type=int)
@click.option("--timeout", help="Stop the job after this long.")
@click.option("--unique-key", help="Return the live job with this key instead of adding another.")
@database_option
@json_option
def enqueue(
    name: str, payload: str | None, run_at: str | None, database_url: str | None, as_json: bool, **options: Any
) -> None:
    """Enqueue job NAME and print its id."""
    if run_at is not None and options["delay"] is not None:
        raise click.UsageError("give --delay or --run-at, not both")
    job_id = client_for(database_url).enqueue(
        name, parse_payload(payload), run_at=None if run_at is None else parse_instant(run_at), **options
    )
    emit_json({"id": job_id}) if as_json else click.echo(job_id)


@cli.group()
def jobs() -> None:
    """Look at and cancel jobs."""


@jobs.command("list")
@click.option("--status", type=click.Choice(STATUSES))
@click.option("--queue")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@database_option
@json_option
def jobs_list(status: str | None, queue: str | None, limit: int, database_url: str | None, as_json: bool) -> None:
    """Jobs, newest first."""
    found = client_for(database_url).list_jobs(status=status, queue=queue, limit=limit)
    show_jobs(found, as_json)


def show_jobs(found: list[Any], as_json: bool) -> None:
    if as_json:
        emit_json([job.to_dict() for job in found])
        return
    emit_table(
        ["id", "name", "queue", "status", "attempts", "run at", "last error"],
        [
            (job.id, job.name, job.queue, job.status, f"{job.attempts}/{job.max_attempts}", job.run_at, job.last_error)
            for job in found
        ],
        empty="no jobs",
    )


@jobs.command("show")
@click.argument("job_id", type=int)
@database_option
@json_option
def jobs_show(job_id: int, database_url: str | None, as_json: bool) -> None:
    """One job with its attempt history."""
    job = client_for(database_url).get(job_id)
    if job is None:
        raise NotFound(f"no job with id {job_id}")
    if as_json:
        emit_json(job.to_dict())
        return
    fields = job.to_dict()
    history = fields.pop("history")
    width = max(len(key) for key in fields)
    for key, value in fields.items():
        click.echo(f"{key.ljust(width)}  {json.dumps(value) if isinstance(value, dict | list) else value}")
    click.echo("")
    emit_table(
        ["attempt", "outcome", "owner", "started", "finished", "error"],
        [
            (a["attempt"], a["outcome"] or "running", a["owner"], a["started_at"], a["finished_at"], a["error"])
            for a in history
        ],
        empty="no attempts yet",
    )


@jobs.command("cancel")
@click.argument("job_id", type=int)
@database_option
def jobs_cancel(job_id: int, database_url: str | None) -> None:
    """Cancel a pending or running job."""
    if not client_for(database_url).cancel(job_id):
        raise NotFound(f"job {job_id} is not pending or running (or does not exist)")
    click.echo(f"cancelled job {job_id}")


@cli.group()
def dead() -> None:
    """Dead letters: jobs that used up their attempts or were discarded."""


@dead.command("list")
@click.option("--queue")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@database_option
@json_option
def dead_list(queue: str | None, limit: int, database_url: str | None, as_json: bool) -> None:
    """Dead letters, newest first."""
    show_jobs(client_for(database_url).dead_letters.list(queue=queue, limit=limit), as_json)


@dead.command("retry")
@click.argument("job_ids", type=int, nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Retry every dead letter.")
@database_option
def dead_retry(job_ids: tuple[int, ...], everything: bool, database_url: str | None) -> None:
    """Put dead letters back to pending with fresh attempts."""
    if bool(job_ids) == everything:
        raise click.UsageError("give job ids or --all (not both)")
    letters = client_for(database_url).dead_letters
    if everything:
        click.echo(f"retried {letters.retry_all()} jobs")
        return
    missing = [job_id for job_id in job_ids if not letters.retry(job_id)]
    click.echo(f"retried {len(job_ids) - len(missing)} jobs")
    if missing:
        raise NotFound(f"not dead-lettered: {', '.join(map(str, missing))}")


@dead.command("purge")
@click.option("--older-than", help="Only those that died longer ago than this (e.g. 30d).")
@database_option
def dead_purge(older_than: str | None, database_url: str | None) -> None:
    """Delete dead letters."""
    click.echo(f"purged {client_for(database_url).dead_letters.purge(older_than=older_than)} jobs")


@cli.group()
def recurring() -> None:
    """Recurring schedules."""


@recurring.command("add")
@click.argument("name")
@click.option("--job", required=True, help="The job name to enqueue at each slot.")
@click.option("--cron", required=True, help="Five cron fields, e.g. '*/5 * * * *', or @hourly.")
@click.option("--payload", help="The job's payload as JSON.")
@click.option("--queue")
@click.option("--timezone", default="UTC", show_default=True, help="IANA time zone of the cron times.")
@click.option("--priority", type=int)
@database_option
@json_option
def recurring_add(name: str, payload: str | None, database_url: str | None, as_json: bool, **options: Any) -> None:
    """Add or update schedule NAME."""
    schedule = client_for(database_url).add_recurring(name, payload=parse_payload(payload), **options)
    if as_json:
        emit_json(schedule.to_dict())
    else:
        click.echo(f"schedule {schedule.name}: next run {schedule.next_run_at:%Y-%m-%d %H:%M:%S} UTC")


@recurring.command("list")
@database_option
@json_option
def recurring_list(database_url: str | None, as_json: bool) -> None:
    """Every schedule."""
    schedules = client_for(database_url).list_recurring()
    if as_json:
        emit_json([schedule.to_dict() for schedule in schedules])
        return
    emit_table(
        ["name", "job", "cron", "timezone", "queue", "enabled", "next run", "last fired"],
        [(s.name, s.job, s.cron, s.timezone, s.queue, s.enabled, s.next_run_at, s.last_fired_at) for s in schedules],
        empty="no schedules",
    )


@recurring.command("remove")
@click.argument("name")
@database_option
def recurring_remove(name: str, database_url: str | None) -> None:
    """Delete schedule NAME."""
    if not client_for(database_url).remove_recurring(name):
        raise NotFound(f"no schedule named {name!r}")
    click.echo(f"removed schedule {name}")


def _set_enabled(name: str, enabled: bool, database_url: str | None) -> None:
    if not client_for(database_url).set_recurring_enabled(name, enabled):
        raise NotFound(f"no schedule named {name!r}")
    click.echo(f"{'enabled' if enabled else 'disabled'} schedule {name}")


@recurring.command("enable")
@click.argument("name")
@database_option
def recurring_enable(name: str, database_url: str | None) -> None:
    """Resume schedule NAME from now."""
    _set_enabled(name, True, database_url)


@recurring.command("disable")
@click.argument("name")
@database_option
def recurring_disable(name: str, database_url: str | None) -> None:
    """Pause schedule NAME."""
    _set_enabled(name, False, database_url)


@cli.command()
@database_option
@json_option
def workers(database_url: str | None, as_json: bool) -> None:
    """Supervisors and workers of every instance, with their current job."""
    client = client_for(database_url)
    rows = client.workers()
    if as_json:
        emit_json(rows)
        return
    emit_table(
        ["kind", "host", "pid", "queue", "state", "job", "heartbeat age"],
        [(r["kind"], r["host"], r["pid"], r["queue"], r["state"], r["job"], age(r["heartbeat_at"])) for r in rows],
        empty="no jobsup processes are registered",
    )


@cli.command()
@click.option("--window", default="5m", show_default=True, help="Throughput over this last stretch of time.")
@database_option
@json_option
def stats(window: str, database_url: str | None, as_json: bool) -> None:
    """Per queue: pending, running, succeeded, dead-lettered, oldest pending age, throughput."""
    rows = client_for(database_url).stats(window=window)
    if as_json:
        emit_json(rows)
        return
    emit_table(
        ["queue", "pending", "running", "succeeded", "dead lettered", "oldest pending", "per minute"],
        [
            (
                r["queue"],
                r["pending"],
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


__all__ = ["EXIT_FAILURE"]
