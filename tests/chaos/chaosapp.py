"""The campaign's job types, imported by its supervisors (``--app tests.chaos.chaosapp``).

Every run of a job function writes to the side channel (`tests.chaos.sidechannel`), which
jobsup never writes: a ``start`` line when the function begins, a ``tick`` every
`TICK` seconds while it runs (so a run whose process dies still shows how long it was
alive), and an ``end`` line when it returns or raises. The functions sleep in plain steps
and look at ``ctx.cancelled`` only when their payload says ``honour`` (most real job code
does not look at it).

Payload fields (all optional): ``s`` seconds to run; ``k`` the concurrency key given at
enqueue (recorded to check the limits); ``fail`` a list of attempts that raise; ``honour``
return early once cancelled.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import jobsup
from jobsup.events import publishing
from tests.chaos.limits import BREAKER, FLEETING_KEPT, LIMITS, RATES, UNPUBLISHED
from tests.chaos.sidechannel import TICK, run_id, write

OUTAGE = "CHAOS_OUTAGE"  # a file whose presence makes `fragile` fail: the partner is down
SECRET_DIGEST = "CHAOS_SECRET_DIGEST"


def _retry(attempt: int) -> float:
    return 0.5


def _record(ctx: jobsup.JobContext, payload: Any, event: str, rid: str, **extra: Any) -> None:
    payload = payload if isinstance(payload, dict) else {}
    write(
        event,
        rid=rid,
        job=ctx.job_id,
        attempt=ctx.attempt,
        name=ctx.name,
        key=f"{ctx.name}:{payload['k']}" if payload.get("k") is not None else None,
        # Whose worker ran it: a stop of that supervisor may lose its success (`checker.successes_written`).
        **({"supervisor": os.getppid()} if event == "start" else {}),
        **extra,
    )


def _run(ctx: jobsup.JobContext, payload: Any, **extra: Any) -> None:
    """Start, tick for ``s`` seconds (or until cancelled, with ``honour``), fail if asked, end."""
    payload = payload if isinstance(payload, dict) else {}
    rid = run_id()
    _record(ctx, payload, "start", rid, **extra)
    outcome = "ok"
    try:
        deadline = time.time() + float(payload.get("s", 0))
        while time.time() < deadline:
            if payload.get("honour") and ctx.cancelled.is_set():
                outcome = "honoured"
                return
            time.sleep(min(TICK, max(0.0, deadline - time.time())))
            _record(ctx, payload, "tick", rid)
        if ctx.attempt in payload.get("fail", ()):
            outcome = "raised"
            raise RuntimeError("chaos: this attempt fails")
    finally:
        _record(ctx, payload, "end", rid, outcome=outcome)


@jobsup.job("plain", max_attempts=3, retry_in=_retry)
def plain(ctx: jobsup.JobContext, payload: Any) -> None:
    _run(ctx, payload)


# Its successes are kept `FLEETING_KEPT` seconds (the settings keep every other type's for
# days): the campaign's purges, run by competing supervisors, may delete only those.
@jobsup.job("fleeting", max_attempts=3, retry_in=_retry, retain={"succeeded": FLEETING_KEPT})
def fleeting(ctx: jobsup.JobContext, payload: Any) -> None:
    _run(ctx, payload)


@jobsup.job("k1", queue="keys", concurrency=LIMITS["k1"], max_attempts=2, retry_in=_retry)
def k1(ctx: jobsup.JobContext, payload: Any) -> None:
    _run(ctx, payload)


@jobsup.job("k3", queue="keys", concurrency=LIMITS["k3"], max_attempts=2, retry_in=_retry)
def k3(ctx: jobsup.JobContext, payload: Any) -> None:
    _run(ctx, payload)


_RATED_LIMIT, _RATED_PER = RATES["rated"]


@jobsup.job("rated", queue="partner", rate={"limit": _RATED_LIMIT, "per": _RATED_PER}, max_attempts=2, retry_in=_retry)
def rated(ctx: jobsup.JobContext, payload: Any) -> None:
    _run(ctx, payload)


@jobsup.job(BREAKER, queue="fragile", breaker={"failures": 3, "reset": "2s"}, max_attempts=2, retry_in=_retry)
def fragile(ctx: jobsup.JobContext, payload: Any) -> None:
    breaker = next((b for b in ctx.client.breakers.list() if b["name"] == BREAKER), None)
    probe = breaker is not None and breaker["state"] == "half_open" and breaker["probe_job_id"] == ctx.job_id
    down = Path(os.environ.get(OUTAGE, "/nonexistent")).exists()
    payload = dict(payload or {})
    if down:
        payload["fail"] = [ctx.attempt]
    _run(ctx, payload, probe=probe)


@jobsup.job("step", max_attempts=2, retry_in=_retry)
def step(ctx: jobsup.JobContext, payload: Any) -> None:
    _run(ctx, payload)


@jobsup.job("callback", max_attempts=3, retry_in=_retry)
def callback(ctx: jobsup.JobContext, payload: Any) -> None:
    _run(ctx, payload, batch=(payload or {}).get("batch", {}).get("id"), kind=(payload or {}).get("kind"))


@jobsup.job("note", max_attempts=3, retry_in=_retry)
def note(ctx: jobsup.JobContext, payload: Any) -> None:
    _run(ctx, payload, parent=(payload or {}).get("parent"))


@jobsup.job("cron", max_attempts=3, retry_in=_retry)
def cron(ctx: jobsup.JobContext, payload: Any) -> None:
    _run(ctx, payload)


@jobsup.job("pooled", queue="pool", max_attempts=3, retry_in=_retry)
def pooled(ctx: jobsup.JobContext, payload: Any) -> None:
    _run(ctx, payload)


@jobsup.job("fan", queue="fan", max_attempts=3, retry_in=_retry)
def fan(ctx: jobsup.JobContext, payload: Any) -> None:
    _run(ctx, payload)


@jobsup.job("aio", queue="aio", max_attempts=3, retry_in=_retry)
async def aio(ctx: jobsup.JobContext, payload: Any) -> None:
    payload = payload if isinstance(payload, dict) else {}
    rid = run_id()
    _record(ctx, payload, "start", rid)
    outcome = "ok"
    try:
        deadline = time.time() + float(payload.get("s", 0))
        while time.time() < deadline:
            await asyncio.sleep(min(TICK, max(0.0, deadline - time.time())))
            _record(ctx, payload, "tick", rid)
        if ctx.attempt in payload.get("fail", ()):
            outcome = "raised"
            raise RuntimeError("chaos: this attempt fails")
    except asyncio.CancelledError:
        outcome = "task_cancelled"
        raise
    finally:
        _record(ctx, payload, "end", rid, outcome=outcome)


@dataclass
class Sealed:
    token: Annotated[str, jobsup.Sensitive]
    s: float = 0.0


@jobsup.job("secret", params=Sealed, max_attempts=3, retry_in=_retry)
def secret(ctx: jobsup.JobContext, params: Sealed) -> None:
    opened = hashlib.sha256(params.token.encode()).hexdigest() == os.environ.get(SECRET_DIGEST)
    _run(ctx, {"s": params.s}, opened=opened)


@jobsup.on_worker_start
def unpublished() -> None:
    """The workers of a supervisor started with `UNPUBLISHED` write no events (the supervisor
    itself still does: its sweeps and fires are every queue's), so their settles have no
    outbox step and are sent behind their claims (`limits.QUIET`)."""
    if os.environ.get(UNPUBLISHED):
        publishing.disable()
