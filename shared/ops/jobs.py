"""`jobsup enqueue`, `jobsup jobs list|show|logs|cancel` and `jobsup dead list|retry|purge`."""

from __future__ import annotations

import json
import signal
import threading
from datetime import UTC
from typing import TYPE_CHECKING, Any

import click

from jobsup.audit import actor_of
from jobsup.ops.options import NotFound, Target, actor_option, json_option, parse_instant, parse_payload, with_target
from jobsup.ops.tables import emit_json, emit_table
from jobsup.store.schema import FINISHED_STATUSES
from jobsup.store.states import FILTERS

if TYPE_CHECKING:
    from jobsup.client import Client
    from jobsup.store.rows import Job

LOG_PAGE = 1000  # lines read at once
FOLLOW_EVERY = 0.5  # seconds between looks for new lines


@click.command()
@click.argument("name")
@click.option("--payload", help="The job's payload as JSON.")
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="NAME=VALUE",
    help="One parameter, converted by the job type's schema (repeatable; over --payload's).",
)
@click.option("--queue", help="The queue to put it in (default: its job type's).")
@click.option("--priority", type=int, help="Higher runs first among due jobs of a queue (default: its type's, 0).")
@click.option("--delay", help="Run after this long (10s, 5m, 1h).")
@click.option("--run-at", help="Run at this ISO 8601 time (with a time zone).")
@click.option("--max-attempts", type=click.IntRange(min=1), help="Attempts before it is dead-lettered.")
@click.option("--timeout", help="Stop the job after this long.")
@click.option("--unique-key", help="Return the live job with this key instead of adding another.")
@click.option("--start-within", help="SLA: it should start within this long of being due (5m).")
@click.option("--finish-within", help="SLA: it should finish within this long of being due (1h).")
@click.option("--allow-unknown", is_flag=True, help="Enqueue a name no definition knows (with the defaults).")
@actor_option
@json_option
@with_target
def enqueue(
    target: Target,
    name: str,
    payload: str | None,
    params: tuple[str, ...],
    run_at: str | None,
    as_json: bool,
    **options: Any,
) -> None:
    """Enqueue job NAME and print its id (the job's actor, and the audit trail's, is --actor)."""
    if run_at is not None and options["delay"] is not None:
        raise click.UsageError("give --delay or --run-at, not both")
    allow_unknown = options.pop("allow_unknown")
    who = actor_of(options.pop("actor"))
    given = {key: value for key, value in options.items() if value is not None}
    if run_at is not None:
        given["run_at"] = parse_instant(run_at)
    client = target.client()
    value = parse_payload(payload)
    if params:
        value = with_params(client, name, value, params, allow_unknown)
    job_id = client.enqueue_as_operator(name, value, actor=who, allow_unknown=allow_unknown, **given)
    emit_json({"id": job_id}) if as_json else click.echo(job_id)


def with_params(
    client: Client, name: str, payload: Any, params: tuple[str, ...], allow_unknown: bool
) -> dict[str, Any]:
    from jobsup.paramcheck import from_text

    if payload is not None and not isinstance(payload, dict):
        raise click.UsageError("--param adds to a --payload that is a JSON object")
    resolver = client.store.resolver  # as `enqueue` finds the type: registered, published, else defaults
    jobtype = resolver.settings_of(name) if allow_unknown else resolver.require(name)
    merged = dict(payload or {})
    for param in params:
        key, sep, text = param.partition("=")
        if not sep or not key:
            raise click.UsageError(f"--param {param!r} is not NAME=VALUE")
        merged[key] = from_text(jobtype.params, key, text, job=name)
    return merged


@click.group()
def jobs() -> None:
    """Look at and cancel jobs."""


@jobs.command("list")
@click.option(
    "--status",
    type=click.Choice(FILTERS),
    help="Only jobs of this status; retrying and scheduled are the pending ones after a failure, and due later.",
)
@click.option("--queue", help="Only this queue's jobs.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--sla-breached", is_flag=True, help="Only jobs marked past an SLA deadline.")
@json_option
@with_target
def jobs_list(
    target: Target, status: str | None, queue: str | None, limit: int, sla_breached: bool, as_json: bool
) -> None:
    """Jobs, newest first."""
    found = target.client().list_jobs(status=status, queue=queue, limit=limit, sla_breached=sla_breached)
    show_jobs(found, as_json)


def show_jobs(found: list[Any], as_json: bool) -> None:
    if as_json:
        emit_json([job.to_dict() for job in found])
        return
    emit_table(
        ["id", "name", "queue", "status", "attempts", "run at", "last error"],
        [
            (
                job.id,
                job.name,
                job.queue,
                job.status,
                f"{job.attempts}/{job.max_attempts}",
                job.run_at,
                shown_error(job),
            )
            for job in found
        ],
        empty="no jobs",
    )


@jobs.command("show")
@click.argument("job_id", type=int)
@click.option("--traceback", "with_traceback", is_flag=True, help="Print where each failed attempt was raised.")
@json_option
@with_target
def jobs_show(target: Target, job_id: int, as_json: bool, with_traceback: bool) -> None:
    """One job with its result and its attempt history (--traceback: where each failure was raised)."""
    job = target.client().get(job_id)
    if job is None:
        raise NotFound(f"no job with id {job_id}")
    if as_json:
        emit_json(job.to_dict())
        return
    fields = job.to_dict()
    history = fields.pop("history")
    # Unset fields (no actor, no unique key, no SLA...) are left out: --json shows them all.
    shown = {key: value for key, value in fields.items() if value is not None}
    width = max(len(key) for key in shown)
    for key, value in shown.items():
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
    for attempt in history if with_traceback else ():
        if attempt["traceback"]:
            click.echo(f"\nattempt {attempt['attempt']}: traceback, innermost last")
            for frame in attempt["traceback"]:
                click.echo(f'  File "{frame["file"]}", line {frame["line"]}, in {frame["function"]}')


