"""Named calendars (`jobsup_calendar`): every statement about them, written once.

A row keeps its rules checked and normalised (`Calendar.describe`, JSON text) and is parsed
again on read (`jobsup.calendars`), so a calendar edited by hand into nonsense is refused
where it is used, by name."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, select, update

from jobsup.calendars import Calendar, parse_calendar
from jobsup.clock import host_clock
from jobsup.errors import ConstraintViolation
from jobsup.store.database import Database
from jobsup.store.schema import calendar, recurring_job


class CalendarStore:
    def __init__(self, db: Database) -> None:
        self.db = db

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
            stmt = select(recurring_job.c.name).where(recurring_job.c.calendar == name).order_by(recurring_job.c.name)
            return list(conn.execute(stmt).scalars())

    def calendar_remove(self, name: str) -> bool:
        """Delete calendar `name` unless a schedule names it (checked in the delete itself,
        so a schedule added since the caller looked keeps its calendar)."""
        used = select(recurring_job.c.name).where(recurring_job.c.calendar == name).exists()
        with self.db.statement("calendars") as conn:
            return bool(conn.execute(delete(calendar).where(calendar.c.name == name, ~used)).rowcount)


def _rules(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text  # hand-edited: shown as it is
