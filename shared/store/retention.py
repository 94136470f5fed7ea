"""Deleting jobs, with their attempts and log lines: dead letters an operator purges,
finished jobs past their retention age, and the jobs of a benchmark's own queue. In bounded
batches, so a purge never holds long locks."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, delete

from jobsup.store.claim import status_is
from jobsup.store.database import Database
from jobsup.store.joblogs import JobLogs
from jobsup.store.reads import BATCH, Reads
from jobsup.store.schema import job, job_attempt


class Retention:
    def __init__(self, db: Database, reads: Reads) -> None:
        self.db, self.reads = db, reads

    def job_delete(self, job_ids: Sequence[int], *, status: str, operation: str = "dead_letters") -> int:
        """Delete jobs (and their attempts) that are still in `status`; return how many."""
        return self._delete(job_ids, status_is(status), operation)

    def queue_delete(self, queue: str, *, after: int | None = None, batch: int = BATCH) -> int:
        """Delete every job of `queue` (those with ids above `after`), whatever its status,
        and their attempts, `batch` at a time; return how many. For a queue that nothing
        works on any more, such as the one `jobsup bench` made for itself."""
        deleted = 0
        while ids := self.reads.job_ids_of_queue(queue, after=after, limit=batch):
            deleted += self._delete(ids, job.c.queue == queue, "retention")
            after = ids[-1]
        return deleted

    def _delete(self, job_ids: Sequence[int], condition: ColumnElement[bool], operation: str) -> int:
        """Delete the jobs of `job_ids` that still meet `condition`, their attempts and their log lines."""
        if not job_ids:
            return 0
        with self.db.transaction(operation) as conn:
            gone = conn.execute(delete(job).where(job.c.id.in_(job_ids), condition).returning(job.c.id)).scalars().all()
            if gone:
                conn.execute(delete(job_attempt).where(job_attempt.c.job_id.in_(gone)))
                JobLogs.delete_for(conn, gone)
        return len(gone)

    def purge(
        self,
        status: str,
        *,
        older_than: float | None = None,
        batch: int = BATCH,
        max_batches: int | None = None,
        operation: str = "dead_letters",
        now: datetime | None = None,
    ) -> int:
        """Delete finished jobs in `status` (all, or those finished more than `older_than`
        seconds ago), `batch` at a time, at most `max_batches` batches; return how many."""
        purged, batches = 0, 0
        while max_batches is None or batches < max_batches:
            ids = self.reads.job_finished_ids(status, older_than=older_than, limit=batch, now=now)
            if not ids:
                break
            purged += self.job_delete(ids, status=status, operation=operation)
            batches += 1
        return purged
