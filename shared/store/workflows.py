"""Every statement about `jobsup_workflow` and `jobsup_job_dependency`, and the reads of a
workflow's steps.

A workflow's status is never stored: it is read from its steps' rows (and whether an
operator cancelled it). Only the end of its last step writes the workflow row:
`finished_at`, the compare-and-set that announces `workflow.finished` once, found the way
a batch's end is (see `jobsup.store.links`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from sqlalchemy import Connection, Integer, Select, bindparam, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from jobsup.store.database import Database
from jobsup.store.rows import StepInfo, WorkflowInfo, decode_stored
from jobsup.store.schema import STATUSES, SUCCEEDED, UNFINISHED_STATUSES, job, job_dependency, workflow


class Workflows:
    def __init__(self, db: Database) -> None:
        self.db, self.dialect = db, db.dialect

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
