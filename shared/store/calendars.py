"""Named calendars (`jobsup_calendar`): every statement about them, written once, and a job
type's calendar applied at enqueue (`CalendarStore.apply`).

A row keeps its rules checked and normalised (`Calendar.describe`, JSON text) and is parsed
again on read (`jobsup.calendars`), so a calendar edited by hand into nonsense is refused
where it is used, by name."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, bindparam, delete, insert, select, update

from jobsup.calendars import Calendar, parse_calendar
from jobsup.clock import host_clock
from jobsup.errors import BadInput, ConstraintViolation
from jobsup.policies import CalendarUse
from jobsup.store.database import Database
from jobsup.store.rows import NewJob
from jobsup.store.schema import calendar, recurring_job

if TYPE_CHECKING:
    from jobsup.jobtypes import JobType


def uses_calendar(jobtype: JobType) -> bool:
    return isinstance(getattr(jobtype.limits, "calendar", None), CalendarUse)


class CalendarStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def apply(self, jobs: Sequence[NewJob], types: dict[str, JobType], now: datetime | None = None) -> list[NewJob]:
        """`jobs`, each whose type names a calendar with its run_at moved to the next instant
        the calendar allows. Decided once, here, from the calendar's row: a calendar edited
        later does not move jobs already enqueued. Each calendar is read once; an unknown
        one raises `BadInput`."""
        read: dict[str, Calendar] = {}
        out = []
        for new in jobs:
            use = getattr(types[new.name].limits, "calendar", None)
            if not isinstance(use, CalendarUse) or new.recurring_name is not None:
                out.append(new)  # (a schedule's slot follows the schedule's calendar)
                continue
            cal = read.get(use.name) or self.calendar_get(use.name)
            if cal is None:
                raise BadInput(
                    f"job {new.name!r} names calendar {use.name!r}, which is not known; "
                    "add it with `jobsup calendars add` or change the job's calendar="
                )
            read[use.name] = cal
            start = new.run_at or now or host_clock()
            moved = cal.next_inside(start) if use.mode == "allowed" else cal.next_outside(start)
            if moved is None:
                raise BadInput(
                    f"job {new.name!r}: calendar {use.name!r} allows no time in the next years; fix its rules"
                )
            out.append(new if moved == start else replace(new, run_at=moved))
        return out

    def calendar_upsert(self, cal: Calendar, *, now: datetime | None = None) -> bool:
        """Write `cal`; True if it was new."""
        at = now or host_clock()
        values: dict[str, Any] = {"timezone": cal.timezone, "rules": json.dumps(cal.describe()), "updated_at": at}
        for _ in range(3):
            with self.db.statement("calendars") as conn:
                if conn.execute(update(calendar).where(calendar.c.name == cal.name).values(values)).rowcount:
                    return False
            try:
                with self.db.statement("calendars") as conn:
                    conn.execute(insert(calendar).values(name=cal.name, created_at=at, **values))
                return True
            except ConstraintViolation:
                continue  # added meanwhile: update theirs
        raise AssertionError("calendar upsert raced three times")

    def calendar_get(self, name: str) -> Calendar | None:
        """The calendar `name`; `BadInput` if its stored rules no longer parse."""
        with self.db.read("calendars") as conn:
            row = conn.execute(select(calendar).where(calendar.c.name == name)).first()
        return None if row is None else parse_calendar(row.name, row.rules, row.timezone)

    def calendar_rows(self) -> list[dict[str, Any]]:
        """Every calendar as stored (rules as JSON), by name."""
        with self.db.read("calendars") as conn:
            rows = conn.execute(select(calendar).order_by(calendar.c.name)).all()
        return [
            {
                "name": row.name,
                "timezone": row.timezone,
                "rules": _rules(row.rules),
                "created_at": row.created_at,
                "updated_at": row.updated_at,
            }
            for row in rows
        ]

    def calendar_users(self, name: str) -> list[str]:
        """The schedules that name calendar `name`."""
        with self.db.read("calendars") as conn:
            return list(conn.execute(_users, {"p_name": name}).scalars())

    def calendar_remove(self, name: str) -> bool:
        """Delete calendar `name`; False if there is none, `BadInput` naming the schedules
        that name it. Under the calendar row's lock, which a schedule naming it takes to be
        written (`lock_calendar`): the two take turns, so neither is left half done."""
        with self.db.transaction("calendars") as conn:
            if not lock_calendar(conn, name):
                return False
            users = conn.execute(_users, {"p_name": name}).scalars().all()
            if users:
                raise BadInput(
                    f"calendar {name!r} is used by schedule(s) {', '.join(users[:5])}; remove them or add them "
                    "again without --calendar first"
                )
            conn.execute(delete(calendar).where(calendar.c.name == name))
        return True


_users = (
    select(recurring_job.c.name).where(recurring_job.c.calendar == bindparam("p_name")).order_by(recurring_job.c.name)
)
_locked = (
    select(calendar.c.name)
    .where(calendar.c.name == bindparam("p_name"))
    .with_for_update()
    .with_hint(calendar, "WITH (UPDLOCK, ROWLOCK)", dialect_name="mssql")
)


def lock_calendar(conn: Connection, name: str) -> bool:
    """Lock calendar `name`'s row until the transaction ends; False if there is none."""
    return conn.execute(_locked, {"p_name": name}).first() is not None


def _rules(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text  # hand-edited: shown as it is
