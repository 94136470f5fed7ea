"""Jobs for the process tests, imported by real `jobsup start` supervisors (--app jobapps).

Each execution appends JSON lines to $JOBSUP_TEST_RECORD/<job id>: a start, a tick every
50 ms while it runs, and an end, so tests can prove two attempts never overlapped.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Annotated, Any

import jobsup


def record(ctx: jobsup.JobContext, what: str, **extra: Any) -> None:
    folder = Path(os.environ["JOBSUP_TEST_RECORD"])
    if "JOBSUP_TEST_HOST" in os.environ:  # which host ran it, in the network tests
        extra["host"] = os.environ["JOBSUP_TEST_HOST"]
    line = json.dumps({"what": what, "attempt": ctx.attempt, "pid": os.getpid(), "at": time.time(), **extra})
    with open(folder / str(ctx.job_id), "a") as file:
        file.write(line + "\n")


@jobsup.job("work", retry_in=lambda attempt: 0.5)
def work(ctx: jobsup.JobContext, payload: Any) -> Any:
    """Runs `seconds` (on the attempts listed in `slow_attempts`, default all), ticking.
    When cancelled: raises if `honour` is set, returns early if `return_on_cancel` is set,
    raises `jobsup.Cancelled` from `ctx.raise_if_cancelled()` if `raise_if_cancelled` is
    set, else goes on. `gil` holds the GIL for a long time instead of ticking (a catastrophic
    regular expression); `child` starts a subprocess first and records its pid. Raises if
    `fail` is set; returns `result`, or with `title` its process's title as it started."""
    payload = payload or {}
    record(ctx, "start")
    if payload.get("title"):
        return Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    slow = payload.get("slow_attempts")
    chosen = slow is None or ctx.attempt in slow
    if payload.get("child") and chosen:
        child = subprocess.Popen(["sleep", "600"])
        record(ctx, "child", pid=child.pid)
    if payload.get("gil") and chosen:
        re.match(r"(a+)+$", "a" * 31 + "b")  # about a minute without releasing the GIL
    seconds = float(payload.get("seconds", 0)) if chosen else 0.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ctx.cancelled.is_set() and payload.get("honour"):
            record(ctx, "cancelled")
            raise RuntimeError("stopped on cancellation")
        if ctx.cancelled.is_set() and payload.get("return_on_cancel"):
            record(ctx, "returned")
            return "stopped early"
        if payload.get("raise_if_cancelled"):
            try:
                ctx.raise_if_cancelled()
            except jobsup.Cancelled:
                record(ctx, "raised")
                raise
        record(ctx, "tick")
        time.sleep(0.05)
    record(ctx, "end")
    if payload.get("fail"):
        raise RuntimeError("failing as asked")
    return payload.get("result")


@jobsup.job("keyed-one", concurrency=1, max_attempts=1)
def keyed_one(ctx: jobsup.JobContext, payload: Any) -> Any:
    """`work` under a concurrency key of limit 1 (the key given at enqueue)."""
    return work(ctx, payload)


@jobsup.job("probed", queue="probed", max_attempts=1, breaker={"failures": 1, "reset": "1s"})
def probed(ctx: jobsup.JobContext, payload: Any) -> Any:
    """`work` behind a breaker that opens at one failure and half-opens a second later."""
    return work(ctx, payload)


@jobsup.job("compete")
def compete(ctx: jobsup.JobContext, payload: Any) -> None:
    record(ctx, "ran")


def _noop(ctx: jobsup.JobContext, payload: Any) -> None:
    """The job type of the tests that only need a name the database and the workers know."""


for _name in ("a", "b", "x", "ok", "noop", "send-email", "report", "works", "make-report", "cleanup"):
    jobsup.job(_name)(_noop)


@jobsup.job("step", retry_in=lambda attempt: 0.2)
def step(ctx: jobsup.JobContext, payload: Any) -> Any:
    """A workflow step or batch child: records what it saw upstream; fails if `fail` is set."""
    payload = payload or {}
    record(ctx, "ran", upstream=dict(ctx.upstream), payload=payload)
    if payload.get("fail"):
        raise RuntimeError("failing as asked")
    return payload.get("result", f"step {ctx.job_id}")


@jobsup.job("callback")
def callback(ctx: jobsup.JobContext, payload: Any) -> None:
    """A batch callback or a triggered job: records its payload."""
    record(ctx, "ran", payload=payload)