def shown_error(job: Job) -> str | None:
    """A job's last error, but not on a job that went on to succeed: in a list it would read
    as a failure (`jobs show` keeps every attempt's error)."""
    return None if job.status == "succeeded" else job.last_error


@jobs.command("logs")
@click.argument("job_id", type=int)
@click.option("--follow", is_flag=True, help="Keep printing new lines until the job has finished.")
@json_option
@with_target
def jobs_logs(target: Target, job_id: int, follow: bool, as_json: bool) -> None:
    """What a job logged through ctx.log, oldest first (--json with --follow: one object per line)."""
    client = target.client()
    if client.get(job_id) is None:
        raise NotFound(f"no job with id {job_id}")
    if follow:
        # Ctrl-C is how a follow is meant to end early. It only sets a flag: raised as
        # KeyboardInterrupt inside a database call, it could leave the connection pool
        # half-way and the exit hanging.
        stop = threading.Event()
        previous = signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
        try:
            follow_logs(client, job_id, as_json, stop)
        finally:
            signal.signal(signal.SIGINT, previous)
        return
    lines, after = [], None
    while page := client.logs(job_id, after_id=after, limit=LOG_PAGE):
        lines += page
        after = page[-1].id
    if as_json:
        emit_json([line.to_dict() for line in lines])
    else:
        for line in lines:
            click.echo(log_line(line))
        if not lines:
            click.echo("no lines logged")


def follow_logs(client: Client, job_id: int, as_json: bool, stop: threading.Event) -> None:
    """Print the job's lines as they are stored, until it has finished and none are left
    (or `stop` is set)."""
    after = None
    while not stop.is_set():
        job = client.get(job_id)  # before the read: lines stored by then are in it
        lines = client.logs(job_id, after_id=after, limit=LOG_PAGE)
        for line in lines:
            click.echo(json.dumps(line.to_dict()) if as_json else log_line(line))
        if lines:
            after = lines[-1].id
            if len(lines) == LOG_PAGE:
                continue  # more are there already
        elif job is None or job.status in FINISHED_STATUSES:
            return  # a finished job's lines were written before its outcome
        stop.wait(FOLLOW_EVERY)


def log_line(line: Any) -> str:
    at = line.logged_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if line.logged_at else "-"
    return f"{at}  {line.level.upper():<7}  #{line.attempt}  {line.message}"


@jobs.command("rerun")
@click.argument("job_id", type=int)
@actor_option
@json_option
@with_target
def jobs_rerun(target: Target, job_id: int, actor: str | None, as_json: bool) -> None:
    """Make a new job from a finished one (succeeded, dead-lettered or cancelled), linked to it."""
    from jobsup.errors import JobNotFound

    try:
        new_id = target.client().rerun(job_id, actor=actor)
    except JobNotFound as exc:
        raise NotFound(str(exc)) from None
    if as_json:
        emit_json({"id": new_id, "rerun_of": job_id})
        return
    click.echo(f"job {new_id} is a rerun of job {job_id}")


@jobs.command("cancel")
@click.argument("job_id", type=int)
@actor_option
@with_target
def jobs_cancel(target: Target, job_id: int, actor: str | None) -> None:
    """Cancel a pending or running job."""
    client = target.client()
    if not client.cancel(job_id, actor=actor):
        raise NotFound(f"job {job_id} is not pending or running (or does not exist)")
    job = client.get(job_id)
    if job is not None and job.status == "running":
        click.echo(f"asked running job {job_id} to stop: it ends cancelled once its worker stops it")
    else:
        click.echo(f"cancelled job {job_id}")


@click.group()
def dead() -> None:
    """Dead letters: jobs that used up their attempts or were discarded."""


@dead.command("list")
@click.option("--queue", help="Only this queue's dead letters.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@json_option
@with_target
def dead_list(target: Target, queue: str | None, limit: int, as_json: bool) -> None:
    """Dead letters, newest first."""
    show_jobs(target.client().dead_letters.list(queue=queue, limit=limit), as_json)


@dead.command("retry")
@click.argument("job_ids", type=int, nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Retry every dead letter.")
@actor_option
@with_target
def dead_retry(target: Target, job_ids: tuple[int, ...], everything: bool, actor: str | None) -> None:
    """Put dead letters back to pending with a fresh budget of attempts."""
    if bool(job_ids) == everything:
        raise click.UsageError("give job ids or --all (not both)")
    letters = target.client().dead_letters
    if everything:
        click.echo(f"retried {letters.retry_all(actor=actor)} jobs")
        return
    missing = [job_id for job_id in job_ids if not letters.retry(job_id, actor=actor)]
    click.echo(f"retried {len(job_ids) - len(missing)} jobs")
    if missing:
        raise NotFound(f"not dead-lettered: {', '.join(map(str, missing))}")


@dead.command("purge")
@click.option("--older-than", help="Only those that died longer ago than this (e.g. 30d).")
@actor_option
@with_target
def dead_purge(target: Target, older_than: str | None, actor: str | None) -> None:
    """Delete dead letters.

    Every job type's alike: a type's own `retain` is for the supervisor's purge, not this."""
    click.echo(f"purged {target.client().dead_letters.purge(older_than=older_than, actor=actor)} jobs")
