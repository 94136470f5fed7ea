"""Applying a job type's calendar at enqueue: the job's run_at is moved to the next instant
its calendar allows. Decided once, by the enqueuing client from the calendar's row: a
calendar edited later does not move jobs already enqueued."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from jobsup.calendars import Calendar
from jobsup.clock import host_clock
from jobsup.errors import BadInput
from jobsup.flow.calendar import CalendarUse
from jobsup.jobtypes import JobType
from jobsup.store.calendars import CalendarStore
from jobsup.store.rows import NewJob


def uses_calendar(jobtype: JobType) -> bool:
    return isinstance(getattr(jobtype.limits, "calendar", None), CalendarUse)


def pushed(
    calendars: CalendarStore, jobs: Sequence[NewJob], types: dict[str, JobType], now: datetime | None = None
) -> list[NewJob]:
    """`jobs`, each whose type names a calendar with its run_at moved into what it allows.
    Each calendar is read once; an unknown one raises `BadInput`."""
    read: dict[str, Calendar] = {}
    out = []
    for new in jobs:
        use = getattr(types[new.name].limits, "calendar", None)
        if not isinstance(use, CalendarUse):
            out.append(new)
            continue
        if new.recurring_name is not None:
            out.append(new)  # a schedule's slot follows the schedule's calendar
            continue
        if use.name not in read:
            found = calendars.calendar_get(use.name)
            if found is None:
                raise BadInput(
                    f"job {new.name!r} names calendar {use.name!r}, which is not known; "
                    "add it with `jobsup calendars add` or change the job's calendar="
                )
            read[use.name] = found
        calendar = read[use.name]
        start = new.run_at or now or host_clock()
        moved = calendar.next_inside(start) if use.mode == "allowed" else calendar.next_outside(start)
        if moved is None:
            raise BadInput(f"job {new.name!r}: calendar {use.name!r} allows no time in the next years; fix its rules")
        out.append(new if moved == start else replace(new, run_at=moved))
    return out
