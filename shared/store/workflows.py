"""Workflows: steps enqueued together, each waiting for its dependencies. Every statement
about `jobsup_workflow` and `jobsup_job_dependency`, the workflow transitions (enqueue,
retry, finish_if_done, sweep, cancel), and what happens in the transaction that ends a step
(`unblock_dependents`, then `step_ended`: the workflow may end).

A workflow's status is never stored: it is read from its steps' rows (and whether an
operator cancelled it). Only the end of its last step writes the workflow row:
`finished_at`, the compare-and-set that announces `workflow.finished` once, found the way
a batch's end is (`jobsup.store.batches`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Integer, Select, bindparam, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from jobsup.errors import BadInput
from jobsup.events import publishing
from jobsup.observe.events import emit
from jobsup.store.database import after_commit, now_or_after_commit
from jobsup.store.rows import NewJob, StepInfo, WorkflowInfo, decode_stored
from jobsup.store.schema import (
    CANCELLED,
    DEAD_LETTERED,
    PENDING,
    STATUSES,
    SUCCEEDED,
    UNFINISHED_STATUSES,
    WAITING,
    job,
    job_dependency,
    workflow,
)

if TYPE_CHECKING:
    from jobsup.store.steps import StepContext


class Workflows:
    def __init__(self, t: StepContext) -> None:
        self.t, self.db, self.dialect = t, t.db, t.dialect

    # -- the transitions ----------------------------------------------------------------------

    def enqueue(
        self,
        name: str,
        key: str | None,
        plan: Sequence[tuple[NewJob, Sequence[int]]],
        *,
        connection: Connection | None = None,
        now: datetime | None = None,
    ) -> tuple[int, list[int]]:
        """Insert a workflow and its steps, atomically: `plan` is each step's row and the
        positions in `plan` of the steps it depends on, every step after its dependencies.
        Returns the workflow's id and its steps' ids; when `key` names a workflow made
        before, that one's id and no steps (nothing is written)."""
        clock = self.dialect.clock_params(now)
        news = [new for new, _ in plan]
        with self.db.unit(connection, "enqueue") as conn:
            workflow_id, created = self.create(conn, name, key, clock)
            if not created:
                return workflow_id, []
            for new in news:
                new.workflow_id = workflow_id
            ids, inserted = self.t.insert(conn, news, clock)
            self.link(conn, [(ids[i], ids[d]) for i, (_, deps) in enumerate(plan) for d in deps])
        publishing.emit_enqueued(news, ids, inserted, connection)

        def said() -> None:
            emit("workflow.enqueued", workflow=workflow_id, name=name, steps=len(ids))

        after_commit(connection, said)  # the caller's commit, else now
        return workflow_id, ids

    def retry(self, workflow_id: int, *, now: datetime | None = None) -> list[int]:
        """Run a finished workflow's failed and cancelled steps again (each waiting again for
        those of its dependencies that run again); returns their ids. `BadInput` while a
        step is unfinished: its end would race the recount."""
        clock = self.dialect.clock_params(now)
        with self.db.transaction("workflows") as conn:
            rows = self.steps_of(conn, workflow_id)
            if any(row.status in UNFINISHED_STATUSES for row in rows):
                raise BadInput(f"workflow {workflow_id} is still running: wait for it to finish, or cancel it first")
            redo = {row.id for row in rows if row.status in (DEAD_LETTERED, CANCELLED)}
            deps = self.edges_of(conn, sorted(redo))
            queues: set[str] = set()
            for row in rows:
                if row.id in redo:
                    waiting = sum(dep in redo for dep in deps.get(row.id, ())) or None
                    status = PENDING if waiting is None else WAITING
                    params = {**clock, "p_job": row.id, "p_status": status, "p_waiting_on": waiting}
                    for again in self.t.sql.reopen.run(conn, params):
                        queues.add(again.queue)
                        retry_at = again.run_at.isoformat() if status == PENDING else None
                        publishing.publish(conn, "job.retrying", retry_at=retry_at, **publishing.job_fields(again))
            self.set_cancelled(conn, workflow_id, False, clock)
            self.dialect.after_enqueue(conn, queues)
        emit("workflow.retried", workflow=workflow_id, steps=len(redo))
        return sorted(redo)

    def finish_if_done(self, workflow_id: int, *, now: datetime | None = None, operation: str = "workflows") -> bool:
        """Finish the workflow if no step is unfinished, waiting for the transactions
        changing its steps to end; True if this finished it (as `Batches.finish_if_done`)."""
        clock = self.dialect.clock_params(now)
        with self.db.transaction(operation) as conn:
            if self.any_unfinished(conn, workflow_id, skip_locked=False):
                return False
            return self.finish_now(conn, workflow_id, clock)

    def sweep(self, *, limit: int = 100) -> int:
        """Finish the workflows whose steps have all ended but which were not marked (the
        process that ended the last step died before its second look)."""
        return sum(
            self.finish_if_done(workflow_id, operation="maintenance") for workflow_id in self.finishable_ids(limit)
        )

    def cancel(self, workflow_id: int, *, now: datetime | None = None) -> int:
        """Cancel every unfinished step of a workflow, as one transition; returns how many."""

        def mark(conn: Connection, clock: dict[str, Any]) -> None:
            self.set_cancelled(conn, workflow_id, True, clock)

        return len(self.t.cancel_where(self.t.sql.cancel_workflow, {"p_workflow": workflow_id}, now, mark))

    # -- in the transaction that ends a step ------------------------------------------------------

    def unblock_dependents(self, conn: Connection, rows: Sequence[Any], clock: Mapping[str, Any]) -> list[Any]:
        """Count the ended `rows` on their dependents: those with nothing left to wait for
        become pending, or, when a dependency failed and they cancel on failure, cancelled.
        Returns the dependents this cancelled (they ended too)."""
        if not rows:
            return []
        sql = self.t.sql
        failed = {row.id for row in rows if row.status != SUCCEEDED}
        done: dict[int, list[int]] = defaultdict(list)
        for dependent, depends_on in conn.execute(sql.dependents_of, {"p_ids": [row.id for row in rows]}):
            done[int(dependent)].append(int(depends_on))
        ready, blocked = [], []
        for dependent in sorted(done):
            deps = done[dependent]
            params = {**clock, "p_job": dependent, "p_done": len(deps), "p_failed": sum(d in failed for d in deps)}
            counts = sql.unblock.run(conn, params)
            counted = counts[0] if counts else None
            if counted is None or counted.waiting_on > 0:
                continue  # no longer waiting (cancelled by an operator), or more to wait for
            if counted.failed_deps and (counted.on_failure or "cancel") == "cancel":
                blocked.append(dependent)
            else:
                ready.append(dependent)
        if ready:
            promoted = sql.promote.run(conn, {**clock, "p_ids": ready})
            self.dialect.after_enqueue(conn, {row.queue for row in promoted})
        if not blocked:
            return []
        reason = "cancelled: a step it depends on did not succeed"
        cancelled = list(sql.cancel_blocked.run(conn, {**clock, "p_ids": blocked, "p_error": reason}))
        # Not through the cancel transition, whose steps would cascade again.
        ended = [{"outcome": "cancelled", **publishing.job_fields(row)} for row in cancelled]
        publishing.publish_each(conn, "job.cancelled", ended)
        return cancelled

    def step_ended(self, conn: Connection, workflow_id: int, clock: Mapping[str, Any]) -> None:
        """A step of `workflow_id` ended in this transaction: finish the workflow now, or look
        again after the commit, or leave it to the step that will end after this commit."""
        if not self.any_unfinished(conn, workflow_id, skip_locked=True):
            now_or_after_commit(
                conn,
                self.dialect,
                lambda: self.finish_now(conn, workflow_id, clock),
                lambda: self.finish_if_done(workflow_id),
            )

    def finish_now(self, conn: Connection, workflow_id: int, clock: Mapping[str, Any]) -> bool:
        """Mark the workflow finished and announce it, in `conn`'s transaction; False when it
        had been already."""
        finished = self.finish(conn, workflow_id, clock)
        if finished is None:
            return False
        counts = self.counts(conn, workflow_id)
        outcome = status_of(counts, finished.cancelled_at is not None)
        subject = f"workflow:{workflow_id}"
        publishing.publish(
            conn,
            "workflow.finished",
            subject=subject,
            workflow=workflow_id,
            name=finished.name,
            outcome=outcome,
            counts=counts,
        )
        return True

    def step_retried(self, conn: Connection, rows: Sequence[Any], clock: Mapping[str, Any]) -> None:
        """Dead-lettered steps run again: whoever still waits on them waits again."""
        for row in rows:
            if row.workflow_id is not None:
                conn.execute(self.t.sql.recount, {"p_job": row.id, "p_now": clock.get("p_now")})

    # -- writes, on the caller's transaction ----------------------------------------------

    def create(self, conn: Connection, name: str, key: str | None, clock: Mapping[str, Any]) -> tuple[int, bool]:
        """A new workflow's id, True; or, when `key` names one already made, its id, False."""
        values = {"name": name, "idempotency_key": key, "created_at": self.dialect.clock()}
        stmt = insert(workflow).values(values).returning(workflow.c.id)
        if key is None:
            return int(conn.execute(stmt, dict(clock)).scalar_one()), True
        try:
            with conn.begin_nested():  # losing the race must not abort the caller's transaction
                return int(conn.execute(stmt, dict(clock)).scalar_one()), True
        except IntegrityError:
            existing = conn.execute(select(workflow.c.id).where(workflow.c.idempotency_key == key)).scalar_one()
            return int(existing), False

    def link(self, conn: Connection, edges: Sequence[tuple[int, int]]) -> None:
        """Store (job, depends_on) edges."""
        if edges:
            conn.execute(insert(job_dependency), [{"job_id": j, "depends_on": d} for j, d in edges])

    def set_cancelled(self, conn: Connection, workflow_id: int, cancelled: bool, clock: Mapping[str, Any]) -> None:
        """Mark the workflow cancelled, or running again: a retried workflow is unfinished
        too, so its end is announced again."""
        values = {"cancelled_at": self.dialect.clock()} if cancelled else {"cancelled_at": None, "finished_at": None}
        conn.execute(update(workflow).where(workflow.c.id == workflow_id).values(**values), dict(clock))

    def finish(self, conn: Connection, workflow_id: int, clock: Mapping[str, Any]) -> Any:
        """The compare-and-set of a workflow's end: its row (name, cancelled_at) if this
        transaction finished it, else None (another did, or it is gone)."""
        stmt = (
            update(workflow)
            .where(workflow.c.id == workflow_id, workflow.c.finished_at.is_(None))
            .values(finished_at=self.dialect.clock())
            .returning(workflow.c.name, workflow.c.cancelled_at)
        )
        rows = self.dialect.returning(stmt).run(conn, dict(clock))
        return rows[0] if rows else None

    @cached_property
    def unfinished_step(self) -> Select[Any]:
        """One unfinished step of workflow `p_workflow`, the newest first."""
        return (
            select(job.c.id)
            .where(job.c.workflow_id == bindparam("p_workflow", type_=Integer), job.c.status.in_(UNFINISHED_STATUSES))
            .order_by(job.c.id.desc())
            .limit(1)
        )

    def any_unfinished(self, conn: Connection, workflow_id: int, *, skip_locked: bool) -> bool:
        """Is a step of the workflow unfinished? Locks the one found to the end of the
        transaction (as `Batches.any_unfinished` does)."""
        stmt = self.dialect.lock_rows(self.unfinished_step, skip_locked=skip_locked)
        return conn.execute(stmt, {"p_workflow": workflow_id}).first() is not None

    def counts(self, conn: Connection, workflow_id: int) -> dict[str, int]:
        stmt = select(job.c.status, func.count()).where(job.c.workflow_id == workflow_id).group_by(job.c.status)
        return {str(status): int(n) for status, n in conn.execute(stmt)}

    @cached_property
    def finishable(self) -> Select[Any]:
        """Unfinished workflows none of whose steps is unfinished: what the sweep finishes,
        for a settle that committed but did not live to look."""
        step = job.alias("step")
        unfinished = select(step.c.id).where(
            step.c.workflow_id == workflow.c.id, step.c.status.in_(UNFINISHED_STATUSES)
        )
        return (
            select(workflow.c.id)
            .where(workflow.c.finished_at.is_(None), ~unfinished.exists())
            .order_by(workflow.c.id)
            .limit(bindparam("p_limit", type_=Integer))
        )

    def finishable_ids(self, limit: int = 100) -> list[int]:
        with self.db.read("maintenance") as conn:
            return [int(i) for i in conn.execute(self.finishable, {"p_limit": limit}).scalars()]

    # -- reads ------------------------------------------------------------------------------

    def steps_of(self, conn: Connection, workflow_id: int) -> list[Any]:
        """A workflow's steps in the order they were enqueued (each after its dependencies)."""
        stmt = (
            select(
                job.c.id,
                job.c.step,
                job.c.name,
                job.c.status,
                job.c.on_failure,
                job.c.attempts,
                job.c.last_error,
                job.c.result,
            )
            .where(job.c.workflow_id == workflow_id)
            .order_by(job.c.id)
        )
        return list(conn.execute(stmt).all())

    def edges_of(self, conn: Connection, job_ids: Sequence[int]) -> dict[int, list[int]]:
        """Each step's dependencies (job ids)."""
        deps: dict[int, list[int]] = defaultdict(list)
        if job_ids:
            stmt = select(job_dependency.c.job_id, job_dependency.c.depends_on).where(
                job_dependency.c.job_id.in_(job_ids)
            )
            for job_id, depends_on in conn.execute(stmt):
                deps[int(job_id)].append(int(depends_on))
        return deps

    def get(self, workflow_id: int) -> WorkflowInfo | None:
        with self.db.read("inspect") as conn:
            row = conn.execute(select(workflow).where(workflow.c.id == workflow_id)).first()
            if row is None:
                return None
            steps = self.steps_of(conn, workflow_id)
            deps = self.edges_of(conn, [s.id for s in steps])
        names = {s.id: s.step for s in steps}
        infos = tuple(
            StepInfo(
                name=s.step,
                job_id=s.id,
                job=s.name,
                status=s.status,
                depends_on=tuple(names.get(d, str(d)) for d in deps.get(s.id, ())),
                on_failure=s.on_failure or "cancel",
                attempts=s.attempts,
                last_error=s.last_error,
                result=decode_stored(s.result),
            )
            for s in steps
        )
        counts = {status: 0 for status in STATUSES}
        for s in steps:
            counts[s.status] = counts.get(s.status, 0) + 1
        return _info(row, counts, infos)

    def list(self, *, limit: int = 100) -> list[WorkflowInfo]:
        with self.db.read("inspect") as conn:
            rows = conn.execute(select(workflow).order_by(workflow.c.id.desc()).limit(limit)).all()
            if not rows:
                return []
            stmt = (
                select(job.c.workflow_id, job.c.status, func.count())
                .where(job.c.workflow_id.in_([r.id for r in rows]))
                .group_by(job.c.workflow_id, job.c.status)
            )
            counts: dict[int, dict[str, int]] = defaultdict(lambda: {status: 0 for status in STATUSES})
            for workflow_id, status, n in conn.execute(stmt):
                counts[int(workflow_id)][str(status)] = int(n)
        return [_info(row, counts[row.id], ()) for row in rows]


def status_of(counts: Mapping[str, int], cancelled: bool) -> str:
    if any(counts.get(s, 0) for s in UNFINISHED_STATUSES):
        return "running"
    if cancelled:
        return "cancelled"
    ended = sum(counts.values())
    return "succeeded" if counts.get(SUCCEEDED, 0) == ended else "failed"


def _info(row: Any, counts: dict[str, int], steps: tuple[StepInfo, ...]) -> WorkflowInfo:
    return WorkflowInfo(
        id=row.id,
        name=row.name,
        status=status_of(counts, row.cancelled_at is not None),
        created_at=row.created_at,
        cancelled_at=row.cancelled_at,
        counts=counts,
        steps=steps,
    )
