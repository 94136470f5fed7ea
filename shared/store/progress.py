"""A running job's progress (`ctx.set_progress`): written by its worker onto its job's row,
only while the attempt that reported it runs; the attempt's row takes it when the attempt
ends (`Statements.write_attempts`), and keeps it. Read with the job's history
(`Reads.job_get`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from jobsup.store.database import Database

if TYPE_CHECKING:
    from jobsup.store.rows import Lease
    from jobsup.store.statements import Statements


class Progress:
    def __init__(self, db: Database, sql: Statements) -> None:
        self.db, self.sql = db, sql

    def write(self, reports: Mapping[Lease, str]) -> None:
        """Store each attempt's latest report, by its lease, as JSON text, in one transaction;
        a report whose lease is no longer held changes nothing."""
        if reports:
            # In id order, as a renewal and a settle lock job rows (`fences.py`): two
            # transactions that lock several rows each in one order cannot deadlock.
            rows = [
                {"p_job": lease.job_id, "p_owner": lease.owner, "p_attempt": lease.attempt, "p_progress": text}
                for lease, text in sorted(reports.items(), key=lambda report: report[0].job_id)
            ]
            with self.db.transaction("joblog") as conn:
                conn.execute(self.sql.write_progress, rows)
