"""Looks, while the campaign runs, for a keyed job that waits while its key has room (from
the job rows: fewer of the key's jobs pending or running than its limit). The end check is
what counts; this only dates the first sighting, so a report can say how soon it showed.
It also watches the `fleeting` jobs, whose retention the checker judges by when each was
purged (`Fleeting`)."""

from __future__ import annotations

import time
from collections import defaultdict

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

import jobsup
from jobsup.store import schema
from tests.chaos.checker import Fleeting, Violation
from tests.chaos.ledger import Ledger

EVERY = 2.0
FLEETING_EVERY = 0.5  # an early purge is caught when it is at least this much early


class Monitor:
    def __init__(self, client: jobsup.Client, ledger: Ledger) -> None:
        self.client, self.ledger = client, ledger
        self.last = 0.0
        self.seen: dict[int, float] = {}  # job -> first seen waiting with room
        self.fleeting, self.fleeting_last = Fleeting(), 0.0

    def watch_fleeting(self) -> None:
        if time.time() - self.fleeting_last < FLEETING_EVERY:
            return
        self.fleeting_last = time.time()
        ids = [job_id for job_id, kind in self.ledger.jobs_now() if kind == "fleeting"]
        ids = [job_id for job_id in ids if job_id not in self.fleeting.gone_at]
        if not ids:
            return
        job, began = schema.job, time.time()
        try:
            with self.client.database.read() as conn:
                rows = dict(conn.execute(select(job.c.id, job.c.status).where(job.c.id.in_(ids))).all())
        except (jobsup.JobsupError, SQLAlchemyError):  # the database restarting
            return
        read = time.time()  # after the read: a row it missed was gone by then
        for job_id in ids:
            if job_id in rows:
                self.fleeting.status[job_id] = (rows[job_id], began)
            else:
                self.fleeting.gone_at[job_id] = read

    def look(self) -> None:
        self.watch_fleeting()
        if time.time() - self.last < EVERY:
            return
        self.last = time.time()
        job = schema.job
        try:
            with self.client.database.read() as conn:
                rows = conn.execute(
                    select(job.c.id, job.c.status, job.c.concurrency_key, job.c.concurrency_limit).where(
                        job.c.concurrency_key.is_not(None), job.c.status.in_(["waiting", "pending", "running"])
                    )
                ).all()
        except (jobsup.JobsupError, SQLAlchemyError):  # the database restarting
            return
        admitted: dict[str, int] = defaultdict(int)
        for row in rows:
            if row.status != "waiting":
                admitted[row.concurrency_key] += 1
        now = time.time()
        stuck = {
            row.id
            for row in rows
            if row.status == "waiting" and admitted[row.concurrency_key] < (row.concurrency_limit or 1)
        }
        for job_id in stuck:
            if job_id not in self.seen:
                self.seen[job_id] = now
        for job_id in set(self.seen) - stuck:
            del self.seen[job_id]  # it moved on: a hand-over in flight, not a leak

    def date(self, found: list[Violation]) -> None:
        """Give each waiter-with-room violation the time it was first seen so."""
        for violation in found:
            if violation.invariant == "f:key-waiter-with-room":
                job_id = next(iter(violation.jobs))
                if job_id in self.seen:
                    violation.at = self.seen[job_id]