@jobsup.workflow("etl-factory")
def etl_factory(payload: Any) -> jobsup.Workflow:
    wf = jobsup.Workflow("etl")
    extract = wf.add("step", {"result": "rows"}, step="extract")
    wf.add("step", {"result": f"report for {payload['day']}"}, step="report", deps=[extract])
    return wf


@jobsup.job("async-work")
async def async_work(ctx: jobsup.JobContext, payload: Any) -> Any:
    """`work` for the event loop: sleeps `seconds` in asyncio.sleep, ticking; a cancelled
    task records it and ends."""
    import asyncio

    payload = payload or {}
    record(ctx, "start")
    try:
        deadline = time.monotonic() + float(payload.get("seconds", 0))
        while time.monotonic() < deadline:
            record(ctx, "tick")
            await asyncio.sleep(0.05)
    except asyncio.CancelledError:
        record(ctx, "cancelled")
        raise
    record(ctx, "end")
    return payload.get("result")


@jobsup.job("log-then-block", retry_in=lambda attempt: 0.5)
def log_then_block(ctx: jobsup.JobContext, payload: Any) -> None:
    """Per-job logs across a crash: the first attempt logs `lines` lines, then waits (for
    its worker to be killed) until cancelled or a minute has passed; a later attempt logs
    one line and returns."""
    record(ctx, "start")
    if ctx.attempt > 1:
        ctx.log.info("rerun on attempt %d", ctx.attempt)
        return
    for n in range(payload["lines"]):
        ctx.log.info("before the crash %d", n)
    ctx.cancelled.wait(60)


@jobsup.job(
    "sealed-app",
    params={"to": str, "token": Annotated[str, jobsup.Sensitive], "seconds": float | None},
    retry_in=lambda attempt: 0.2,
)
def sealed_app(ctx: jobsup.JobContext, params: dict[str, Any]) -> None:
    """A job with a sensitive token: logs it and (for ``to="fail-first"``) fails its first
    attempt naming it, to show both are scrubbed; records only the token's digest, so the
    test can tell the worker got the real value without writing it anywhere."""
    record(ctx, "start", token=hashlib.sha256(params["token"].encode()).hexdigest())
    ctx.log.info("calling %s with token %s", params["to"], params["token"])
    time.sleep(params.get("seconds") or 0)
    if params["to"] == "fail-first" and ctx.attempt == 1:
        raise RuntimeError(f"the partner refused token {params['token']}")


# The new deploy's shape of `evolving` (`test_secret_processes` stores jobs of an older one).
@jobsup.job("evolving", queue="evolve", params={"to": str, "count": str})
def evolving(ctx: jobsup.JobContext, params: dict[str, Any]) -> None:
    record(ctx, "ran")


@jobsup.job("evolving-ok", params={"to": str, "cc": str | None})
def evolving_ok(ctx: jobsup.JobContext, params: dict[str, Any]) -> None:
    record(ctx, "ran", params=params)


@jobsup.job("keyed-work", concurrency={"key": "customer", "limit": 2})
def keyed_work(ctx: jobsup.JobContext, payload: Any) -> None:
    """Runs `seconds` under its customer's concurrency key, recording its start and end."""
    record(ctx, "start")
    time.sleep(payload.get("seconds", 0.05))
    record(ctx, "end")


@jobsup.job("rated-work", queue="rated-work", rate="5/1s")
def rated_work(ctx: jobsup.JobContext, payload: Any) -> None:
    """At most five start a second across every instance; records its start, then runs
    `seconds` (default none)."""
    record(ctx, "start")
    time.sleep(payload.get("seconds", 0))


@jobsup.job("progressing", retry_in=lambda attempt: 0)
def progressing(ctx: jobsup.JobContext, payload: Any) -> None:
    """Reports half way, waits for the file `go` names, reports done; fails its first
    attempt after its first report if `fail_first` is set."""
    ctx.set_progress(0.5)
    if payload.get("fail_first") and ctx.attempt == 1:
        raise RuntimeError("failing after a report")
    deadline = time.monotonic() + 60
    while not os.path.exists(payload["go"]) and time.monotonic() < deadline:
        time.sleep(0.02)
    ctx.set_progress({"done": 2, "of": 2})
