"""The dashboard's reads: per-queue counts through the partial indexes, the last hour's
finished jobs for throughput and latency, and a cursor over the job list. Like `reads`,
nothing here writes; each query is bounded by an index, so the overview costs the same on
a table of a million finished rows as on an empty one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, Row, bindparam, case, func, null, select

from jobsup.store import states
from jobsup.store.claim import status_is
from jobsup.store.database import Database
from jobsup.store.reads import IN_FINISHED_INDEX, jobs_of
from jobsup.store.rows import Job
from jobsup.store.schema import DEAD_LETTERED, PENDING, RUNNING, SUCCEEDED, WAITING, job


@dataclass(frozen=True)
class Finished:
    """The jobs of one queue (or job type: see `finished_since`) that ended `status` in one
    bucket of the window: how many, and their seconds from due to finished added up
    (succeeded ones only)."""

    key: str  # the queue, or the job type's name
    status: str
    bucket: int
    count: int
    waited: float


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

    def state_counts(self, *, now: datetime | None = None) -> dict[tuple[str, str], int]:
        """Jobs per (queue, state) for the states of `jobsup.store.states`: retrying and
        scheduled, in one pass over the claim index's rows (the pending ones), and waiting
        (held by a concurrency key) through the key's waiting index."""
        clock = self.dialect.clock()
        parts = (
            select(
                job.c.queue,
                func.sum(case((states.retrying(), 1), else_=0)),
                func.sum(case((states.scheduled(clock), 1), else_=0)),
            )
            .where(status_is(PENDING))
            .group_by(job.c.queue)
        )
        held = select(job.c.queue, func.count()).where(states.held_by_key()).group_by(job.c.queue)
        counts: dict[tuple[str, str], int] = {}
        with self.db.read("stats") as conn:
            for queue, retrying, scheduled in conn.execute(parts, self.dialect.clock_params(now)):
                counts[(queue, states.RETRYING)] = int(retrying or 0)
                counts[(queue, states.SCHEDULED)] = int(scheduled or 0)
            counts.update({(queue, WAITING): int(n) for queue, n in conn.execute(held)})
        return counts

    def recent_failures(self, *, since: float, limit: int, now: datetime | None = None) -> list[Row[Any]]:
        """The newest jobs dead-lettered in the last `since` seconds (the finished index's
        range) and some jobs retrying now (the claim index's rows, read until `limit` match):
        each's id, name, queue, status and last error."""
        columns = (job.c.id, job.c.name, job.c.queue, job.c.status, job.c.last_error)
        dead = (
            select(*columns)
            .where(IN_FINISHED_INDEX, status_is(DEAD_LETTERED), job.c.finished_at >= self.dialect.clock("since"))
            .order_by(job.c.finished_at.desc())
            .limit(limit)
        )
        retrying = select(*columns).where(states.retrying()).limit(limit)
        with self.db.read("stats") as conn:
            found = list(conn.execute(dead, self.dialect.clock_params(now, since=-since)))
            return found + list(conn.execute(retrying))

    def oldest_due(self, *, now: datetime | None = None) -> dict[str, datetime]:
        """Each queue's oldest due pending run_at (the claim index's leading columns)."""
        stmt = (
            select(job.c.queue, func.min(job.c.run_at))
            .where(status_is(PENDING), job.c.run_at <= self.dialect.clock())
            .group_by(job.c.queue)
        )
        with self.db.read("stats") as conn:
            return {q: first for q, first in conn.execute(stmt, self.dialect.clock_params(now)) if first is not None}

    def finished_since(self, edges: Sequence[datetime], *, by: Literal["queue", "name"] = "queue") -> list[Finished]:
        """The jobs that succeeded or were dead-lettered from `edges[0]` on, counted per
        queue (`by` ``"queue"``) or per job type (``"name"``), status and bucket (bucket i:
        from `edges[i]`, before `edges[i + 1]`; the last is open), added up by the database
        over the finished index's range, so a busy hour costs one row per queue and bucket
        here, not one per job."""
        bucket: ColumnElement[int] = case(
            *((job.c.finished_at >= bindparam(f"p_edge_{i}"), i) for i in range(len(edges) - 1, 0, -1)), else_=0
        )
        waited = self.dialect.seconds_between(job.c.run_at, job.c.finished_at)
        group = {"queue": job.c.queue, "name": job.c.name}[by]
        params = {f"p_edge_{i}": edge for i, edge in enumerate(edges)}
        found: list[Finished] = []
        with self.db.read("stats") as conn:
            for status in (SUCCEEDED, DEAD_LETTERED):
                # Bucketed in a subquery and grouped by its column: SQL Server refuses a GROUP
                # BY repeating an expression with parameters (pyodbc binds each copy apart).
                rows_of = (
                    select(group.label("grouped"), bucket.label("bucket"), waited.label("waited"))
                    .where(IN_FINISHED_INDEX, status_is(status), job.c.finished_at >= bindparam("p_edge_0"))
                    .subquery("finished")
                )
                total = func.sum(rows_of.c.waited) if status == SUCCEEDED else null()
                stmt = select(rows_of.c.grouped, rows_of.c.bucket, func.count(), total).group_by(
                    rows_of.c.grouped, rows_of.c.bucket
                )
                rows = conn.execute(stmt, params)
                found += [Finished(key, status, int(b), int(n), float(w or 0)) for key, b, n, w in rows]
        return found

    def job_page(
        self,
        *,
        before: int | None,
        limit: int,
        lowest: int | None = None,
        status: str | None = None,
        queue: str | None = None,
        name: str | None = None,
    ) -> list[Job]:
        """Jobs newest first with ids below `before` (the last id of the previous page) and
        from `lowest` on (the bound of a filtered page's scan)."""
        stmt: Any = select(job).order_by(job.c.id.desc()).limit(limit)
        if before is not None:
            stmt = stmt.where(job.c.id < before)
        if lowest is not None:
            stmt = stmt.where(job.c.id >= lowest)
        if status is not None:  # a status, or a state of `jobsup.store.states`
            stmt = stmt.where(states.state_is(status, self.dialect.clock()))
        if queue is not None:
            stmt = stmt.where(job.c.queue == queue)
        if name is not None:
            stmt = stmt.where(job.c.name == name)
        with self.db.read("inspect") as conn:
            return jobs_of(conn, conn.execute(stmt, self.dialect.clock_params(None)).all())

    def id_range(self) -> tuple[int, int] | None:
        """The lowest and highest job ids (None: no jobs), from the primary key's ends."""
        # Two subqueries: SQLite reads min() or max() off the key's end only when it is the
        # query's one aggregate, and scans the table for both at once.
        ends = select(select(func.min(job.c.id)).scalar_subquery(), select(func.max(job.c.id)).scalar_subquery())
        with self.db.read("inspect") as conn:
            low, high = conn.execute(ends).one()
        return None if high is None else (int(low), int(high))
