"""Recurring schedules: every statement about them, written once.

`recurring_upsert` is safe at every startup on every instance: the same cron and time zone
keep `next_run_at`, a changed one starts from now. Firing a slot is a transition
(`Transitions.fire`, decided in `jobsup.store.firing`); its compare-and-set on `next_run_at`
is `advance`, here, which also counts a skipped slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select, update

from jobsup.clock import host_clock
from jobsup.cron import check_cron, next_slot, zone
from jobsup.errors import BadInput, ConstraintViolation
from jobsup.store.calendars import lock_calendar
from jobsup.store.database import Database
from jobsup.store.rows import RecurringSchedule, decode_stored
from jobsup.store.schema import recurring_job

ALLOW, SKIP, QUEUE = "allow", "skip", "queue"  # overlap (SKIP is a calendar policy too)
BLACKOUT, ALLOWED = "blackout", "allowed"  # calendar modes
DEFER = "defer_to_end"  # calendar policy
OVERLAPS, MODES, POLICIES = (ALLOW, SKIP, QUEUE), (BLACKOUT, ALLOWED), (SKIP, DEFER)


@dataclass(frozen=True)
class SchedulePolicy:
    """What a schedule does with a slot whose last run is still live, and with its calendar."""

    overlap: str = ALLOW
    calendar: str | None = None
    calendar_mode: str = BLACKOUT
    calendar_policy: str = SKIP


class RecurringStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.dialect = db.dialect

    def recurring_upsert(
        self,
        *,
        name: str,
        job_name: str,
        cron: str,
        timezone: str,
        payload: str,
        queue: str,
        priority: int,
        key_id: str | None = None,
        seal_id: str | None = None,
        how: SchedulePolicy | None = None,
        now: datetime | None = None,
    ) -> RecurringSchedule:
        """Add or update a schedule; `how` says what it does about overlaps and its calendar
        (None: the defaults, fire every slot)."""
        check_cron(cron)
        zone(timezone)
        at = now or host_clock()
        how = how or SchedulePolicy()
        values: dict[str, Any] = {
            "overlap": how.overlap,
            "calendar": how.calendar,
            "calendar_mode": how.calendar_mode,
            "calendar_policy": how.calendar_policy,
            "job_name": job_name,
            "payload": payload,
            "queue": queue,
            "priority": priority,
            "key_id": key_id,
            "seal_id": seal_id,
            "updated_at": at,
        }
        for _ in range(3):
            existing = self.recurring_get(name)
            if existing is not None:
                if (existing.cron, existing.timezone) != (cron, timezone):
                    values.update(cron=cron, timezone=timezone, next_run_at=next_slot(cron, timezone, at))
                with self.db.transaction("recurring") as conn:
                    _hold_calendar(conn, how.calendar)
                    conn.execute(update(recurring_job).where(recurring_job.c.name == name).values(values))
                break
            try:
                with self.db.transaction("recurring") as conn:
                    _hold_calendar(conn, how.calendar)
                    conn.execute(
                        insert(recurring_job).values(
                            name=name,
                            cron=cron,
                            timezone=timezone,
                            enabled=True,
                            next_run_at=next_slot(cron, timezone, at),
                            created_at=at,
                            skipped=0,
                            **values,
                        )
                    )
                break
            except ConstraintViolation:
                continue  # another instance added it first: update theirs
        stored = self.recurring_get(name)
        assert stored is not None
        return stored

    def recurring_get(self, name: str) -> RecurringSchedule | None:
        with self.db.read("recurring") as conn:
            row = conn.execute(select(recurring_job).where(recurring_job.c.name == name)).first()
        return None if row is None else _schedule(row)

    def recurring_list(self) -> list[RecurringSchedule]:
        with self.db.read("recurring") as conn:
            rows = conn.execute(select(recurring_job).order_by(recurring_job.c.name)).all()
        return [_schedule(row) for row in rows]

    def recurring_remove(self, name: str) -> bool:
        with self.db.statement("recurring") as conn:
            return bool(conn.execute(delete(recurring_job).where(recurring_job.c.name == name)).rowcount)

    def recurring_set_enabled(self, name: str, enabled: bool, *, now: datetime | None = None) -> bool:
        """Enable or disable; enabling starts from now rather than catching up."""
        existing = self.recurring_get(name)
        if existing is None:
            return False
        values: dict[str, Any] = {"enabled": enabled, "updated_at": now or host_clock()}
        if enabled and not existing.enabled:
            values["next_run_at"] = next_slot(existing.cron, existing.timezone, now or host_clock())
        with self.db.statement("recurring") as conn:
            conn.execute(update(recurring_job).where(recurring_job.c.name == name).values(values))
        return True

    def recurring_due(self, *, now: datetime | None = None, limit: int = 100) -> list[RecurringSchedule]:
        stmt = (
            select(recurring_job)
            .where(recurring_job.c.enabled.is_(True), recurring_job.c.next_run_at <= (now or host_clock()))
            .order_by(recurring_job.c.next_run_at)
            .limit(limit)
        )
        with self.db.read("recurring") as conn:
            return [_schedule(row) for row in conn.execute(stmt)]

    def clock(self) -> datetime:
        """The clock schedules are read by: the host's (see docs/how-to/recurring.md on skew)."""
        return host_clock()

    def advance(
        self, conn: Connection, schedule: RecurringSchedule, following: datetime, at: datetime, *, fired: bool = True
    ) -> bool:
        """Inside the fire's transaction: move the schedule on to `following` if it still
        expects `schedule.next_run_at` (the compare-and-set of a fire). `fired`: the slot
        fired (its time is the last fire), else it was skipped (counted)."""
        if fired:
            values: dict[str, Any] = {"last_fired_at": at}
        else:
            values = {"skipped": func.coalesce(recurring_job.c.skipped, 0) + 1, "last_skipped_at": at}
        moved = conn.execute(
            update(recurring_job)
            .where(
                recurring_job.c.name == schedule.name,
                recurring_job.c.next_run_at == schedule.next_run_at,
                recurring_job.c.enabled.is_(True),
            )
            .values(next_run_at=following, **values)
        ).rowcount
        return bool(moved)


def _schedule(row: Any) -> RecurringSchedule:
    return RecurringSchedule(
        name=row.name,
        job=row.job_name,
        cron=row.cron,
        timezone=row.timezone,
        payload=decode_stored(row.payload),
        queue=row.queue,
        priority=row.priority,
        enabled=bool(row.enabled),
        next_run_at=row.next_run_at,
        last_fired_at=row.last_fired_at,
        overlap=row.overlap or ALLOW,
        calendar=row.calendar,
        calendar_mode=row.calendar_mode or BLACKOUT,
        calendar_policy=row.calendar_policy or SKIP,
        skipped=row.skipped or 0,
        last_skipped_at=row.last_skipped_at,
        seal_id=row.seal_id,
    )


def _hold_calendar(conn: Connection, name: str | None) -> None:
    """Lock the calendar a schedule names while it is written, so that a removal of it waits
    and then sees the schedule (or the schedule sees the calendar gone, and is refused)."""
    if name is not None and not lock_calendar(conn, name):
        raise BadInput(f"calendar {name!r} is not known; add it first with `jobsup calendars add`")
