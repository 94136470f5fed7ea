"""The statements of the in-transaction steps (`jobsup.store.workflows`, `jobsup.store.concurrency_keys`,
`jobsup.store.rates`): the job-row writes of workflows, batches, concurrency keys and rate
windows, a part of `Statements` kept apart by role."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

from sqlalchemy import Integer, Select, Update, bindparam, func, select, update

from jobsup.store.chain import Returning
from jobsup.store.claim import status_is
from jobsup.store.schema import CANCELLED, DEAD_LETTERED, PENDING, RUNNING, WAITING, job, job_dependency

# What the in-transaction steps of a job that finished need to know of it (`jobsup.store.steps.after_finish`).
# (and `jobsup.store.concurrency_keys`: a concurrency key's slot, held unless it waits with no dependency).
STEP_COLUMNS = (
    job.c.workflow_id,
    job.c.batch_id,
    job.c.triggers,
    job.c.concurrency_key,
    job.c.concurrency_limit,
    job.c.waiting_on,
)


class StepStatements:
    if TYPE_CHECKING:
        from jobsup.store.dialects import Dialect

        dialect: Dialect

    # -- concurrency keys: jobs over their key's limit wait (`jobsup.store.concurrency_keys`) ---------

    @cached_property
    def hold_for_key(self) -> Update:
        """A new or retried job its key has no room for: waiting, with no dependency (0)."""
        return (
            update(job).where(job.c.id == bindparam("p_job"), status_is(PENDING)).values(status=WAITING, waiting_on=0)
        )

    @cached_property
    def next_for_key(self) -> Select[Any]:
        """The job of key `p_key` that has waited for room longest (in claim order), locked,
        skipping one another transaction holds (`Dialect.lock_rows`)."""
        return self.dialect.lock_rows(
            select(job.c.id, job.c.queue, job.c.concurrency_limit)
            .where(status_is(WAITING), job.c.concurrency_key == bindparam("p_key"), job.c.waiting_on == 0)
            .order_by(job.c.priority.desc(), job.c.run_at, job.c.id)
            .limit(1),
            skip_locked=True,
        )

    @cached_property
    def promote_for_key(self) -> Update:
        clock = self.dialect.clock()
        return (
            update(job)
            .where(job.c.id == bindparam("p_job"), status_is(WAITING), job.c.waiting_on == 0)
            .values(status=PENDING, waiting_on=None, updated_at=clock)
        )

    # -- rate windows: a claimed job its window has no room for goes back (`jobsup.store.rates`)

    @cached_property
    def rate_turns(self) -> Select[Any]:
        return select(job.c.id, job.c.rate_turn).where(job.c.id.in_(bindparam("p_ids", expanding=True)))

    @cached_property
    def put_back_for_rate(self) -> Update:
        """Undo a claim in its own transaction: pending again, the attempt not counted, due
        at the start time the window gave it (`p_turn`)."""
        return (
            update(job)
            .where(job.c.id == bindparam("p_job"), job.c.lease_owner == bindparam("p_owner"), status_is(RUNNING))
            .values(
                status=PENDING,
                attempts=job.c.attempts - 1,
                lease_owner=None,
                lease_expires_at=None,
                run_at=bindparam("p_turn"),
                rate_turn=bindparam("p_turn"),
                started_at=None,  # the attempt never ran
            )
        )

    @cached_property
    def restart_claimed_attempt(self) -> Update:
        """The attempt that claim began starts when its window let it (`p_at`), in the
        same transaction."""
        return update(job).where(job.c.id == bindparam("p_job")).values(started_at=bindparam("p_at"))

    # -- workflow steps waiting on their dependencies (`jobsup.store.workflows`) ----------

    @cached_property
    def dependents_of(self) -> Select[Any]:
        """The edges out of jobs that finished: (dependent, dependency)."""
        return (
            select(job_dependency.c.job_id, job_dependency.c.depends_on)
            .where(job_dependency.c.depends_on.in_(bindparam("p_ids", expanding=True)))
            .order_by(job_dependency.c.job_id)
        )

    @cached_property
    def unblock(self) -> Returning:
        """A waiting step counts `p_done` more of its dependencies finished, `p_failed` of them
        without succeeding. The row lock serialises the steps' counts, so exactly one
        transition sees its count reach zero."""
        return self.dialect.returning(
            update(job)
            .where(job.c.id == bindparam("p_job"), status_is(WAITING))
            .values(
                waiting_on=job.c.waiting_on - bindparam("p_done", type_=Integer),
                failed_deps=func.coalesce(job.c.failed_deps, 0) + bindparam("p_failed", type_=Integer),
                updated_at=self.dialect.clock(),
            )
            .returning(job.c.id, job.c.waiting_on, job.c.failed_deps, job.c.on_failure, job.c.queue)
        )

    @cached_property
    def recount(self) -> Update:
        """The dependents still waiting on a dead-lettered step that is retried wait for it
        again: it had been counted finished, and failed."""
        dependents = select(job_dependency.c.job_id).where(job_dependency.c.depends_on == bindparam("p_job"))
        return (
            update(job)
            .where(job.c.id.in_(dependents.scalar_subquery()), status_is(WAITING))
            .values(
                waiting_on=job.c.waiting_on + 1,
                failed_deps=job.c.failed_deps - 1,
                updated_at=self.dialect.clock(),
            )
        )

    @cached_property
    def promote(self) -> Returning:
        """waiting -> pending: every dependency has finished."""
        return self.dialect.returning(
            update(job)
            .where(job.c.id.in_(bindparam("p_ids", expanding=True)), status_is(WAITING))
            .values(status=PENDING, updated_at=self.dialect.clock())
            .returning(job.c.id, job.c.queue)
        )

    @cached_property
    def cancel_blocked(self) -> Returning:
        """waiting -> cancelled: a dependency failed and the step's policy is to cancel. A
        waiting step never started, so it has no attempt to close."""
        clock = self.dialect.clock()
        return self.dialect.returning(
            update(job)
            .where(job.c.id.in_(bindparam("p_ids", expanding=True)), status_is(WAITING))
            .values(status=CANCELLED, finished_at=clock, updated_at=clock, last_error=bindparam("p_error"))
            .returning(job.c.id, job.c.name, job.c.queue, job.c.attempts, job.c.actor, job.c.status, *STEP_COLUMNS)
        )

    @cached_property
    def reopen(self) -> Returning:
        """A failed or cancelled step of a finished workflow runs again (`p_waiting_on` None:
        now; else once that many dependencies have finished), with its own budget of attempts
        again, as a dead-letter retry gives."""
        clock = self.dialect.clock()
        budget = func.coalesce(job.c.budget, job.c.max_attempts)
        return self.dialect.returning(
            update(job)
            .where(job.c.id == bindparam("p_job"), job.c.status.in_((DEAD_LETTERED, CANCELLED)))
            .values(
                status=bindparam("p_status"),
                waiting_on=bindparam("p_waiting_on", type_=Integer),
                failed_deps=0,
                max_attempts=job.c.attempts + budget,
                budget=budget,
                run_at=clock,
                updated_at=clock,
                finished_at=None,
            )
            .returning(job.c.id, job.c.name, job.c.queue, job.c.attempts, job.c.actor, job.c.run_at)
        )
