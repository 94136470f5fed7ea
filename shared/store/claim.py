"""The parts of a claim that every dialect shares: which rows are claimable, in what order,
what a claim writes, and what it returns. Each dialect module builds its claim from these,
so a condition of the claim is written once.

The claim predicate is composed from parts, all listed in `_PARTS`: "pending, of this
queue, due", and those of the features that hold jobs back (a paused queue, an open circuit
breaker). A concurrency key at its limit holds its jobs back before they are pending, and a
rate window after the claim (`jobsup.store.rates`), so neither is a part.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from operator import itemgetter
from typing import Any

from sqlalchemy import ColumnElement, and_, bindparam, literal_column, or_, select, true
from sqlalchemy.sql.elements import UnaryExpression
from sqlalchemy.sql.operators import custom_op

from jobsup.errors import DatabaseError
from jobsup.observe.events import emit
from jobsup.store.rows import STEP_FIELDS, ClaimedJob, Held, Lease
from jobsup.store.schema import BREAKER_STATES, PENDING, RUNNING, STATUSES, breaker, job, queue_state

# What a claim returns, in this order (see `jobsup.store.rows.ClaimedJob`), followed by the
# due time, which each dialect returns in a form an odd stored value cannot break.
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
    job.c.workflow_id,
    job.c.batch_id,
    job.c.triggers,
    job.c.concurrency_key,
    job.c.traceparent,  # the enqueuer's trace context (`jobsup.observe.tracing`): null without one
)
CLAIM_ORDER = (job.c.priority.desc(), job.c.run_at, job.c.id)


class Columns:
    """The job table's columns as a part sees them. With `unindexed`, each is wrapped in
    SQLite's no-op unary ``+``, so that a recheck of rows found by id does not make its
    planner scan the claim index instead."""

    def __init__(self, unindexed: bool = False) -> None:
        self.unindexed = unindexed

    def __getitem__(self, name: str) -> ColumnElement[Any]:
        column = job.c[name]
        if not self.unindexed:
            return column
        return UnaryExpression(column, operator=custom_op("+"), type_=column.type)


@dataclass(frozen=True)
class Part:
    """One condition of the claim: `condition(columns, clock)` over the bound parameters of
    `claim_params` (`p_queue`, the clock's)."""

    name: str
    condition: Callable[[Columns, ColumnElement[datetime]], ColumnElement[bool]]
    # Checked again by SQLite's write half. A part may leave it to the read when a change in
    # between may as well have come a moment later, as one that lands while PostgreSQL's
    # single-statement claim runs does.
    recheck: bool = True
    # It reads a table other than the job's (a pause, a breaker): see `decided_elsewhere`.
    elsewhere: bool = False


def _queue_not_paused(columns: Columns, clock: ColumnElement[datetime]) -> ColumnElement[bool]:
    """Not in a queue an operator paused (`jobsup.store.pauses`). The queue's own bound name,
    not the row's column: an uncorrelated subquery, run once per claim."""
    paused = queue_state.c.queue == bindparam("p_queue"), queue_state.c.paused == true()
    return ~select(literal_column("1")).where(*paused).exists()


def _breaker_closed(columns: Columns, clock: ColumnElement[datetime]) -> ColumnElement[bool]:
    """Not of a type whose circuit breaker is open, unless it is the half-open breaker's one
    probe (`jobsup.store.breakers`). Neither subquery names a column of the job row, so each
    runs once per claim over the (small) breaker table."""
    closed, half_open, _ = BREAKER_STATES
    held_back = select(breaker.c.name).where(breaker.c.state != literal_column(f"'{closed}'"))
    probes = select(breaker.c.probe_job_id).where(
        breaker.c.state == literal_column(f"'{half_open}'"), breaker.c.probe_job_id.isnot(None)
    )
    return or_(columns["name"].not_in(held_back), columns["id"].in_(probes))


# Every condition of the claim. The pause and breaker parts are carried whether or not any
# queue is paused or any type has a breaker: each reads a small table once per claim.
_PARTS = (
    Part("pending", lambda c, clock: c["status"] == status_literal(PENDING)),
    Part("queue", lambda c, clock: c["queue"] == bindparam("p_queue")),
    Part("due", lambda c, clock: c["run_at"] <= clock),
    Part("queue_not_paused", _queue_not_paused, elsewhere=True),
    # A breaker that opens between SQLite's read and write of a claim lets that claim's jobs
    # through, as one opening while PostgreSQL's claim statement runs does; reading the
    # breakers twice cost SQLite's plain claim 10 %.
    Part("breaker_closed", _breaker_closed, recheck=False, elsewhere=True),
)


def claimable(clock: ColumnElement[datetime], *, recheck: bool = False) -> ColumnElement[bool]:
    """Every condition that makes a row of queue `p_queue` claimable at `clock`.

    With `recheck`, the parts a claim that read its candidates before taking the write lock
    (SQLite) checks again on each, with unindexed columns: still pending and due (another
    claim may have taken it or put it back since), and those of `Part.recheck`."""
    columns = Columns(unindexed=recheck)
    return and_(*(part.condition(columns, clock) for part in _PARTS if part.recheck or not recheck))


def decided_elsewhere(clock: ColumnElement[datetime]) -> ColumnElement[bool]:
    """The parts read from other tables than the job's (a pause, a breaker), checked again by
    the write of a claim whose locking read outruns its snapshot (MariaDB: a job failed with
    no retry delay, whose failure opened its breaker in the same commit, passed for
    claimable; docs/explanation/internals.md, "A locking read outruns its snapshot")."""
    columns = Columns()
    return and_(*(part.condition(columns, clock) for part in _PARTS if part.elsewhere))


def status_is(status: str) -> ColumnElement[bool]:
    """`status = '<status>'` with the value inlined: the partial indexes are only usable
    when the planner sees the literal, not a bound parameter."""
    return job.c.status == status_literal(status)


def status_literal(status: str) -> ColumnElement[str]:
    """A status as an SQL literal, rendered when the statement is compiled (once)."""
    if status not in STATUSES:
        raise ValueError(f"not a job status: {status!r}")
    return literal_column(f"'{status}'")


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
        # A request to cancel an attempt that has ended (the job reopened by a workflow retry,
        # or retried from the dead letters) is not this attempt's.
        "cancel_requested_at": None,
        # The attempt starts: its row is written when it ends (`Statements.write_attempts`).
        "started_at": clock,
        "progress": None,
    }


