"""The operator's reads: jobs with their history, lists, counts and throughput. The CLI, the
client and the HTTP endpoints read through here; nothing here writes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, literal_column, select

from jobsup.secrets import mask
from jobsup.store import states
from jobsup.store.claim import status_is
from jobsup.store.database import Database
from jobsup.store.definitions import sensitive_fields
from jobsup.store.dialects import Dialect
from jobsup.store.rows import Attempt, Job, decode_stored, frames_of
from jobsup.store.schema import FINISHED_INDEX_WHERE, PENDING, RUNNING, SUCCEEDED, job, job_attempt, job_dependency

BATCH = 1000


class Reads:
    def __init__(self, db: Database) -> None:
        self.db, self.dialect = db, db.dialect

    def job_get(self, job_id: int) -> Job | None:
        with self.db.read("inspect") as conn:
            row = conn.execute(select(job).where(job.c.id == job_id)).first()
            if row is None:
                return None
            attempts = conn.execute(
                select(job_attempt).where(job_attempt.c.job_id == job_id).order_by(job_attempt.c.id)
            ).all()
            sensitive = sensitive_fields(conn, {row.name})
            reruns = tuple(conn.execute(select(job.c.id).where(job.c.rerun_of == job_id).order_by(job.c.id)).scalars())
        history = tuple(
            Attempt(
                a.attempt,
                a.outcome,
                a.owner,
                a.started_at,
                a.finished_at,
                a.error,
                decode_stored(a.progress),
                frames_of(a.traceback),
            )
            for a in attempts
        )
        if row.status == RUNNING and not _written(attempts, row):  # its row is written when it ends
            running = Attempt(
                row.attempts, None, row.lease_owner, row.started_at, None, None, decode_stored(row.progress)
            )
            history = (*history, running)
        return _job(row, history, sensitive.get(row.name, frozenset()), reruns)

    def job_list(
        self,
        *,
        status: str | None = None,
        queue: str | None = None,
        limit: int = 100,
        order_by: Iterable[Any] = (job.c.id.desc(),),
        sla_breached: bool = False,
    ) -> list[Job]:
        stmt = select(job).order_by(*order_by).limit(limit)
        if sla_breached:  # newest first by id: it reads back from the newest job until `limit` match
            stmt = stmt.where(job.c.sla_breached_at.is_not(None))
        if status is not None:  # a status, or a state of `jobsup.store.states`
            stmt = stmt.where(states.state_is(status, self.dialect.clock()))
        if queue is not None:
            stmt = stmt.where(job.c.queue == queue)
        with self.db.read("inspect") as conn:
            return jobs_of(conn, conn.execute(stmt, self.dialect.clock_params(None)).all())

    def job_upstream(self, job_id: int) -> dict[str, Any]:
        """The stored results of a workflow step's dependencies, by step name."""
        dependency = job.alias("dependency")
        stmt = (
            select(dependency.c.step, dependency.c.result)
            .select_from(job_dependency.join(dependency, dependency.c.id == job_dependency.c.depends_on))
            .where(job_dependency.c.job_id == job_id)
        )
        with self.db.read("inspect") as conn:
            return {row.step: decode_stored(row.result) for row in conn.execute(stmt)}

    def job_counts(
        self, statuses: Sequence[str], *, now: datetime | None = None
    ) -> tuple[dict[tuple[str, str], int], dict[str, datetime | None]]:
        """Jobs per (queue, status) among `statuses`, and each queue's oldest due pending run_at."""
        counts = select(job.c.queue, job.c.status, func.count()).where(job.c.status.in_(statuses))
        oldest = (
            select(job.c.queue, func.min(job.c.run_at))
            .where(status_is(PENDING), job.c.run_at <= self.dialect.clock())
            .group_by(job.c.queue)
        )
        with self.db.read("stats") as conn:
            by_status = {(q, st): int(n) for q, st, n in conn.execute(counts.group_by(job.c.queue, job.c.status))}
            first_due = {q: first for q, first in conn.execute(oldest, self.dialect.clock_params(now))}
        return by_status, first_due

    def job_held_by(self) -> dict[str, int]:
        """Running jobs by lease owner (a worker holds one at a time, or a batch)."""
        stmt = select(job.c.lease_owner, func.min(job.c.id)).where(status_is(RUNNING)).group_by(job.c.lease_owner)
        with self.db.read("inspect") as conn:
            return {owner: int(job_id) for owner, job_id in conn.execute(stmt)}

    def job_finished_since(self, seconds: float, *, now: datetime | None = None) -> dict[str, int]:
        """Jobs per queue that succeeded in the last `seconds` (throughput)."""
        stmt = (
            select(job.c.queue, func.count())
            .where(status_is(SUCCEEDED), job.c.finished_at >= self.dialect.clock("since"))
            .group_by(job.c.queue)
        )
        with self.db.read("stats") as conn:
            params = self.dialect.clock_params(now, since=-seconds)
            return {queue: int(count) for queue, count in conn.execute(stmt, params)}

    def job_ids_after(self, status: str, after: int | None, *, limit: int = BATCH) -> list[int]:
        """Ids of jobs in `status` above `after`, in id order: a cursor over them that moves on
        whatever happens to the ones already seen."""
        stmt = select(job.c.id).where(status_is(status)).order_by(job.c.id).limit(limit)
        if after is not None:
            stmt = stmt.where(job.c.id > after)
        with self.db.read("inspect") as conn:
            return list(conn.execute(stmt).scalars())

    def job_finished(
        self,
        status: str,
        *,
        older_than: float | None = None,
        limit: int = BATCH,
        now: datetime | None = None,
        name: str | None = None,
        excluding: Sequence[str] = (),
        since: datetime | None = None,
    ) -> list[tuple[int, datetime | None]]:
        """Ids and finish times of jobs that finished in `status` (oldest first): see
        `finished_statement`."""
        stmt = finished_statement(self.dialect, status, older_than, limit, name, excluding, since)
        with self.db.read("inspect") as conn:
            rows = conn.execute(stmt, self.dialect.clock_params(now, cutoff=-(older_than or 0.0))).all()
        return [(row.id, row.finished_at) for row in rows]

    def instant(self) -> datetime:
        """The reference clock's reading (the database's; the host's on SQLite)."""
        with self.db.read("inspect") as conn:
            return self.dialect.instant(conn)

    def job_ids_of(self, column: Any, owner_id: int, *, limit: int = BATCH) -> list[int]:
        """Ids of the jobs whose `column` (workflow_id, batch_id) is `owner_id`."""
        stmt = select(job.c.id).where(column == owner_id).order_by(job.c.id).limit(limit)
        with self.db.read("inspect") as conn:
            return list(conn.execute(stmt).scalars())

    def job_ids_of_queue(self, queue: str, *, after: int | None = None, limit: int = BATCH) -> list[int]:
        """Ids of the jobs of `queue` above `after`, whatever their status, in id order."""
        stmt = select(job.c.id).where(job.c.queue == queue).order_by(job.c.id).limit(limit)
        if after is not None:
            stmt = stmt.where(job.c.id > after)
        with self.db.read("inspect") as conn:
            return list(conn.execute(stmt).scalars())

    def job_live_count(self, queue: str) -> int:
        """Pending and running jobs of `queue`: two counts, each through its partial index,
        so that asking often costs little however many finished rows the table holds."""
        with self.db.read("inspect") as conn:
            return sum(
                int(conn.execute(select(func.count()).where(status_is(status), job.c.queue == queue)).scalar_one())
                for status in (PENDING, RUNNING)
            )

    def job_span(self, queue: str, first_id: int, last_id: int) -> tuple[int, datetime | None, datetime | None]:
        """Of the jobs of `queue` with ids `first_id` to `last_id`: how many succeeded, when
        the first of their attempts started, and when the last succeeded one finished."""
        of_queue = and_(job.c.queue == queue, job.c.id.between(first_id, last_id))
        finished = select(func.count(), func.max(job.c.finished_at)).where(of_queue, status_is(SUCCEEDED))
        ended = (
            select(func.min(job_attempt.c.started_at))
            .select_from(job_attempt.join(job, job_attempt.c.job_id == job.c.id))
            .where(of_queue)
        )
        latest = select(func.min(job.c.started_at)).where(of_queue)  # an attempt under way has no row yet
        with self.db.read("inspect") as conn:
            succeeded, last_finish = conn.execute(finished).one()
            starts = conn.execute(select(ended.scalar_subquery(), latest.scalar_subquery())).one()
        first_start = min((start for start in starts if start is not None), default=None)
        return int(succeeded), first_start, last_finish


