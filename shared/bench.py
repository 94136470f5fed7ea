"""The jobs of `jobsup bench`: ``jobsup start --app jobsup.bench`` runs them.

- ``jobsup.bench.noop`` does nothing (and returns nothing, as most jobs do: their
  successes settle many to a statement);
- ``jobsup.bench.sleep`` sleeps ``payload["seconds"]``, stopping early when cancelled;
- ``jobsup.bench.stamp`` returns the ``time.time()`` at which it started, so its stored
  result says when it began to run (the latency part: that minus the enqueue, one host).

The bench enqueues them on a queue of its own; `QUEUE` is only their published default.
"""

from __future__ import annotations

import time
from typing import Any

import jobsup

NOOP, SLEEP, STAMP = "jobsup.bench.noop", "jobsup.bench.sleep", "jobsup.bench.stamp"
QUEUE = "jobsup-bench"


@jobsup.job(NOOP, queue=QUEUE, max_attempts=1)
def noop(ctx: jobsup.JobContext, payload: Any) -> None:
    return None


@jobsup.job(SLEEP, queue=QUEUE, max_attempts=1)
def sleep(ctx: jobsup.JobContext, payload: Any) -> None:
    ctx.cancelled.wait(float((payload or {}).get("seconds", 0)))


@jobsup.job(STAMP, queue=QUEUE, max_attempts=1)
def stamp(ctx: jobsup.JobContext, payload: Any) -> float:
    return time.time()
