"""The cron tick: fire every due schedule once, on whichever instance gets there first.

A tick is bounded in time (`BUDGET`, at least one fire): schedules still due when it runs
out wait for the next tick, so firing never delays the supervisor's reaping and heartbeats
for long. A schedule whose job's concurrency key a caller's open transaction holds gives up
after `concurrency_keys.KEY_WAIT` and is left for `HELD_RETRY` seconds; its wait does not count
against the budget, so the schedules behind it still fire. The calendars schedules name are
read from the database and kept `CALENDAR_TTL` seconds: an edited calendar applies to slots
fired after that."""

from __future__ import annotations

import time
from datetime import datetime

from jobsup.calendars import Calendar
from jobsup.errors import BadInput, ConfigurationError, JobsupError, LockBusy
from jobsup.observe.events import emit
from jobsup.secrets import SealedParameterError
from jobsup.store.firing import FIRED
from jobsup.store.rows import RecurringSchedule
from jobsup.store.store import Store
from jobsup.supervisor.guard import report_errors

BUDGET = 0.25  # seconds of firing per tick
CALENDAR_TTL = 30.0  # seconds a calendar read from the database is used
HELD_RETRY = 5.0  # seconds a schedule whose key is held is left before it is tried again
HELD = "held"  # `fire`'s outcome for a key held by another transaction


class CronTick:
    name = "recurring"

    def __init__(self, store: Store, budget: float = BUDGET) -> None:
        self.store, self.budget = store, budget
        self.reported: set[tuple[str, str, str]] = set()  # bad schedules already logged
        self.calendars: dict[str, tuple[float, Calendar | None]] = {}  # name: (read at, calendar)
        self.held: dict[str, float] = {}  # schedules whose key was held: name -> when to try again

    def run_once(self, now: datetime | None = None) -> int:
        deadline = time.monotonic() + self.budget
        fired = 0
        due = self.store.recurring.recurring_due(now=now)
        for position, schedule in enumerate(due):
            if position and time.monotonic() > deadline:
                emit("recurring.behind", due=len(due) - position)
                break
            if self.held.get(schedule.name, 0.0) > time.monotonic():
                continue
            started = time.monotonic()
            outcome = report_errors("recurring", lambda s=schedule: self.fire(s, now), schedule=schedule.name)  # type: ignore[misc]
            fired += outcome == FIRED
            if outcome == HELD:
                deadline += time.monotonic() - started
        return fired

    def fire(self, schedule: RecurringSchedule, now: datetime | None) -> str | None:
        try:
            calendar = None if schedule.calendar is None else self.calendar(schedule.calendar)
            fired = self.store.transitions.fire(self.store.recurring, schedule, now=now, calendar=calendar)
        except LockBusy as exc:
            # Its slot stays due and fires once the key is free (`jobsup.store.concurrency_keys`).
            emit("db.error", operation="recurring", schedule=schedule.name, error=exc, quiet=schedule.name in self.held)
            self.held[schedule.name] = time.monotonic() + HELD_RETRY
            return HELD
        except (BadInput, ConfigurationError, SealedParameterError) as exc:
            # A payload that no longer fits its job's parameters, or sealed values this
            # supervisor's keys do not open: said once; the slot fires once it is mended.
            self.report_invalid(schedule.name, schedule.cron, schedule.timezone, exc)
            return None
        self.held.pop(schedule.name, None)
        return fired

    def calendar(self, name: str) -> Calendar | None:
        """The calendar `name` (None: no such calendar), from the cache while it is fresh."""
        cached = self.calendars.get(name)
        if cached is not None and time.monotonic() - cached[0] < CALENDAR_TTL:
            return cached[1]
        found = self.store.calendars.calendar_get(name)
        self.calendars[name] = (time.monotonic(), found)
        return found

    def report_invalid(self, name: str, cron: str, timezone: str, exc: JobsupError) -> None:
        # A row edited to a bad cron or zone: say so once, keep firing the others.
        key = (name, cron, timezone)
        if key not in self.reported:
            self.reported.add(key)
            emit("recurring.invalid", schedule=name, error=exc)
