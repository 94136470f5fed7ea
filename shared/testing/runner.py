"""Running a claimed job in the test's own process, as a worker would: the same preparation
(payload, sealed values, typed parameters, context), the same outcome, the same settle
(`jobsup.worker.execute`, the store's transitions), without the worker's threads (no lease
renewal, no timeout, no cancellation). What `jobsup.testing.drain` and `inline` run."""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import Counter
from datetime import timedelta

from jobsup.client import Client
from jobsup.clock import host_clock
from jobsup.store.rows import SUCCEEDED, ClaimedJob
from jobsup.store.schema import DEAD_LETTERED
from jobsup.worker.execute import execute, outcome_of
from jobsup.worker.services import JobServices

LEASE = 3600.0  # seconds: a job run here is never renewed, and nothing else should take it
# `drain(with_scheduled=True)` claims as if it were this far ahead, past any run_at or
# retry delay a job can have (enqueue refuses delays over 100 years).
AHEAD = timedelta(days=101 * 366)


class Runner:
    """Claims and runs a client's due jobs in this thread, one at a time."""

    def __init__(self, client: Client) -> None:
        # The client only through a weak reference: a runner is kept per client
        # (`jobsup.testing.drain`), and must not keep it alive.
        self.client, self.store = weakref.ref(client), client.store
        self.services = JobServices(self.store)  # `ctx.log` lines are stored, `ctx.client` works
        self.owner = f"jobsup-testing-{os.getpid()}"

    def due_queues(self) -> list[str]:
        client = self.client()
        assert client is not None, "a runner is used through its client"
        return [row["queue"] for row in client.queues.list() if row["pending"]]

    def run_one(self, queue: str, counts: Counter[str], *, with_scheduled: bool) -> bool:
        """Claim one due job of `queue` and run it; False when there was none."""
        now = host_clock() + AHEAD if with_scheduled else None
        claimed = self.store.transitions.claim(queue, self.owner, limit=1, lease=LEASE, now=now)
        for job in claimed:
            self.run(job, counts)
        return bool(claimed)

    def run(self, job: ClaimedJob, counts: Counter[str]) -> None:
        started = time.monotonic()
        ran = execute(job, threading.Event(), self.services)
        self.services.finished(job)
        outcome = outcome_of(job, ran, None, None, seconds=time.monotonic() - started, worker=self.owner)
        counts[outcome.kind] += 1
        if outcome.kind == SUCCEEDED:
            self.store.transitions.complete([outcome])
        elif self.store.transitions.fail(outcome) == DEAD_LETTERED:
            counts[DEAD_LETTERED] += 1
