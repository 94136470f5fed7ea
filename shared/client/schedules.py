"""`client.schedules` (recurring schedules: listed, removed, paused; added by
`Client.add_recurring`, whose work is `add_schedule`) and `client.calendars` (business
calendars that schedules and job types name). Every change is an audited operator action
(see `jobsup.client.core`)."""

from __future__ import annotations

import builtins
from dataclasses import replace
from typing import Any

from jobsup.audit import actor_of
from jobsup.calendars import parse_calendar
from jobsup.checks import check_name, check_priority
from jobsup.client.core import ClientCore, found
from jobsup.cron import check_cron, zone
from jobsup.errors import BadInput, ConfigurationError
from jobsup.secrets import SealedParameterError, mask, new_row_id, schedule_binding
from jobsup.store.builder import fired_payload, typed_payload
from jobsup.store.definitions import sensitive_fields
from jobsup.store.recurring import MODES, OVERLAPS, POLICIES, SchedulePolicy
from jobsup.store.rows import RecurringSchedule


def add_schedule(
    core: ClientCore,
    name: str,
    *,
    job: str,
    cron: str,
    payload: Any,
    queue: str | None,
    timezone: str,
    priority: int | None,
    how: tuple[object, object, object, object],
    allow_unknown: bool,
    actor: str | None,
) -> RecurringSchedule:
    """`Client.add_recurring`; `how` is (overlap, calendar, calendar_mode, calendar_policy)."""
    check_name(name, "schedule name")
    check_name(job, "job name")
    who = actor_of(actor)
    policy = schedule_policy(*how)
    jobtype = core.job_type(job, allow_unknown)
    seal_id = new_row_id()  # new at every add: a re-added schedule does not open the old one's values
    text, sealing = typed_payload(jobtype, payload, binding=schedule_binding(name, job, seal_id))
    store = core.store
    if policy.calendar is not None and store.calendars.calendar_get(policy.calendar) is None:
        raise BadInput(f"calendar {policy.calendar!r} is not known; add it first with `jobsup calendars add`")
    before = store.recurring.recurring_get(name)
    schedule = store.recurring.recurring_upsert(
        name=name,
        job_name=job,
        cron=check_cron(cron),
        timezone=zone(timezone).key,
        payload=text,
        key_id=None if sealing is None else sealing.keyring.newest,
        seal_id=seal_id,
        queue=check_name(queue or jobtype.queue, "queue"),
        priority=jobtype.priority if priority is None else check_priority(priority),
        how=policy,
    )
    if not same_schedule(before, schedule):  # the same call at every start is no action
        detail = {
            "job": schedule.job,
            "cron": schedule.cron,
            "timezone": schedule.timezone,
            "queue": schedule.queue,
            **({} if schedule.overlap == "allow" else {"overlap": schedule.overlap}),
            **({} if schedule.calendar is None else _calendar_detail(schedule)),
        }
        core.audited(who, "recurring.add", target=name, detail=detail)
    return _masked(core, [schedule])[0]


class Schedules:
    """Recurring schedules (added with `Client.add_recurring`)."""

    def __init__(self, core: ClientCore) -> None:
        self._core = core

    def list(self) -> builtins.list[RecurringSchedule]:
        """Every schedule, its sensitive values shown as ``***``."""
        return _masked(self._core, self._core.store.recurring.recurring_list())

    def get(self, name: str) -> RecurringSchedule | None:
        """The schedule `name`, its sensitive values shown as ``***``; None if there is none."""
        found = self._core.store.recurring.recurring_get(name)
        return None if found is None else _masked(self._core, [found])[0]

    def remove(self, name: str, *, actor: str | None = None) -> bool:
        """Delete the schedule `name`; False if there is none. Audited."""
        who = actor_of(actor)
        removed = self._core.store.recurring.recurring_remove(name)
        self._core.audited(who, "recurring.remove", target=name, outcome=found(removed))
        return removed

    def set_enabled(self, name: str, enabled: bool, *, actor: str | None = None) -> bool:
        """Pause or resume a schedule; resuming starts from now (no catch-up). False if
        unknown. Audited."""
        who = actor_of(actor)
        changed = self._core.store.recurring.recurring_set_enabled(name, enabled)
        action = "recurring.enable" if enabled else "recurring.disable"
        self._core.audited(who, action, target=name, outcome=found(changed))
        return changed


