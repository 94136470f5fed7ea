"""Testing code that uses jobsup without running `jobsup start`: on a real (temporary)
jobsup database, the jobs your code enqueues run in the test's own process, through the
same preparation, outcome and settle as in a worker (`jobsup.testing.runner`).

- `drain(client)` runs every due job until none is left (the steps, triggers and batch
  callbacks they set off too) and says how their attempts ended;
- `inline(client)`: within it, each enqueue's jobs run as soon as it has committed;
- `assert_enqueued` / `refute_enqueued` look for jobs by name, payload (a subset) and fields;
- `run_job(name, payload)` calls one job function directly, for a unit test;
- the ``jobsup_client`` pytest fixture (`jobsup.testing.pytest_plugin`) is a client on a
  fresh, migrated SQLite database per test.

What a test run does not have, a worker does: timeouts, cancellation of a running job,
lease renewal, and running jobs at once.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from jobsup.client import Client
from jobsup.errors import BadInput, UnknownJob
from jobsup.observe.events import subscribe, unsubscribe
from jobsup.payload import encode_payload
from jobsup.registry import lookup
from jobsup.store.database import before_callers_commit
from jobsup.store.rows import ClaimedJob, Job
from jobsup.testing.runner import Runner
from jobsup.worker.execute import Ran, prepare

__all__ = ["assert_enqueued", "drain", "inline", "refute_enqueued", "run_job"]

MAX_JOBS = 10_000  # a drain that runs more is most likely a job that enqueues itself
_runners: weakref.WeakKeyDictionary[Client, Runner] = weakref.WeakKeyDictionary()


def drain(
    client: Client, queue: str | None = None, *, with_scheduled: bool = False, max_jobs: int = MAX_JOBS
) -> dict[str, int]:
    """Run `client`'s due jobs in this thread, of `queue` or of every queue, until none is
    left, including those the jobs run set off (workflow steps, triggers, batch callbacks,
    jobs they enqueue). Returns how many attempts ended each way (``succeeded``,
    ``failed``, ``discarded``...) and how many jobs were ``dead_lettered``; a failed attempt
    is settled as a worker settles it, its job retried when its delay has passed.

    `with_scheduled`: run jobs whose ``run_at`` or retry delay lies ahead as if it had
    passed, so a failing job is retried until dead-lettered. Paused queues, rate limits,
    concurrency keys and open breakers hold jobs back as they would in a worker. More than
    `max_jobs` runs raise `RuntimeError` (a job that enqueues itself would never end)."""
    runner = _runners.get(client)
    if runner is None:  # one per client: its job log keeps a thread
        runner = _runners[client] = Runner(client)
    counts = Counter[str]()
    ran = 0
    while True:
        queues = [queue] if queue is not None else runner.due_queues()
        progressed = False
        for name in queues:
            while runner.run_one(name, counts, with_scheduled=with_scheduled):
                progressed, ran = True, ran + 1
                if ran > max_jobs:
                    raise RuntimeError(
                        f"drain ran {max_jobs} jobs and more keep coming (a job that enqueues itself?): "
                        "pass max_jobs= to allow more"
                    )
        if not progressed:
            return dict(counts)


@contextmanager
def inline(client: Client, *, with_scheduled: bool = False, max_jobs: int = MAX_JOBS) -> Iterator[dict[str, int]]:
    """Within it, the jobs an enqueue in this process writes run as soon as it has
    committed, with what they set off, as `drain(client)` runs them. An enqueue in your own
    transaction (``connection=``) is announced just before your COMMIT, when its jobs are
    not yet visible: those run when the block ends (a rolled-back one never runs). A job's
    exception is kept on the job as a worker keeps it (its status, ``last_error``), not
    raised into the code that enqueued, whose transaction has committed by then. Yields the
    counts of every attempt run within, filled in when the block ends. A drain that fails
    (``max_jobs`` passed, a database error) raises as the block ends. `client` is on the
    database your code enqueues to."""
    counts: Counter[str] = Counter()
    draining = threading.local()
    deferred = False
    failures: list[Exception] = []  # raised where the event bus would only log them

    def run() -> None:
        draining.on = True
        try:
            counts.update(drain(client, with_scheduled=with_scheduled, max_jobs=max_jobs))
        except Exception as exc:
            failures.append(exc)
        finally:
            draining.on = False

    def on_event(kind: str, fields: dict[str, Any]) -> None:
        nonlocal deferred
        if kind != "job.enqueued" or getattr(draining, "on", False):
            return  # jobs enqueued by a job being run are run by the drain under way
        if before_callers_commit():
            deferred = True
            return
        run()

    totals: dict[str, int] = {}
    subscribe(on_event)
    try:
        yield totals
    finally:
        unsubscribe(on_event)
        if deferred:
            run()
        totals.update(counts)
    if failures:  # a drain that failed (max_jobs, the database): raised as the block ends
        raise failures[0]


def run_job(name: str, payload: Any = None, *, client: Client | None = None, attempt: int = 1) -> Any:
    """Call the job function registered as `name` with `payload` in this thread and return
    what it returns; what it raises propagates. The payload goes through JSON and the
    job's typed parameters as in a worker, and the function gets a real `JobContext`
    (``ctx.client`` is `client`, if given; ``ctx.log`` is a plain logger). Nothing is
    written to a database."""
    registered = lookup(name)
    if registered is None:
        raise UnknownJob(f"no job named {name!r} is registered in this process: import the module that defines it")
    kind = registered.type
    job = ClaimedJob(0, name, kind.queue, encode_payload(payload), attempt, kind.max_attempts, None, None, "testing")
    prepared = prepare(job, threading.Event())
    if isinstance(prepared, Ran):  # its payload does not fit its parameters
        raise BadInput(f"{name}: {prepared.error}")
    ctx = prepared.ctx if client is None else replace(prepared.ctx, client_loader=lambda: client)
    if prepared.is_async:
        return asyncio.run(prepared.function(ctx, prepared.payload))
    return prepared.function(ctx, prepared.payload)


def assert_enqueued(client: Client, name: str, payload: Any = None, **fields: Any) -> Job:
    """The newest job named `name` whose payload holds `payload` (a subset: each key given
    with that value, nested mappings alike) and whose other fields equal `fields`
    (``queue=``, ``priority=``, ``status=``, ``actor=``...); `AssertionError` listing the
    jobs of that name when there is none."""
    jobs = _named(client, name)
    matched = [job for job in jobs if _matches(job, payload, fields)]
    if not matched:
        seen = "; ".join(f"id {j.id} {j.status} payload={j.payload!r}" for j in jobs[:10]) or "none"
        wanted = ", ".join([*([f"payload holding {payload!r}"] if payload is not None else []), *_said(fields)])
        raise AssertionError(
            f"no {name!r} job{' with ' + wanted if wanted else ''} was enqueued; jobs of that name: {seen}"
        )
    return matched[0]


def refute_enqueued(client: Client, name: str, payload: Any = None, **fields: Any) -> None:
    """`AssertionError` if a job `assert_enqueued` would find exists."""
    matched = [job for job in _named(client, name) if _matches(job, payload, fields)]
    if matched:
        raise AssertionError(f"{len(matched)} {name!r} job(s) were enqueued, ids {[job.id for job in matched]}")


def _named(client: Client, name: str) -> list[Job]:
    jobs: list[Job] = []
    cursor = None
    while True:
        page, cursor = client.jobs_page(name=name, limit=500, cursor=cursor)
        jobs += page
        if cursor is None:
            return jobs


def _matches(job: Job, payload: Any, fields: Mapping[str, Any]) -> bool:
    for field, value in fields.items():
        if not hasattr(job, field):
            raise BadInput(f"a job has no field {field!r}; fields: {', '.join(sorted(vars(job)))}")
        if getattr(job, field) != value:
            return False
    return payload is None or _holds(job.payload, payload)


def _holds(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, Mapping):
        return isinstance(actual, Mapping) and all(
            key in actual and _holds(actual[key], value) for key, value in wanted.items()
        )
    return bool(actual == wanted)


def _said(fields: Mapping[str, Any]) -> list[str]:
    return [f"{field}={value!r}" for field, value in fields.items()]
