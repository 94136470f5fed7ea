"""The cron tick: fire every due schedule once, on whichever instance gets there first."""

from __future__ import annotations

from datetime import datetime

from jobsup.errors import BadInput, JobsupError
from jobsup.observe.events import event, log
from jobsup.store.recurring import FIRED, RecurringStore


class CronTick:
    name = "recurring"

    def __init__(self, recurring: RecurringStore) -> None:
        self.recurring = recurring
        self.reported: set[tuple[str, str, str]] = set()  # bad schedules already logged

    def run_once(self, now: datetime | None = None) -> int:
        fired = 0
        for schedule in self.recurring.recurring_due(now=now):
            try:
                outcome = self.recurring.recurring_fire(schedule, now=now)
            except BadInput as exc:
                # A row edited to a bad cron or zone: say so once, keep firing the others.
                key = (schedule.name, schedule.cron, schedule.timezone)
                if key not in self.reported:
                    self.reported.add(key)
                    event("recurring.invalid", schedule=schedule.name, error=exc)
                continue
            except JobsupError as exc:
                event("db.error", operation="recurring", schedule=schedule.name, error=exc)
                continue
            except Exception:
                log.exception("recurring.failed schedule=%s", schedule.name)
                continue
            if outcome == FIRED:
                fired += 1
                event("recurring.fired", schedule=schedule.name, job=schedule.job)
            else:
                event("recurring.already_fired", schedule=schedule.name)
        return fired
