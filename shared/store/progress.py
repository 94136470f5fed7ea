"""A running job's progress (`ctx.set_progress`): written by its worker onto the row of the
attempt that reported it, only while that attempt has not ended (an ended attempt keeps what
it had), and read with the job's history (`Reads.job_get`)."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import bindparam, update

from jobsup.store.database import Database
from jobsup.store.schema import job_attempt

_WRITE = (
    update(job_attempt)
    .where(
        job_attempt.c.job_id == bindparam("p_job"),
        job_attempt.c.attempt == bindparam("p_attempt"),
        job_attempt.c.finished_at.is_(None),
    )
    .values(progress=bindparam("p_progress"))
)


class Progress:
    def __init__(self, db: Database) -> None:
        self.db = db

    def write(self, reports: Mapping[tuple[int, int], str]) -> None:
        """Store each attempt's latest report, by (job id, attempt), as JSON text, in one
        transaction."""
        if reports:
            rows = [
                {"p_job": job_id, "p_attempt": attempt, "p_progress": text}
                for (job_id, attempt), text in reports.items()
            ]
            with self.db.transaction("joblog") as conn:
                conn.execute(_WRITE, rows)
