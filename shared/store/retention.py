"""Deleting jobs, with their attempts and log lines: dead letters an operator purges,
finished jobs past their retention age, and the jobs of a benchmark's own queue. In bounded
batches, so a purge never holds long locks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, or_, select

from jobsup.store import concurrency_keys
from jobsup.store.claim import status_is
from jobsup.store.database import Database
from jobsup.store.joblogs import JobLogs
from jobsup.store.reads import BATCH, Reads
from jobsup.store.schema import batch as batch_table
from jobsup.store.schema import job, job_attempt, job_dependency, workflow

FIRST_IDS = 100  # ids a purge collects for its caller's record


@dataclass(frozen=True)
class Swept:
    purged: int
    done: bool  # it stopped because no job was left to purge, not at its batches' bound


class Retention:
    def __init__(self, db: Database, reads: Reads) -> None:
        self.db, self.reads = db, reads

    def job_delete(self, job_ids: Sequence[int], *, status: str, operation: str = "dead_letters") -> list[int]:
        """Delete jobs (and their attempts) that are still in `status`; return their ids."""
        return self._delete(job_ids, status_is(status), operation)

    def queue_delete(self, queue: str, *, after: int | None = None, batch: int = BATCH) -> int:
        """Delete every job of `queue` (those with ids above `after`), whatever its status,
        and their attempts, `batch` at a time; return how many. For a queue that nothing
        works on any more, such as the one `jobsup bench` made for itself."""
        deleted = 0
        while ids := self.reads.job_ids_of_queue(queue, after=after, limit=batch):
            deleted += len(self._delete(ids, job.c.queue == queue, "retention"))
            after = ids[-1]
        return deleted

    def _delete(
        self,
        job_ids: Sequence[int],
        condition: ColumnElement[bool],
        operation: str,
        params: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """Delete the jobs of `job_ids` that still meet `condition`, their attempts and their
        log lines; return the ids deleted."""
        if not job_ids:
            return []
        with self.db.transaction(operation) as conn:
            stmt = delete(job).where(job.c.id.in_(job_ids), condition).returning(job.c.id)
            gone = conn.execute(stmt, dict(params or {})).scalars().all()
            if gone:
                conn.execute(delete(job_attempt).where(job_attempt.c.job_id.in_(gone)))
                conn.execute(delete(job_dependency).where(job_dependency.c.job_id.in_(gone)))
                JobLogs.delete_for(conn, gone)
        return list(gone)

    def purge(
        self,
        status: str,
        *,
        older_than: float | None = None,
        batch: int = BATCH,
        max_batches: int | None = None,
        operation: str = "dead_letters",
        now: datetime | None = None,
        first_ids: list[int] | None = None,
    ) -> int:
        """Delete finished jobs in `status` (all, or those finished more than `older_than`
        seconds ago), `batch` at a time, at most `max_batches` batches; return how many.
        `first_ids` collects the ids of the first `FIRST_IDS` deleted (for the audit trail)."""
        return self.sweep(
            status,
            older_than=older_than,
            batch=batch,
            max_batches=max_batches,
            operation=operation,
            now=now,
            first_ids=first_ids,
        ).purged

    def sweep(
        self,
        status: str,
        *,
        older_than: float | None = None,
        batch: int = BATCH,
        max_batches: int | None = None,
        operation: str = "retention",
        now: datetime | None = None,
        first_ids: list[int] | None = None,
        name: str | None = None,
        excluding: Sequence[str] = (),
        since: datetime | None = None,
    ) -> Swept:
        """`purge`, of job type `name` only or of every type but `excluding`, and of jobs
        finished at or after `since` only; the answer says too whether it stopped because none
        was left. With `older_than`, each batch reads on from the last one's finish time
        rather than from the oldest job again, so it reads past the excluded types' jobs,
        which stay, once per call rather than once per batch."""
        purged, batches = 0, 0
        while max_batches is None or batches < max_batches:
            rows = self.reads.job_finished(
                status, older_than=older_than, limit=batch, now=now, name=name, excluding=excluding, since=since
            )
            if not rows:
                return Swept(purged, done=True)
            gone = self.job_delete([job_id for job_id, _ in rows], status=status, operation=operation)
            purged += len(gone)
            if first_ids is not None:
                first_ids.extend(gone[: max(0, FIRST_IDS - len(first_ids))])
            batches += 1
            if len(rows) < batch:
                return Swept(purged, done=True)
            if older_than is not None:  # then no finish time is NULL (the cutoff leaves those out)
                since = rows[-1][1]
        return Swept(purged, done=False)

    def forget_idle_keys(self, *, batch: int = BATCH, max_batches: int = 20) -> int:
        """Delete the rows of concurrency keys with nothing admitted, in bounded batches."""
        forgotten = 0
        for _ in range(max_batches):
            with self.db.transaction("retention") as conn:
                deleted = concurrency_keys.forget_idle(conn, batch)
            forgotten += deleted
            if deleted < batch:
                break
        return forgotten

    def purge_workflows_and_batches(
        self,
        ages: Mapping[str, float],
        *,
        batch: int = BATCH,
        limit: int = 20,
        max_jobs: int = 20 * BATCH,
        now: datetime | None = None,
    ) -> int:
        """Delete finished workflows and batches all of whose jobs are past their status's
        retention age in `ages` (one with a job in a status `ages` leaves out is kept), with
        those jobs, `batch` jobs per transaction, at most `limit` of each kind and about
        `max_jobs` jobs per call (the next call goes on); return how many jobs went. A
        workflow's or batch's jobs go together, never one by one (`purge` leaves them out), so
        a workflow is never shown with steps missing. Each delete checks again that its jobs
        are finished and past their age: one retried meanwhile keeps its live jobs, and its row."""
        if not ages:
            return 0
        dialect = self.db.dialect
        offsets = {f"cutoff_{s}": -age for s, age in ages.items()}
        clock = dialect.clock_params(now, youngest=-min(ages.values()), **offsets)
        past = or_(*(and_(status_is(s), job.c.finished_at < dialect.clock(f"cutoff_{s}")) for s in ages))
        purged = 0
        for table, column, old in (
            (workflow, job.c.workflow_id, workflow.c.created_at),
            (batch_table, job.c.batch_id, batch_table.c.finished_at),
        ):
            kept = select(job.c.id).where(column == table.c.id, ~past).exists()
            stmt = select(table.c.id).where(old < dialect.clock("youngest"), ~kept).order_by(table.c.id).limit(limit)
            with self.db.read("retention") as conn:
                owners = list(conn.execute(stmt, clock).scalars())
            for owner_id in owners:
                while purged < max_jobs and (ids := self.reads.job_ids_of(column, owner_id, limit=batch)):
                    gone = len(self._delete(ids, and_(column == owner_id, past), "retention", clock))
                    purged += gone
                    if gone < len(ids):
                        break  # a job that came back to life: its workflow or batch stays
                with self.db.transaction("retention") as conn:
                    member = select(job.c.id).where(column == table.c.id).exists()
                    conn.execute(delete(table).where(table.c.id == owner_id, ~member))
                if purged >= max_jobs:
                    return purged
        return purged
