"""Waiting for a job to finish (`Client.wait`, `AsyncClient.wait`): look at the job, and
again after a pause that grows from `FIRST_LOOK` to `LONGEST_LOOK`, until it has
succeeded, been dead-lettered or been cancelled.

It looks by reading the job (`Client.get`: its row and its attempts, by primary key and
job id), not by a notification: a notification on every finished job would make each settle
pay for what a few callers want, and PostgreSQL serialises the commits of every transaction
that notifies. A job that finishes within a few milliseconds is seen within a few more; a
long one costs its waiter four looks a second.
"""

from __future__ import annotations

import time

from jobsup.durations import parse_duration
from jobsup.errors import JobNotFound, WaitTimeout
from jobsup.store.rows import Job
from jobsup.store.schema import FINISHED_STATUSES

FIRST_LOOK = 0.01  # seconds before the second look
LONGEST_LOOK = 0.25  # the pause never grows past this
GROWTH = 1.5


def finished(job: Job) -> bool:
    return job.status in FINISHED_STATUSES


class Waiting:
    """One wait: how long to pause before each next look, and when to give up."""

    def __init__(self, job_id: int, timeout: object) -> None:
        self.job_id, self.timeout = job_id, timeout
        seconds = None if timeout is None else parse_duration(timeout, what="timeout")
        self.deadline = None if seconds is None else time.monotonic() + seconds
        self.pause = FIRST_LOOK

    def seen(self, job: Job | None) -> Job:
        """The latest look's job; `JobNotFound` when there is no such job."""
        if job is None:
            raise JobNotFound(f"no job with id {self.job_id}: nothing to wait for")
        return job

    def next_pause(self, job: Job) -> float:
        """Seconds to pause before the next look; `WaitTimeout` once the time is up."""
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            raise WaitTimeout(
                f"job {self.job_id} is still {job.status} after {self.timeout}"
                f"{'s' if isinstance(self.timeout, int | float) else ''}: "
                "wait longer (timeout=) or look again later (get)",
                job=job,
            )
        pause = self.pause if self.deadline is None else min(self.pause, self.deadline - now)
        self.pause = min(self.pause * GROWTH, LONGEST_LOOK)
        return pause
