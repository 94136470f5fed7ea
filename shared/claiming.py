"""The parts of a claim that every dialect shares: which rows are claimable, in what order,
what a claim writes, and what it returns. Each dialect module builds its claim from these,
so the conditions of the claim are written once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Insert, and_, insert, literal, select
from sqlalchemy.sql.expression import FromClause

from jobsup.schema import PENDING, RUNNING, job, job_attempt

# What a claim returns, in this order (see `jobsup.rows.ClaimedJob`). No timestamps: an
# odd stored value (PostgreSQL's 'infinity') must not make every claim of the row fail.
CLAIM_COLUMNS = (
    job.c.id,
    job.c.name,
    job.c.queue,
    job.c.payload,
    job.c.attempts,
    job.c.max_attempts,
    job.c.timeout,
    job.c.actor,
    job.c.lease_owner,
)
CLAIM_ORDER = (job.c.priority.desc(), job.c.run_at, job.c.id)


def status_is(status: str) -> ColumnElement[bool]:
    """`status = '<status>'` with the value inlined: the partial indexes are only usable
    when the planner sees the literal, not a bound parameter."""
    return job.c.status == literal(status, literal_execute=True)


def claimable(queue: str, now: ColumnElement[datetime]) -> ColumnElement[bool]:
    """Every condition that makes a row claimable. SQLite's update rechecks all of it."""
    return and_(status_is(PENDING), job.c.queue == queue, job.c.run_at <= now)


def claim_values(owner: str, now: ColumnElement[datetime], lease_expires_at: ColumnElement[datetime]) -> dict[str, Any]:
    return {
        "status": RUNNING,
        "attempts": job.c.attempts + 1,
        "lease_owner": owner,
        "lease_expires_at": lease_expires_at,
        "updated_at": now,
    }


def open_attempts(claimed: FromClause, now: ColumnElement[datetime]) -> Insert:
    """INSERT the attempt rows of the jobs in `claimed` (a CTE or VALUES with CLAIM_COLUMNS)."""
    return insert(job_attempt).from_select(
        ["job_id", "attempt", "owner", "started_at"],
        select(claimed.c.id, claimed.c.attempts, claimed.c.lease_owner, now),
    )
