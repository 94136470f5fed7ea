"""The parts of a claim that every dialect shares: which rows are claimable, in what order,
what a claim writes, and what it returns. Each dialect module builds its claim from these,
so the conditions of the claim are written once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Insert, and_, bindparam, insert, literal_column, select
from sqlalchemy.sql.elements import UnaryExpression
from sqlalchemy.sql.expression import FromClause
from sqlalchemy.sql.operators import custom_op

from jobsup.store.schema import PENDING, RUNNING, STATUSES, job, job_attempt

# What a claim returns, in this order (see `jobsup.store.rows.ClaimedJob`), followed by the due
# time, which each dialect returns in a form an odd stored value cannot break.
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
    return job.c.status == status_literal(status)


def status_literal(status: str) -> ColumnElement[str]:
    """A status as an SQL literal, rendered when the statement is compiled (once)."""
    if status not in STATUSES:
        raise ValueError(f"not a job status: {status!r}")
    return literal_column(f"'{status}'")


def claimable(clock: ColumnElement[datetime], *, unindexed: bool = False) -> ColumnElement[bool]:
    """Every condition that makes a row of queue `p_queue` claimable. SQLite's update
    rechecks all of it, `unindexed`: with SQLite's no-op unary ``+`` on each column, so that
    its planner looks the candidates up by id instead of scanning the claim index."""
    columns: tuple[ColumnElement[Any], ...] = (job.c.status, job.c.queue, job.c.run_at)
    status, queue, run_at = columns
    if unindexed:
        status, queue, run_at = (
            UnaryExpression(c, operator=custom_op("+"), type_=c.type) for c in (status, queue, run_at)
        )
    return and_(status == status_literal(PENDING), queue == bindparam("p_queue"), run_at <= clock)


def claim_params(
    dialect: Any, *, queue: str, owner: str, limit: int, lease: float, now: datetime | None
) -> dict[str, Any]:
    """The bound parameters of every dialect's claim: one instant for reading and rechecking."""
    return {**dialect.clock_params(now, lease=lease), "p_queue": queue, "p_owner": owner, "p_limit": limit}


def claim_values(clock: ColumnElement[datetime], lease_expires_at: ColumnElement[datetime]) -> dict[str, Any]:
    """What a claim writes; the owner is the bound `p_owner`."""
    return {
        "status": RUNNING,
        "attempts": job.c.attempts + 1,
        "lease_owner": bindparam("p_owner"),
        "lease_expires_at": lease_expires_at,
        "updated_at": clock,
    }


def open_attempts(claimed: FromClause, now: ColumnElement[datetime]) -> Insert:
    """INSERT the attempt rows of the jobs in `claimed` (a CTE or VALUES with CLAIM_COLUMNS)."""
    return insert(job_attempt).from_select(
        ["job_id", "attempt", "owner", "started_at"],
        select(claimed.c.id, claimed.c.attempts, claimed.c.lease_owner, now),
    )
