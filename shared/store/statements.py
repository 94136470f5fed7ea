"""The SQL of every transition, written once, dialect-neutral, and built once per dialect.

Each transition out of `running` is a compare-and-set fenced on the lease (`fence`): still
held by the bound owner `p_owner`, at the bound attempts. Its second half writes the
attempt's row (`write_attempts`) from what the first left on the job row; the dialect
decides how the two are made one unit (`jobsup.store.chain`). Statements take the clock as
bound parameters (`Dialect.clock`), so a statement is compiled once and a test can fix the
instant.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

from sqlalchemy import (
    Boolean,
    ColumnElement,
    Insert,
    Integer,
    Select,
    Update,
    and_,
    bindparam,
    case,
    func,
    insert,
    null,
    or_,
    select,
    update,
)

from jobsup.store.chain import Chain, Returning
from jobsup.store.claim import status_is
from jobsup.store.dialects import Dialect
from jobsup.store.insert import values_statement
from jobsup.store.rows import Lease
from jobsup.store.schema import (
    CANCELLED,
    DEAD_LETTERED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    UNFINISHED_STATUSES,
    job,
    job_attempt,
)
from jobsup.store.step_statements import STEP_COLUMNS, StepStatements

# An operator cancelled the running job: whatever ends its attempt ends the job `cancelled`.
CANCEL_REQUESTED = job.c.cancel_requested_at.is_not(None)
# What an event of a settled job says of it (`jobsup.events.publishing`), returned by the
# settle itself so that building the event reads nothing again.
EVENT_COLUMNS = (job.c.queue, job.c.attempts, job.c.actor)
# What the attempt's row is written from, beside what the transition that ends it returns
# (`write_attempts`; its caller does not get them back).
ATTEMPT_COLUMNS = (job.c.started_at, job.c.progress)


class Statements(StepStatements):
    """The prepared statements of one dialect's transitions."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    @classmethod
    def of(cls, dialect: Dialect) -> Statements:
        """`dialect`'s statements, one set per dialect: built and compiled once in a process
        (and, by a supervisor before it forks, once for its workers: `compile_ahead`)."""
        made = _shared.get(dialect)
        if made is None:
            made = _shared[dialect] = cls(dialect)
        return made

    def compile_ahead(self) -> None:
        """Compile now what a worker compiles at its first claim and settle (a supervisor,
        before it forks: its workers inherit it; on PostgreSQL about 8 ms a worker)."""
        self.dialect.compile_ahead()
        for chain in (self.complete, self.release, self.fail):
            chain.compile_ahead(sent=chain is self.complete)  # only successes are sent behind

    # -- the lease fence -------------------------------------------------------------------

    @cached_property
    def fence(self) -> ColumnElement[bool]:
        """The compare-and-set of every worker-side write: still held by the bound owner
        `p_owner`, at the bound attempts (id, attempt pairs).

        A lease owner is set exactly while a job is running (the claim sets it, every
        transition out of running clears it; `test_a_lease_owner_is_set_exactly_while_running`
        holds the store to it), so the owner match also says "still running". Leaving the
        status out keeps PostgreSQL's planner on the primary key: with `status = 'running'`
        it scans the lease index instead, dead entries and all."""
        return self._held(self.dialect.lease_match()[0])

    def _held(self, leases: ColumnElement[bool]) -> ColumnElement[bool]:
        return and_(job.c.lease_owner == bindparam("p_owner"), leases)

    @cached_property
    def results_per_row(self) -> bool:
        """Whether `complete` binds each lease's own result (`p_results`, with
        `fence_params(leases, results)`), not one result for all (`p_result`)."""
        return self.dialect.lease_match(results=True)[1] is not None

    def fence_params(self, leases: Sequence[Lease], results: Sequence[str | None] | None = None) -> dict[str, Any]:
        owners = {lease.owner for lease in leases}
        if len(owners) != 1:
            raise ValueError("one fenced write covers the leases of one owner")
        return {"p_owner": owners.pop(), **self.dialect.lease_params(leases, results)}

    def write_attempts(self, ended: Any, *, released: bool = False) -> Insert:
        """The second half of every transition out of `running`: write the attempt's row.
        `ended` holds the changed job rows as the first half left them (their start and
        progress untouched); a release gave its attempt back (`attempts - 1`), so its row
        carries the number it ran as."""
        clock, row = self.dialect.clock(), job_attempt.c
        # Typed: a parameter in a SELECT list has no column to take its type from.
        return insert(job_attempt).from_select(
            ["job_id", "attempt", "owner", "started_at", "finished_at", "outcome", "error", "traceback", "progress"],
            select(
                ended.c.id,
                ended.c.attempts + 1 if released else ended.c.attempts,
                bindparam("p_owner", type_=row.owner.type),  # the fence's: the owner whose lease ended
                func.coalesce(ended.c.started_at, clock),  # (a row claimed before it had a start)
                clock,
                bindparam("p_outcome", type_=row.outcome.type),
                bindparam("p_error", type_=row.error.type),
                bindparam("p_traceback", None, type_=row.traceback.type),  # `fail`'s only: the others keep none
                ended.c.progress,
            ),
        )

    # -- enqueue -----------------------------------------------------------------------------

    @cached_property
    def insert(self) -> Insert:
        """One job per parameter set of `jobsup.store.insert.row_params`."""
        return values_statement(self.dialect.clock())

    @cached_property
    def rerun_link(self) -> Update:
        """A rerun's new job names the finished job it was made from (`Client.rerun`), in the
        transaction that inserted it."""
        return update(job).where(job.c.id == bindparam("p_job")).values(rerun_of=bindparam("p_rerun_of"))

    @cached_property
    def seal(self) -> Update:
        """A new job's payload with its sensitive values sealed: they need its id."""
        return self._sealed(job.c.key_id.is_(None))

    @cached_property
    def reseal(self) -> Update:
        """A sealed job's payload re-sealed under the newest key (`jobsup keys rotate`),
        fenced on the key it was read under."""
        return self._sealed(job.c.key_id == bindparam("p_old_key"))

    def _sealed(self, fence: ColumnElement[bool]) -> Update:
        return (
            update(job)
            .where(job.c.id == bindparam("p_job"), fence)
            .values(payload=bindparam("p_payload"), key_id=bindparam("p_key"))
        )

    @cached_property
    def live_with_key(self) -> Select[Any]:
        return select(job.c.id).where(self.dialect.live_key_match())

    # -- the worker's lease and settle -------------------------------------------------------

    @cached_property
    def renew(self) -> Returning:
        """Extends the leases, never shortens one. A release (or a rate limit's put-back) gives
        the attempt back, so its worker's new claim of the job holds the same lease: a renewal
        begun before that claim (its clock fixed then) must not pull the claim's expiry back
        under the worker, which counts the lease from the claim (`jobsup.worker.lease`)."""
        expires = self.dialect.clock("lease")
        later = case((job.c.lease_expires_at > expires, job.c.lease_expires_at), else_=expires)
        return self.dialect.returning(
            update(job)
            .where(self.fence)
            .values(lease_expires_at=later, updated_at=self.dialect.clock())
            .returning(job.c.id, job.c.cancel_requested_at)
        )

    @cached_property
    def complete(self) -> Chain:
        """The fence, storing each job's result: its own where the dialect binds results per
        row (`results_per_row`), else the one bound as `p_result`."""
        clock = self.dialect.clock()
        leases, result = self.dialect.lease_match(results=True)
        first = (
            update(job)
            .where(self._held(leases))
            .values(
                status=SUCCEEDED,
                finished_at=clock,
                updated_at=clock,
                lease_owner=None,
                lease_expires_at=None,
                result=bindparam("p_result") if result is None else result,
            )
            .returning(job.c.id, job.c.status, *STEP_COLUMNS, job.c.name, *EVENT_COLUMNS)
        )
        return self.dialect.chain(first, self.write_attempts, ATTEMPT_COLUMNS)

    def _fail(self, *, expired_only: bool) -> Chain:
        clock = self.dialect.clock()
        dead = or_(bindparam("p_discard", type_=Boolean), job.c.attempts >= job.c.max_attempts)
        ends = or_(CANCEL_REQUESTED, dead)
        first = (
            update(job)
            .where(self.fence, *((job.c.lease_expires_at < clock,) if expired_only else ()))
            .values(
                status=case((CANCEL_REQUESTED, CANCELLED), (dead, DEAD_LETTERED), else_=PENDING),
                run_at=case((ends, job.c.run_at), else_=self.dialect.clock("retry")),
                finished_at=case((ends, clock), else_=null()),
                last_error=bindparam("p_error"),
                updated_at=clock,
                lease_owner=None,
                lease_expires_at=None,
            )
            .returning(
                job.c.id, job.c.status, *STEP_COLUMNS, job.c.name, *EVENT_COLUMNS, job.c.last_error, job.c.run_at
            )
        )
        return self.dialect.chain(first, self.write_attempts, ATTEMPT_COLUMNS)

    @cached_property
    def fail(self) -> Chain:
        return self._fail(expired_only=False)

    @cached_property
    def fail_expired(self) -> Chain:
        """`fail` that also requires the lease to have lapsed (the sweep's compare-and-set)."""
        return self._fail(expired_only=True)

    def _release(self, *, expired_only: bool) -> Chain:
        clock = self.dialect.clock()
        first = (
            update(job)
            .where(self.fence, *((job.c.lease_expires_at < clock,) if expired_only else ()))
            .values(
                status=case((CANCEL_REQUESTED, CANCELLED), else_=PENDING),
                attempts=job.c.attempts - 1,
                finished_at=case((CANCEL_REQUESTED, clock), else_=null()),
                updated_at=clock,
                lease_owner=None,
                lease_expires_at=None,
            )
            .returning(job.c.id, job.c.status, *STEP_COLUMNS, job.c.name, *EVENT_COLUMNS)
        )
        return self.dialect.chain(first, lambda ended: self.write_attempts(ended, released=True), ATTEMPT_COLUMNS)

    @cached_property
    def release(self) -> Chain:
        return self._release(expired_only=False)

    @cached_property
    def release_expired(self) -> Chain:
        """`release` that also requires the lease to have lapsed (the sweep's)."""
        return self._release(expired_only=True)

    @cached_property
    def write_progress(self) -> Update:
        """A running attempt's latest progress report (`jobsup.store.progress`), on its job's
        row while that attempt runs, under the lease that reported it (the owner says "still
        running", as in `fence`): its row, written when it ends, takes it from there. The owner
        too, not the attempt alone: a release gives the attempt number back, so the next
        claim's attempt has the same number, and a report the released worker could not write
        before then (an outage) would land on it."""
        lease = job.c.lease_owner == bindparam("p_owner"), job.c.attempts == bindparam("p_attempt")
        return update(job).where(job.c.id == bindparam("p_job"), *lease).values(progress=bindparam("p_progress"))

    # -- the sweep -----------------------------------------------------------------------------

    @cached_property
    def lapsed_owners(self) -> Select[Any]:
        """Owners holding a lease that lapsed."""
        return (
            select(job.c.lease_owner)
            .where(status_is(RUNNING), job.c.lease_expires_at < self.dialect.clock())
            .group_by(job.c.lease_owner)
            .order_by(job.c.lease_owner)
            .limit(bindparam("p_limit", type_=Integer))
        )

    @cached_property
    def lapsed_of(self) -> Select[Any]:
        """One owner's lapsed leases, each with the time of the claim that took it (its
        attempt's start), in the order the owner runs them. An open attempt row is a claim by
        a worker of the code before schema revision 0018 (a rolling deploy), which leaves the
        job row's start as its attempt before had it: that row's start comes first."""
        attempt = job_attempt.alias("open_attempt")
        opened = and_(
            attempt.c.job_id == job.c.id, attempt.c.attempt == job.c.attempts, attempt.c.finished_at.is_(None)
        )
        claimed = func.coalesce(attempt.c.started_at, job.c.started_at, job.c.updated_at).label("started_at")
        return (
            self.held_by.add_columns(claimed)
            .select_from(job.outerjoin(attempt, opened))
            .where(job.c.lease_expires_at < self.dialect.clock())
        )

    @cached_property
    def held_by(self) -> Select[Any]:
        """The leases one owner holds, in the order it claimed (and runs) them."""
        return (
            select(job.c.id, job.c.lease_owner, job.c.attempts, job.c.name, job.c.queue, *STEP_COLUMNS)
            .where(status_is(RUNNING), job.c.lease_owner == bindparam("p_owner"))
            .order_by(job.c.priority.desc(), job.c.run_at, job.c.id)
        )

    # -- operators -----------------------------------------------------------------------------

    def _cancel(self, which: ColumnElement[bool]) -> Returning:
        """Waiting and pending jobs end `cancelled` at once; a running job is only marked
        (`cancel_requested_at`): it keeps its lease and all it holds (a key's slot, its place
        as a probe, its workflow step unfinished) while its function may still run, and its
        end, whoever writes it, is `cancelled` (`fail`, `release`), with its attempt's row. So
        no attempt's row is written here: only a running job has an attempt under way. (A
        cancel that waited on the lock of a claim committing sees the row as claimed, running,
        and marks it.)"""
        clock = self.dialect.clock()
        running = status_is(RUNNING)
        first = (
            update(job)
            .where(which, job.c.status.in_(UNFINISHED_STATUSES))
            .values(
                status=case((running, job.c.status), else_=CANCELLED),
                finished_at=case((running, job.c.finished_at), else_=clock),
                updated_at=clock,
                lease_owner=case((running, job.c.lease_owner), else_=null()),
                lease_expires_at=case((running, job.c.lease_expires_at), else_=null()),
                cancel_requested_at=case(
                    (running, func.coalesce(job.c.cancel_requested_at, clock)), else_=job.c.cancel_requested_at
                ),
            )
            .returning(job.c.id, job.c.name, job.c.queue, job.c.attempts, job.c.status, *STEP_COLUMNS, job.c.actor)
        )
        return self.dialect.returning(first)

    @cached_property
    def cancel(self) -> Returning:
        return self._cancel(job.c.id == bindparam("p_job"))

    @cached_property
    def cancel_workflow(self) -> Returning:
        return self._cancel(job.c.workflow_id == bindparam("p_workflow"))

    @cached_property
    def cancel_batch(self) -> Returning:
        return self._cancel(job.c.batch_id == bindparam("p_batch"))

    @cached_property
    def retry(self) -> Returning:
        """Dead-lettered back to pending. Attempt numbers never go back: the job gets its
        own budget of attempts again (its first max_attempts) on top of those it used."""
        clock = self.dialect.clock()
        budget = func.coalesce(job.c.budget, job.c.max_attempts)
        return self.dialect.returning(
            update(job)
            .where(job.c.id == bindparam("p_job"), status_is(DEAD_LETTERED))
            .values(
                status=PENDING,
                max_attempts=job.c.attempts + budget,
                budget=budget,
                run_at=clock,
                updated_at=clock,
                finished_at=None,
            )
            .returning(
                job.c.id,
                job.c.status,
                job.c.name,
                job.c.queue,
                job.c.workflow_id,
                job.c.concurrency_key,
                job.c.concurrency_limit,
                job.c.attempts,
                job.c.actor,
                job.c.run_at,
            )
        )

    @cached_property
    def sla_mark(self) -> Returning:
        """Mark the jobs `p_ids` past an SLA deadline, those not marked yet: the
        compare-and-set that counts each job's breach once, however many instances look."""
        marked = job.c.id.in_(bindparam("p_ids", expanding=True)), job.c.sla_breached_at.is_(None)
        stmt = update(job).where(*marked).values(sla_breached_at=self.dialect.clock())
        return self.dialect.returning(stmt.returning(job.c.id, job.c.name, job.c.queue))


# Kept for the process's life, as the dialects are (`dialect_for` makes one of each kind).
_shared: dict[Dialect, Statements] = {}
