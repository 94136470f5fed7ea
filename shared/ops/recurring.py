"""`jobsup recurring add|list|remove|enable|disable`."""

from __future__ import annotations

from typing import Any

import click

from jobsup.ops.options import NotFound, Target, actor_option, json_option, parse_payload, with_target
from jobsup.ops.tables import emit_json, emit_table
from jobsup.store.rows import RecurringSchedule

HEADERS: tuple[str, ...] = ("name", "job", "cron", "timezone", "queue", "enabled", "next run", "last fired")
HEADERS += ("overlap", "calendar", "skipped", "last skipped")


@click.group()
def recurring() -> None:
    """Recurring schedules."""


@recurring.command("add")
@click.argument("name")
@click.option("--job", required=True, help="The job name to enqueue at each slot.")
@click.option("--cron", required=True, help="Five cron fields, e.g. '*/5 * * * *', or @hourly.")
@click.option("--payload", help="The job's payload as JSON.")
@click.option("--queue", help="The queue its jobs go to (default: the job type's).")
@click.option("--timezone", default="UTC", show_default=True, help="IANA time zone of the cron times.")
@click.option("--priority", type=int, help="Its jobs' priority: higher runs first among due jobs of a queue.")
@click.option(
    "--overlap",
    type=click.Choice(["allow", "skip", "queue"]),
    default="allow",
    show_default=True,
    help="A slot while the last run is live: fire it, skip it, or fire it to wait behind that run.",
)
@click.option("--calendar", help="A calendar (jobsup calendars add) whose windows apply to the slots.")
@click.option(
    "--calendar-mode",
    type=click.Choice(["blackout", "allowed"]),
    default="blackout",
    show_default=True,
    help="blackout: no slot inside the calendar; allowed: no slot outside it.",
)
@click.option(
    "--calendar-policy",
    type=click.Choice(["skip", "defer_to_end"]),
    default="skip",
    show_default=True,
    help="A blocked slot is skipped, or its job runs at the end of the window.",
)
@click.option("--allow-unknown", is_flag=True, help="Schedule a job name no definition knows.")
@actor_option
@json_option
@with_target
def recurring_add(target: Target, name: str, payload: str | None, as_json: bool, **options: Any) -> None:
    """Add or update schedule NAME."""
    schedule = target.client().add_recurring(name, payload=parse_payload(payload), **options)
    if as_json:
        emit_json(schedule.to_dict())
    else:
        click.echo(f"schedule {schedule.name}: next run {schedule.next_run_at:%Y-%m-%d %H:%M:%S} UTC")


@recurring.command("list")
@json_option
@with_target
def recurring_list(target: Target, as_json: bool) -> None:
    """Every schedule."""
    schedules = target.client().schedules.list()
    if as_json:
        emit_json([schedule.to_dict() for schedule in schedules])
        return
    emit_table(
        [*HEADERS],
        [_row(s) for s in schedules],
        empty="no schedules",
    )


def _row(s: RecurringSchedule) -> tuple[object, ...]:
    when = (s.next_run_at, s.last_fired_at)
    return (
        s.name,
        s.job,
        s.cron,
        s.timezone,
        s.queue,
        s.enabled,
        *when,
        s.overlap,
        _calendar(s),
        s.skipped,
        s.last_skipped_at,
    )


def _calendar(s: RecurringSchedule) -> str:
    return "" if s.calendar is None else f"{s.calendar} ({s.calendar_mode}, {s.calendar_policy})"


@recurring.command("remove")
@click.argument("name")
@actor_option
@with_target
def recurring_remove(target: Target, name: str, actor: str | None) -> None:
    """Delete schedule NAME."""
    if not target.client().schedules.remove(name, actor=actor):
        raise NotFound(f"no schedule named {name!r}")
    click.echo(f"removed schedule {name}")


def _set_enabled(target: Target, name: str, enabled: bool, actor: str | None) -> None:
    if not target.client().schedules.set_enabled(name, enabled, actor=actor):
        raise NotFound(f"no schedule named {name!r}")
    click.echo(f"{'enabled' if enabled else 'disabled'} schedule {name}")


@recurring.command("enable")
@click.argument("name")
@actor_option
@with_target
def recurring_enable(target: Target, name: str, actor: str | None) -> None:
    """Resume schedule NAME from now."""
    _set_enabled(target, name, True, actor)


@recurring.command("disable")
@click.argument("name")
@actor_option
@with_target
def recurring_disable(target: Target, name: str, actor: str | None) -> None:
    """Pause schedule NAME."""
    _set_enabled(target, name, False, actor)