def claim_rounds(
    claim: Callable[[dict[str, Any]], Sequence[Any]], params: dict[str, Any], dropped: dict[int, datetime], began: float
) -> Claimed:
    """Run `claim` (one dialect claim with `params`) again while its steps put rows back
    (`dropped` grows): they are no longer due, and a queue whose head is one rate-limited
    type would otherwise idle until the next poll with jobs of other types due. `began`:
    see `Claimed`."""
    claimed = Claimed()
    claimed.began = began
    for _ in range(_CLAIM_ROUNDS):
        before = len(dropped)
        try:
            rows = claim({**params, "p_limit": params["p_limit"] - len(claimed)})
        except DatabaseError as exc:
            if not claimed:  # nothing this worker must run: the outage is its to back off from
                raise
            # The earlier rounds committed: their jobs are this worker's now, and raising
            # would leave them running under a lease nobody renews until it lapses. This
            # round may have committed too, its reply lost: the worker must look for leases
            # it holds without knowing, as after a first round that raised.
            emit("db.error", operation="claim", error=exc)
            claimed.unsure = True
            break
        claimed.extend(map(claimed_job, rows))
        if len(dropped) == before or len(claimed) >= params["p_limit"]:
            break
    claimed.next_due = min(dropped.values(), default=None)
    return claimed


class Claimed(list[ClaimedJob]):
    """A claim's jobs, and when the earliest job it put back is due again (None: it put none
    back), so that a worker that got none looks again then rather than at its next poll.
    `unsure`: a later round failed and may have committed unseen (its jobs would be the
    worker's without its knowing). `began`: when the claim began (monotonic), before its
    clock was read, so each of its leases holds at least its length from then."""

    next_due: datetime | None = None
    unsure: bool = False
    began: float = 0.0  # set by every claim that returns jobs (`claim_rounds`); empty ones hold none


_CLAIM_ROUNDS = 20


def claimed_job(row: Any) -> ClaimedJob:
    """A claim's row as the worker holds it: every dialect returns CLAIM_COLUMNS, then
    when the job became due (seconds since the epoch, or an aware datetime), in
    `ClaimedJob`'s order (anything after is the dialect's own)."""
    # Each frozen record's values set as one dict, not by its init's per-field
    # ``object.__setattr__`` (`test_store.py` holds the two equal), with its cached
    # properties: every job's settle reads them, and cached_property's look (before Python
    # 3.12, a lock too) cost more than making them. The row is unpacked into a dict display:
    # ``dict(zip(names, row, strict=False))`` took 1.1 µs a job, this 0.45.
    (
        id_, name, queue, payload, attempt, max_attempts, timeout, actor, owner,
        workflow_id, batch_id, triggers, concurrency_key, traceparent, due,
    ) = row[:_WIDTH]  # fmt: skip
    if due is not None and due.__class__ is not float:
        due = due.timestamp()  # an aware datetime: PostgreSQL's claim alone returns seconds
    values = {
        "id": id_, "name": name, "queue": queue, "payload": payload, "attempt": attempt,
        "max_attempts": max_attempts, "timeout": timeout, "actor": actor, "owner": owner,
        "workflow_id": workflow_id, "batch_id": batch_id, "triggers": triggers,
        "concurrency_key": concurrency_key, "traceparent": traceparent, "due": due,
    }  # fmt: skip
    lease = _new(Lease)
    _set(lease, "__dict__", {"job_id": id_, "owner": owner, "attempt": attempt})
    steps = _step_values(values) != _NO_STEPS  # what needs_steps(job) decides, without its generator
    held = _new(Held)
    _set(held, "__dict__", {"lease": lease, "name": name, "queue": queue, "needs_steps": steps})
    values["lease"], values["needs_steps"], values["held"] = lease, steps, held
    job = _new(ClaimedJob)
    _set(job, "__dict__", values)
    return job


_new, _set = object.__new__, object.__setattr__


# How many of a claim's columns are the job's (`test_store.py` holds the dict display above to
# ClaimedJob's fields, in their order).
_WIDTH = len(fields(ClaimedJob))
# A claimed job's step fields in one C call (`rows.needs_steps` is a generator over them).
_step_values, _NO_STEPS = itemgetter(*STEP_FIELDS), (None,) * len(STEP_FIELDS)
assert len(CLAIM_COLUMNS) + 1 == _WIDTH, "a claim returns CLAIM_COLUMNS and the due time"