# The finished-jobs indexes' own condition, written as they have it: SQLite uses a partial
# index only for a query that states its condition (`status = 'succeeded'` does not imply
# `status IN (...)` to its planner). Harmless where the planner does.
IN_FINISHED_INDEX: ColumnElement[bool] = literal_column(FINISHED_INDEX_WHERE)


def finished_statement(
    dialect: Dialect,
    status: str,
    older_than: float | None,
    limit: int,
    name: str | None = None,
    excluding: Sequence[str] = (),
    since: datetime | None = None,
) -> Select[Any]:
    """The ids and finish times of jobs that finished in `status`, oldest first, at most
    `limit`: all of them, or those that finished more than `older_than` seconds ago (the
    clock's ``cutoff`` offset); of job type `name` only (a seek of `jobsup_job_finished_name`),
    or of every type but `excluding` (`jobsup_job_finished`); at or after `since`, where the
    caller knows the older ones are gone."""
    stmt = select(job.c.id, job.c.finished_at).where(IN_FINISHED_INDEX, status_is(status))
    stmt = stmt.order_by(job.c.finished_at).limit(limit)
    # A workflow's steps and a batch's children are deleted with it (`purge_workflows_and_batches`).
    stmt = stmt.where(job.c.workflow_id.is_(None), job.c.batch_id.is_(None))
    if older_than is not None:
        stmt = stmt.where(job.c.finished_at < dialect.clock("cutoff"))
    if name is not None:
        stmt = stmt.where(job.c.name == name)
    if excluding:
        stmt = stmt.where(job.c.name.not_in(excluding))
    if since is not None:
        stmt = stmt.where(job.c.finished_at >= since)
    return stmt