class Calendars:
    """Business calendars: windows that schedules and job types keep out of (or in)."""

    def __init__(self, core: ClientCore) -> None:
        self._core = core

    def add(self, name: str, rules: Any, *, timezone: str = "UTC", actor: str | None = None) -> dict[str, Any]:
        """Add or replace the calendar `name`: `rules` (a list of rules, or its JSON text;
        see docs/how-to/calendars.md) read in `timezone`. Bad rules
        raise `BadInput` naming the rule, and nothing is written. Schedules see the change
        within `jobsup.supervisor.recurring.CALENDAR_TTL`; jobs already enqueued keep their
        run_at. Audited."""
        check_name(name, "calendar name")
        who = actor_of(actor)
        calendar = parse_calendar(name, rules, timezone)
        created = self._core.store.calendars.calendar_upsert(calendar)
        detail = {"timezone": calendar.timezone, "rules": calendar.describe()}
        self._core.audited(who, "calendar.add" if created else "calendar.update", target=name, detail=detail)
        return {"name": name, **detail}

    def list(self) -> builtins.list[dict[str, Any]]:
        """Every calendar: name, timezone, rules (as stored), created_at, updated_at."""
        return self._core.store.calendars.calendar_rows()

    def remove(self, name: str, *, actor: str | None = None) -> bool:
        """Delete the calendar `name`; False if there is none. A calendar a schedule names
        is refused (`BadInput` naming the schedules): change or remove them first. Audited."""
        who = actor_of(actor)
        removed = self._core.store.calendars.calendar_remove(name)
        self._core.audited(who, "calendar.remove", target=name, outcome=found(removed))
        return removed


def schedule_policy(overlap: object, calendar: object, mode: object, policy: object) -> SchedulePolicy:
    """The schedule's options checked: `BadInput` naming the one that is not known."""
    for value, what, allowed in ((overlap, "overlap", OVERLAPS), (mode, "calendar_mode", MODES)):
        if value not in allowed:
            raise BadInput(f"{what} {value!r} is not known; use one of {', '.join(allowed)}")
    if policy not in POLICIES:
        raise BadInput(f"calendar_policy {policy!r} is not known; use one of {', '.join(POLICIES)}")
    if calendar is not None:
        check_name(calendar, "calendar name")
    assert isinstance(overlap, str) and isinstance(mode, str) and isinstance(policy, str)
    return SchedulePolicy(overlap, calendar if isinstance(calendar, str) else None, mode, policy)


def same_schedule(before: RecurringSchedule | None, after: RecurringSchedule) -> bool:
    """Whether an upsert changed nothing a schedule does (its sealed values compared
    opened: each upsert seals them afresh)."""
    if before is None:
        return False

    def shape(schedule: RecurringSchedule) -> tuple[Any, ...]:
        payload, _ = fired_payload(schedule)  # opened, as a fire sees it
        how = (schedule.overlap, schedule.calendar, schedule.calendar_mode, schedule.calendar_policy)
        return (schedule.job, schedule.cron, schedule.timezone, schedule.queue, schedule.priority, payload, how)

    try:
        return shape(before) == shape(after)
    except (SealedParameterError, ConfigurationError):
        return False  # sealed under a key this process lacks: count it as a change


def _masked(core: ClientCore, schedules: list[RecurringSchedule]) -> list[RecurringSchedule]:
    """`schedules` with sealed values, and values of fields their job type marks sensitive
    now (a row may predate it), shown as ``***``."""
    with core.store.db.read("recurring") as conn:
        sensitive = sensitive_fields(conn, {s.job for s in schedules})
    return [replace(s, payload=mask(s.payload, sensitive.get(s.job, frozenset()))) for s in schedules]


def _calendar_detail(schedule: RecurringSchedule) -> dict[str, Any]:
    return {"calendar": schedule.calendar, "mode": schedule.calendar_mode, "policy": schedule.calendar_policy}
