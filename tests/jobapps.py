"""Jobs for the process tests, imported by real `jobsup start` supervisors (--app jobapps).

Each execution appends JSON lines to $JOBSUP_TEST_RECORD/<job id>: a start, a tick every
50 ms while it runs, and an end, so tests can prove two attempts never overlapped.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import jobsup


def record(ctx: jobsup.JobContext, what: str) -> None:
    folder = Path(os.environ["JOBSUP_TEST_RECORD"])
    line = json.dumps({"what": what, "attempt": ctx.attempt, "pid": os.getpid(), "at": time.time()})
    with open(folder / str(ctx.job_id), "a") as file:
        file.write(line + "\n")


@jobsup.job("work", retry_in=lambda attempt: 0.5)
def work(ctx: jobsup.JobContext, payload: Any) -> None:
    """Runs `seconds` (on the attempts listed in `slow_attempts`, default all), ticking;
    stops when cancelled if `honour` is set, raises if `fail` is set."""
    payload = payload or {}
    record(ctx, "start")
    slow = payload.get("slow_attempts")
    seconds = float(payload.get("seconds", 0)) if slow is None or ctx.attempt in slow else 0.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if payload.get("honour") and ctx.cancelled.is_set():
            record(ctx, "cancelled")
            raise RuntimeError("stopped on cancellation")
        record(ctx, "tick")
        time.sleep(0.05)
    record(ctx, "end")
    if payload.get("fail"):
        raise RuntimeError("failing as asked")


@jobsup.job("compete")
def compete(ctx: jobsup.JobContext, payload: Any) -> None:
    record(ctx, "ran")


def _noop(ctx: jobsup.JobContext, payload: Any) -> None:
    """The job type of the tests that only need a name the database and the workers know."""


for _name in ("a", "b", "x", "ok", "noop", "send-email", "report", "works", "make-report", "cleanup"):
    jobsup.job(_name)(_noop)