def _written(attempts: Sequence[Any], job_row: Any) -> bool:
    """Whether the attempt `job_row` has under way is among `attempts` already: it ended
    between the two reads (its row holds the start the job row holds), or its worker ran code
    from before schema revision 0018, which opened its row at the claim (and left the job
    row's start as the attempt before had it)."""
    return any(
        a.attempt == job_row.attempts
        and a.owner == job_row.lease_owner
        and (a.started_at == job_row.started_at or a.finished_at is None)
        for a in attempts
    )


def jobs_of(conn: Any, rows: Sequence[Any]) -> list[Job]:
    """Job rows as `Job`s, their sensitive values masked (those of fields marked sensitive
    since the rows were written, too)."""
    sensitive = sensitive_fields(conn, {row.name for row in rows})
    return [_job(row, (), sensitive.get(row.name, frozenset())) for row in rows]


def _job(row: Any, history: tuple[Attempt, ...], sensitive: frozenset[str], reruns: tuple[int, ...] = ()) -> Job:
    return Job(
        id=row.id,
        name=row.name,
        queue=row.queue,
        status=row.status,
        priority=row.priority,
        payload=mask(decode_stored(row.payload), sensitive),  # sealed values are opened only by the worker
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        run_at=row.run_at,
        last_error=row.last_error,
        actor=row.actor,
        unique_key=row.unique_key,
        timeout=row.timeout,
        lease_owner=row.lease_owner,
        lease_expires_at=row.lease_expires_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
        finished_at=row.finished_at,
        result=decode_stored(row.result),
        history=history,
        workflow_id=row.workflow_id,
        step=row.step,
        batch_id=row.batch_id,
        parent_id=row.parent_id,
        concurrency_key=row.concurrency_key,
        sla_start_by=row.sla_start_by,
        sla_finish_by=row.sla_finish_by,
        sla_breached_at=row.sla_breached_at,
        cancel_requested_at=row.cancel_requested_at,
        progress=history[-1].progress if history else None,
        rerun_of=row.rerun_of,
        reruns=reruns,
    )
