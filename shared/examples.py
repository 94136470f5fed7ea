"""Demo jobs: ``jobsup start --app jobsup.examples``; ``python -m jobsup.examples`` enqueues a few.

- ``hello`` succeeds at once;
- ``flaky`` fails twice, then succeeds (retrying after 2 s, not the default 30 s);
- ``sleepy`` sleeps for ``payload["seconds"]``, stopping early when cancelled.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import jobsup


@jobsup.job("hello")
def hello(ctx: jobsup.JobContext, payload: Any) -> str:
    name = (payload or {}).get("name", "world")
    print(f"hello, {name} (job {ctx.job_id})", flush=True)
    return f"hello, {name}"


@jobsup.job("flaky", retry_in=lambda attempt: 2.0)
def flaky(ctx: jobsup.JobContext, payload: Any) -> None:
    if ctx.attempt < 3:
        raise RuntimeError(f"flaky fails on attempt {ctx.attempt} of 3; it will be retried")
    print(f"flaky succeeded on attempt {ctx.attempt}", flush=True)


@jobsup.job("sleepy", timeout="5m")
def sleepy(ctx: jobsup.JobContext, payload: Any) -> None:
    seconds = float((payload or {}).get("seconds", 5))
    if ctx.cancelled.wait(seconds):
        raise RuntimeError("cancelled before it finished sleeping")


def enqueue_demo(client: jobsup.Client) -> list[int]:
    return client.enqueue_many(
        [
            {"name": "hello", "payload": {"name": "jobsup"}},
            {"name": "flaky"},
            {"name": "sleepy", "payload": {"seconds": 3}},
            {"name": "hello", "payload": {"name": "again"}, "delay": "5s"},
        ]
    )


if __name__ == "__main__":
    from jobsup.settings import load
    from jobsup.store import migrate
    from jobsup.store.database import Database

    url = load().database_url
    migrate.upgrade(Database(url))
    ids = enqueue_demo(jobsup.Client(url))
    # This interpreter's own `jobsup` (a virtualenv's bin/ need not be on PATH), else the module.
    script = Path(sys.executable).with_name("jobsup")
    command = str(script) if script.exists() else f"{sys.executable} -m jobsup"
    print(f"enqueued demo jobs {ids} in {url}; now run: {command} start --app jobsup.examples")
