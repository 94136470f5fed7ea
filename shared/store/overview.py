"""The dashboard's reads: per-queue counts through the partial indexes, the last hour's
finished jobs for throughput and latency, and a cursor over the job list. Like `reads`,
nothing here writes; each query is bounded by an index, so the overview costs the same on
a table of a million finished rows as on an empty one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, func, literal_column, select

from jobsup.store.claim import status_is
from jobsup.store.database import Database
from jobsup.store.reads import _job
from jobsup.store.rows import Job
from jobsup.store.schema import DEAD_LETTERED, PENDING, RUNNING, SUCCEEDED, job

SERIES_ROWS = 20_000
# The predicate of the finished index (`jobsup_job_finished`), written as the index has it:
# SQLite uses a partial index only when the query's WHERE carries the index's own term, and
# does not infer it from `status = 'dead_lettered'`. Harmless where the planner does.
IN_FINISHED_INDEX: ColumnElement[bool] = literal_column(
    "status IN ('succeeded', 'dead_lettered', 'cancelled')"
)  # the finished jobs of the last hour read for the charts, at most


@dataclass(frozen=True)
class Finished:
    """A job that finished in the window: its queue, outcome, when it finished, when it was due."""

    queue: str
    status: str
    finished_at: datetime
    run_at: datetime | None


class OverviewReads:
    def __init__(self, db: Database) -> None:
        self.db, self.dialect = db, db.dialect

    def queue_counts(self) -> dict[tuple[str, str], int]:
        """Jobs per (queue, status) for pending, running and dead-lettered: each status
        counted on its own, so each count runs through its partial index (the claim index,
        the lease index, the finished index), never over succeeded rows."""
        counts: dict[tuple[str, str], int] = {}
        with self.db.read("stats") as conn:
            for status in (PENDING, RUNNING, DEAD_LETTERED):
                stmt = select(job.c.queue, func.count()).where(status_is(status)).group_by(job.c.queue)
                if status == DEAD_LETTERED:
                    stmt = stmt.where(IN_FINISHED_INDEX)
                counts.update({(queue, status): int(n) for queue, n in conn.execute(stmt)})
        return counts

    def oldest_due(self, *, now: datetime | None = None) -> dict[str, datetime]:
        """Each queue's oldest due pending run_at (the claim index's leading columns)."""
        stmt = (
            select(job.c.queue, func.min(job.c.run_at))
            .where(status_is(PENDING), job.c.run_at <= self.dialect.clock())
            .group_by(job.c.queue)
        )
        with self.db.read("stats") as conn:
            return {q: first for q, first in conn.execute(stmt, self.dialect.clock_params(now)) if first is not None}

    def finished_since(self, seconds: float, *, now: datetime | None = None) -> list[Finished]:
        """Jobs that succeeded or were dead-lettered in the last `seconds`, newest first, at
        most `SERIES_ROWS` (through the finished index on status and finished_at)."""
        found: list[Finished] = []
        params = self.dialect.clock_params(now, since=-seconds)
        with self.db.read("stats") as conn:
            for status in (SUCCEEDED, DEAD_LETTERED):
                stmt = (
                    select(job.c.queue, job.c.finished_at, job.c.run_at)
                    .where(IN_FINISHED_INDEX, status_is(status), job.c.finished_at >= self.dialect.clock("since"))
                    .order_by(job.c.finished_at.desc())
                    .limit(SERIES_ROWS)
                )
                found += [Finished(q, status, at, due) for q, at, due in conn.execute(stmt, params)]
        return found

    def job_page(
        self,
        *,
        before: int | None,
        limit: int,
        status: str | None = None,
        queue: str | None = None,
        name: str | None = None,
    ) -> list[Job]:
        """Jobs newest first with ids below `before` (the last id of the previous page)."""
        stmt: Any = select(job).order_by(job.c.id.desc()).limit(limit)
        if before is not None:
            stmt = stmt.where(job.c.id < before)
        if status is not None:
            stmt = stmt.where(status_is(status))
        if queue is not None:
            stmt = stmt.where(job.c.queue == queue)
        if name is not None:
            stmt = stmt.where(job.c.name == name)
        with self.db.read("inspect") as conn:
            return [_job(row, ()) for row in conn.execute(stmt)]
