"""What an operator looks for first, beyond a job's status: which pending jobs are retrying
and which are scheduled, and which waiting ones a concurrency key holds back. Each is a
predicate on the job table, in one place, so `jobsup stats`, the overview (API and
dashboard) and the job list's filters count and list the same jobs.

- ``retrying``: pending after a failed attempt (its next run is its ``run_at``);
- ``scheduled``: pending, not yet tried, due later than now;
- ``waiting``: held back until its concurrency key has a free slot. (A workflow step waiting
  for the steps before it is ``waiting`` too, by status; it is counted on its workflow, not
  here: it waits for its workflow, not for a slot.)

Each runs through an index where the counts need one: the claim index for the two pending
states (its rows are the pending ones), the key's waiting index for ``waiting``.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ColumnElement, and_

from jobsup.store.claim import status_is
from jobsup.store.schema import PENDING, STATUSES, WAITING, job

RETRYING, SCHEDULED = "retrying", "scheduled"
# What the job list filters by: each status, and the parts of one an operator looks for.
FILTERS = (*STATUSES, RETRYING, SCHEDULED)


def retrying() -> ColumnElement[bool]:
    return and_(status_is(PENDING), job.c.attempts > 0)


def scheduled(now: ColumnElement[datetime]) -> ColumnElement[bool]:
    """Not yet tried and due after `now` (the dialect's clock expression)."""
    return and_(status_is(PENDING), job.c.attempts == 0, job.c.run_at > now)


def held_by_key() -> ColumnElement[bool]:
    """Waiting for room under its key, and for nothing else (`waiting_on` counts the steps
    a workflow step still waits for). The waiting index's own terms first: SQLite uses a
    partial index only when the query says them."""
    return and_(status_is(WAITING), job.c.concurrency_key.is_not(None), job.c.waiting_on == 0)


def state_is(state: str, now: ColumnElement[datetime]) -> ColumnElement[bool]:
    """The jobs in `state` (one of `FILTERS`): a status, or ``retrying``/``scheduled``."""
    if state == RETRYING:
        return retrying()
    if state == SCHEDULED:
        return scheduled(now)
    return status_is(state)
