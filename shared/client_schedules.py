"""The client's recurring schedules and calendars (a part of `jobsup.Client`, kept apart by
role). Every method that changes something is an audited operator action (see
`jobsup.client_ops`)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from jobsup.audit import actor_of
from jobsup.calendars import parse_calendar
from jobsup.checks import check_name, check_priority
from jobsup.client_ops import same_schedule
from jobsup.cron import check_cron, zone
from jobsup.errors import BadInput
from jobsup.secrets import mask, new_row_id, schedule_binding
from jobsup.store.builder import typed_payload
from jobsup.store.definitions import sensitive_fields
from jobsup.store.recurring import MODES, OVERLAPS, POLICIES, SchedulePolicy
from jobsup.store.rows import RecurringSchedule

if TYPE_CHECKING:
    from jobsup.jobtypes import JobType
    from jobsup.store import Store


class SchedulesAPI:
    """`Client`'s methods for recurring schedules and calendars."""

    if TYPE_CHECKING:
        store: Store

        def _ready(self) -> None: ...

        def _job_type(self, name: str, allow_unknown: bool) -> JobType: ...

        def _audit(self, actor: str, action: str, **fields: Any) -> None: ...

    # -- recurring schedules --------------------------------------------------------------

    def add_recurring(
        self,
        name: str,
        *,
        job: str,
        cron: str,
        payload: Any = None,
        queue: str | None = None,
        timezone: str = "UTC",
        priority: int | None = None,
        overlap: str = "allow",
        calendar: str | None = None,
        calendar_mode: str = "blackout",
        calendar_policy: str = "skip",
        allow_unknown: bool = False,
        actor: str | None = None,
    ) -> RecurringSchedule:
        """Add or update the schedule `name`: run `job` with `payload` at each `cron` slot in
        `timezone`. Safe to call at every startup on every instance: the same cron keeps
        its next run, a changed one starts from now.

        `overlap`: what a slot does while the schedule's previous job is still waiting,
        pending or running: ``allow`` (fire anyway), ``skip`` (not fired; counted) or
        ``queue`` (fired once that job has finished). `calendar` names a calendar
        (`add_calendar`); with `calendar_mode` ``blackout`` a slot inside it, with
        ``allowed`` a slot outside it, is skipped (`calendar_policy` ``skip``) or fired to
        run at the end of the window (``defer_to_end``).

        A bad cron, time zone, option or an unknown calendar raises `BadInput`, an unknown
        job `UnknownJob` (unless `allow_unknown`), and nothing is written."""
        check_name(name, "schedule name")
        check_name(job, "job name")
        who = actor_of(actor)
        how = _schedule_policy(overlap, calendar, calendar_mode, calendar_policy)
        jobtype = self._job_type(job, allow_unknown)
        seal_id = new_row_id()  # new at every add: a re-added schedule does not open the old one's values
        text, sealing = typed_payload(jobtype, payload, binding=schedule_binding(name, job, seal_id))
        self._ready()
        if how.calendar is not None and self.store.calendars.calendar_get(how.calendar) is None:
            raise BadInput(f"calendar {how.calendar!r} is not known; add it first with `jobsup calendars add`")
        before = self.store.recurring.recurring_get(name)
        schedule = self.store.recurring.recurring_upsert(
            name=name,
            job_name=job,
            cron=check_cron(cron),
            timezone=zone(timezone).key,
            payload=text,
            key_id=None if sealing is None else sealing.keyring.newest,
            seal_id=seal_id,
            queue=check_name(queue or jobtype.queue, "queue"),
            priority=jobtype.priority if priority is None else check_priority(priority),
            how=how,
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
            self._audit(who, "recurring.add", target=name, detail=detail)
        return self._masked([schedule])[0]

    def remove_recurring(self, name: str, *, actor: str | None = None) -> bool:
        who = actor_of(actor)
        self._ready()
        removed = self.store.recurring.recurring_remove(name)
        self._audit(who, "recurring.remove", target=name, outcome=_found(removed))
        return removed

    def set_recurring_enabled(self, name: str, enabled: bool, *, actor: str | None = None) -> bool:
        """Pause or resume a schedule; resuming starts from now (no catch-up). False if unknown."""
        who = actor_of(actor)
        self._ready()
        changed = self.store.recurring.recurring_set_enabled(name, enabled)
        self._audit(who, "recurring.enable" if enabled else "recurring.disable", target=name, outcome=_found(changed))
        return changed

    def list_recurring(self) -> list[RecurringSchedule]:
        """Every schedule, its sensitive values shown as ``***``."""
        self._ready()
        return self._masked(self.store.recurring.recurring_list())

    def _masked(self, schedules: list[RecurringSchedule]) -> list[RecurringSchedule]:
        """`schedules` with sealed values, and values of fields their job type marks
        sensitive now (a row may predate it), shown as ``***``."""
        with self.store.db.read("recurring") as conn:
            sensitive = sensitive_fields(conn, {s.job for s in schedules})
        return [replace(s, payload=mask(s.payload, sensitive.get(s.job, frozenset()))) for s in schedules]

    # -- calendars ------------------------------------------------------------------------

    def add_calendar(self, name: str, rules: Any, *, timezone: str = "UTC", actor: str | None = None) -> dict[str, Any]:
        """Add or replace the calendar `name`: `rules` (a list of rules, or its JSON text;
        see the README's "Calendars and blackout windows") read in `timezone`. Bad rules
        raise `BadInput` naming the rule, and nothing is written. Schedules see the change
        within `jobsup.supervisor.recurring.CALENDAR_TTL`; jobs already enqueued keep their
        run_at."""
        check_name(name, "calendar name")
        who = actor_of(actor)
        calendar = parse_calendar(name, rules, timezone)
        self._ready()
        created = self.store.calendars.calendar_upsert(calendar)
        detail = {"timezone": calendar.timezone, "rules": calendar.describe()}
        self._audit(who, "calendar.add" if created else "calendar.update", target=name, detail=detail)
        return {"name": name, **detail}

    def calendars(self) -> list[dict[str, Any]]:
        """Every calendar: name, timezone, rules (as stored), created_at, updated_at."""
        self._ready()
        return self.store.calendars.calendar_rows()

    def remove_calendar(self, name: str, *, actor: str | None = None) -> bool:
        """Delete the calendar `name`; False if there is none. A calendar a schedule names
        is refused (`BadInput` naming the schedules): change or remove them first."""
        who = actor_of(actor)
        self._ready()
        removed = self.store.calendars.calendar_remove(name)
        self._audit(who, "calendar.remove", target=name, outcome=_found(removed))
        return removed


def _schedule_policy(overlap: object, calendar: object, mode: object, policy: object) -> SchedulePolicy:
    for value, what, allowed in ((overlap, "overlap", OVERLAPS), (mode, "calendar_mode", MODES)):
        if value not in allowed:
            raise BadInput(f"{what} {value!r} is not known; use one of {', '.join(allowed)}")
    if policy not in POLICIES:
        raise BadInput(f"calendar_policy {policy!r} is not known; use one of {', '.join(POLICIES)}")
    if calendar is not None:
        check_name(calendar, "calendar name")
    assert isinstance(overlap, str) and isinstance(mode, str) and isinstance(policy, str)
    return SchedulePolicy(overlap, calendar if isinstance(calendar, str) else None, mode, policy)


def _calendar_detail(schedule: RecurringSchedule) -> dict[str, Any]:
    return {"calendar": schedule.calendar, "mode": schedule.calendar_mode, "policy": schedule.calendar_policy}


def _found(done: bool) -> str:
    return "ok" if done else "not_found"
