"""What the fire transition decides about a due slot (DESIGN section 9, issue 12).

A slot is fired, skipped (counted on the schedule, reason ``overlap`` or ``calendar``), or
deferred (fired with the job's run_at at the end of its blackout, or the start of its next
allowed window). With overlap ``queue`` every slot fires, and its job waits behind the live
one: a queue schedule's jobs share the concurrency key ``recurring:<name>`` with a limit of
one (`jobsup.store.concurrency_keys`), so each is admitted when the one before it ends, in slot order.

Every decision is made inside the fire's transaction: the live-run check reads the
schedule's unfinished jobs there, and the skip is recorded by the same compare-and-set on
`next_run_at` that a fire makes, so of several instances only one fires or skips a slot and
none fires a slot another skipped. Only a fire creates a schedule's jobs, and a fire's job
commits with the `next_run_at` it moved: an instance that read that `next_run_at` sees the job.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select

from jobsup.calendars import Calendar
from jobsup.cron import latest_slot, next_slot
from jobsup.errors import BadInput, ConstraintViolation
from jobsup.events import publishing
from jobsup.observe.events import emit
from jobsup.store import concurrency_keys
from jobsup.store.builder import build, fired_payload
from jobsup.store.recurring import BLACKOUT, DEFER, QUEUE, SKIP, RecurringStore
from jobsup.store.rows import RecurringSchedule
from jobsup.store.schema import UNFINISHED_STATUSES, job

if TYPE_CHECKING:
    from jobsup.store.transitions import Transitions

FIRED, ALREADY_FIRED, SKIPPED = "fired", "already_fired", "skipped"
OVERLAP, CALENDAR = "overlap", "calendar"  # the reasons a slot is skipped


def fire(
    transitions: Transitions,
    recurring: RecurringStore,
    schedule: RecurringSchedule,
    *,
    now: datetime | None = None,
    calendar: Calendar | None = None,
) -> str:
    """See `Transitions.fire`."""
    at = now or recurring.clock()
    assert schedule.next_run_at is not None
    slot = latest_slot(schedule.cron, schedule.timezone, schedule.next_run_at, at)
    following = next_slot(schedule.cron, schedule.timezone, slot)
    blocked, run_at = calendar_decision(schedule, calendar, slot)
    jobtype = transitions.resolver.settings_of(schedule.job)
    options: dict[str, Any] = {"queue": schedule.queue, "priority": schedule.priority}
    if run_at is not None and run_at > slot:
        options["run_at"] = run_at
    payload, sealed = fired_payload(schedule)
    fired = (schedule.name, slot)
    new = build(jobtype, payload, options, recurring=fired, timezone=schedule.timezone, also_sealed=sealed)
    if schedule.overlap == QUEUE:  # behind the live run, under the schedule's own key (not its type's)
        new = replace(new, concurrency_key=f"recurring:{schedule.name}", concurrency_limit=1)
    reason = CALENDAR if blocked else None
    clock = transitions.dialect.clock_params(now)
    try:
        with transitions.db.transaction("recurring") as conn:
            if reason is None and schedule.overlap == SKIP and live_run(conn, schedule.name) is not None:
                reason = OVERLAP
            if not recurring.advance(conn, schedule, following, at, fired=reason is None):
                emit("recurring.already_fired", schedule=schedule.name)
                return ALREADY_FIRED
            if reason is None:
                with concurrency_keys.bounded(conn, transitions, [new]):  # a held key: LockBusy, the tick goes on
                    ids, _ = transitions.insert(conn, [new], clock)
    except ConstraintViolation:
        emit("recurring.already_fired", schedule=schedule.name)
        return ALREADY_FIRED  # the unique (recurring_name, scheduled_slot) held
    if reason is not None:
        emit("recurring.skipped", schedule=schedule.name, reason=reason, slot=slot.isoformat())
        return SKIPPED
    publishing.emit_enqueued([new], ids, [0])
    emit("recurring.fired", schedule=schedule.name, job=ids[0], name=schedule.job, slot=slot.isoformat())
    return FIRED


def calendar_decision(
    schedule: RecurringSchedule, calendar: Calendar | None, slot: datetime
) -> tuple[bool, datetime | None]:
    """(whether the slot is skipped for its calendar, the run_at it is deferred to)."""
    if schedule.calendar is None:
        return False, None
    if calendar is None or calendar.name != schedule.calendar:
        raise BadInput(f"schedule {schedule.name!r}: calendar {schedule.calendar!r} is not known; add it again")
    blackout = schedule.calendar_mode == BLACKOUT
    if calendar.contains(slot) != blackout:
        return False, None  # outside the blackout, or inside the allowed hours
    if schedule.calendar_policy == SKIP:
        return True, None
    assert schedule.calendar_policy == DEFER
    end = calendar.next_outside(slot) if blackout else calendar.next_inside(slot)
    return end is None, end  # a window without an end within the horizon: skipped


def live_run(conn: Connection, schedule: str) -> int | None:
    """A job of `schedule` still waiting, pending or running (seeks the unique
    (recurring_name, scheduled_slot) index)."""
    stmt = select(job.c.id).where(job.c.recurring_name == schedule, job.c.status.in_(UNFINISHED_STATUSES)).limit(1)
    return conn.execute(stmt).scalar()
