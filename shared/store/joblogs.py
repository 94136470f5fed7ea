"""The lines jobs log through `ctx.log` (`jobsup_job_log`): written by the worker in
batches, read by the client and the CLI, deleted with their job by retention.

Sizes are counted in characters of message text, on the database as in the worker (the
databases agree on characters; bytes would need each one's own function).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select

from jobsup.store.database import Database
from jobsup.store.rows import LogLine
from jobsup.store.schema import job_log


class JobLogs:
    def __init__(self, db: Database) -> None:
        self.db = db

    def write(self, lines: Sequence[Mapping[str, Any]]) -> None:
        """Insert `lines` (each: job_id, attempt, logged_at, level, message) in one
        transaction, as one executemany: a batch costs one round trip, not one per line."""
        if lines:
            with self.db.transaction("joblog") as conn:
                conn.execute(insert(job_log), list(lines))

    def read(self, job_id: int, *, after_id: int | None = None, limit: int = 1000) -> list[LogLine]:
        """A job's lines in the order they were written, those with ids above `after_id`."""
        stmt = select(job_log).where(job_log.c.job_id == job_id).order_by(job_log.c.id).limit(limit)
        if after_id is not None:
            stmt = stmt.where(job_log.c.id > after_id)
        with self.db.read("inspect") as conn:
            return [LogLine(*tuple(row)) for row in conn.execute(stmt)]

    def usage(self, job_id: int) -> tuple[int, int]:
        """The lines a job has stored so far (all its attempts) and their characters."""
        stmt = select(func.count(), func.coalesce(func.sum(func.char_length(job_log.c.message)), 0)).where(
            job_log.c.job_id == job_id
        )
        with self.db.read("joblog") as conn:
            [(lines, characters)] = conn.execute(stmt).all()  # an aggregate: one row
        return int(lines), int(characters)

    @staticmethod
    def delete_for(conn: Connection, job_ids: Sequence[int]) -> None:
        """Delete the lines of `job_ids` in the caller's transaction (retention's, with the jobs)."""
        conn.execute(delete(job_log).where(job_log.c.job_id.in_(job_ids)))
