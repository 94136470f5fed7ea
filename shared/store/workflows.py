"""Every statement about `jobsup_workflow` and `jobsup_job_dependency`, and the reads of a
workflow's steps.

A workflow's status is never stored: it is read from its steps' rows (and whether an
operator cancelled it), so no settle writes to the workflow row.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, func, insert, select, update
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
        at = self.dialect.clock() if cancelled else None
        conn.execute(update(workflow).where(workflow.c.id == workflow_id).values(cancelled_at=at), dict(clock))

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
