"""Job registration by stable name: `@jobsup.job("send-email", queue="mail")`.

The name, not the function's import path, is what is stored, so code can move without
stranding jobs. A process that registers jobs publishes their settings to the database when
it runs them (`jobsup start`), so a process that only enqueues them needs the name alone
(see `jobsup.jobtypes`).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from jobsup import retention
from jobsup.checks import check_attempts, check_name, check_priority
from jobsup.context import JobContext
from jobsup.durations import parse_duration
from jobsup.errors import AppImportFailed, BadInput, WorkerStartFailed
from jobsup.jobtypes import DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE, REGISTERED, JobType, RetryPolicy
from jobsup.params import Params, params_of

JobFunction = Callable[[JobContext, Any], Any]
F = TypeVar("F", bound=JobFunction)


@dataclass(frozen=True)
class Registered:
    type: JobType
    function: JobFunction
    is_async: bool = False  # an ``async def``: run on the worker's event loop
    params: Params | None = None  # typed parameters: what the function receives


_registry: dict[str, Registered] = REGISTERED  # this process's job types, read by `jobtypes.Resolver`


def job(
    name: str,
    *,
    queue: str = DEFAULT_QUEUE,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    timeout: object = None,
    priority: int = 0,
    retry_in: Callable[[int], float] | None = None,
    then: object = (),
    params: object = None,
    sensitive: Iterable[str] = (),
    concurrency: object = None,
    rate: object = None,
    breaker: object = None,
    sla: object = None,
    calendar: object = None,
    retain: object = None,
) -> Callable[[F], F]:
    """Register a job function under a stable `name`.

    `timeout` is a duration (``"60s"``); `retry_in(attempt)` overrides the default backoff
    (exponential from 30 s to 1 h with jitter) with seconds to wait after a failed attempt.
    `then` is a `jobsup.Trigger` (or a list) every job of this type fires when it ends.
    The function is called as ``function(ctx, payload)`` and returned unchanged. It may be
    an ``async def``: it then runs on the worker's event loop, and a cancellation (timeout,
    operator cancel, shutdown, lost lease) also cancels its task.

    `params` (a dataclass, a TypedDict, a pydantic model, or ``{"field": type}``) types the
    payload: enqueues are checked against it and get its defaults, and the function
    receives the typed object. `sensitive` names parameters to seal at rest (as does
    ``Annotated[str, jobsup.Sensitive]``).

    Flow control (`jobsup.policies`): `concurrency` (at most N running per concurrency key),
    `rate` (at most N starts per period), `breaker` (stop claiming after failures), `sla`
    (start_within / finish_within), `calendar` (blackout or allowed hours).

    `retain` keeps this type's finished jobs for its own time instead of the `retain_*`
    settings: a duration (or None, forever) by end state, e.g. ``{"succeeded": "1h",
    "dead_lettered": None}``; the states it leaves out follow the settings. It is published
    with the definition, and the supervisor's retention purge applies it.
    """
    check_name(name, "job name")
    check_name(queue, "queue")
    check_attempts(max_attempts)
    check_priority(priority)
    seconds = None if timeout is None else parse_duration(timeout, what=f"timeout of job {name!r}")
    from jobsup.workflow_spec import check_triggers

    triggers = check_triggers(then) if then else ()
    typed = None if params is None else params_of(params, job=name, sensitive=sensitive)
    if typed is None and sensitive:
        raise BadInput(f"job {name!r}: sensitive= names parameters, so give params= too (their types)")
    schema = None if typed is None else typed.schema
    from jobsup.policies import Limits

    policies = Limits.parse(name, concurrency=concurrency, rate=rate, breaker=breaker, sla=sla, calendar=calendar)
    kept = retention.parse(name, retain)
    retry = RetryPolicy(custom=retry_in)
    jobtype = JobType(name, queue, priority, max_attempts, seconds, retry, triggers, schema, policies or None, kept)

    def register(function: F) -> F:
        existing = _registry.get(name)
        if existing is not None and _origin(existing.function) != _origin(function):
            raise BadInput(f"job name {name!r} is already registered to {existing.function!r}")
        if policies.rate is not None:
            _check_shared_rate(name, policies.rate)
        _registry[name] = Registered(jobtype, function, _is_async(function), typed)
        return function

    return register


def workflow(name: str, *, queue: str = DEFAULT_QUEUE, **settings: Any) -> Callable[[Callable[[Any], Any]], Any]:
    """Register a workflow factory: ``factory(payload) -> jobsup.Workflow``. It becomes a job
    named `name` that builds the workflow and enqueues it, once per job (a retried attempt finds the
    workflow its first attempt made): so a recurring schedule, or any enqueue of `name`,
    starts the workflow. The job's result is ``{"workflow_id": id}``."""

    def register(factory: Callable[[Any], Any]) -> Any:
        def start(ctx: JobContext, payload: Any) -> dict[str, int]:
            from jobsup.workflow_spec import Workflow

            built = factory(payload)
            if not isinstance(built, Workflow):
                raise BadInput(f"workflow factory {name!r} returned {type(built).__name__}, not a jobsup.Workflow")
            return {"workflow_id": ctx.client.workflows.enqueue(built, key=f"started-by-job:{ctx.job_id}")}

        start.__module__, start.__qualname__ = factory.__module__, factory.__qualname__
        job(name, queue=queue, **settings)(start)
        return factory

    return register


def _check_shared_rate(name: str, policy: Any) -> None:
    """Job types sharing a rate key share one window, so they must agree on it: which limit
    held would otherwise depend on which type's job a claim met first."""
    key = policy.key_for(name)
    for other, registered in _registry.items():
        limits = registered.type.limits
        theirs = None if limits is None else limits.rate
        if other == name or theirs is None or theirs.key_for(other) != key:
            continue
        if (theirs.limit, theirs.per) != (policy.limit, policy.per):
            raise BadInput(
                f"job {name!r}: rate key {key!r} is already {theirs.limit} per {theirs.per:g}s for job {other!r}, "
                f"not {policy.limit} per {policy.per:g}s; types sharing a key share its window, so give them one rate"
            )


def _is_async(function: JobFunction) -> bool:
    """An ``async def``, or an object with an async __call__. Not looked through
    functools.wraps: a plain wrapper may run the coroutine itself (a plain function that
    returns an awaitable has it awaited in its own thread, see `jobsup.worker.execute`)."""
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(type(function).__call__)


def _origin(function: JobFunction) -> tuple[str, str]:
    # The same code registered again (a module reloaded) is not a clash.
    return (getattr(function, "__module__", ""), getattr(function, "__qualname__", repr(function)))


def import_apps(apps: Iterable[str]) -> None:
    """Import the modules that register jobs (`--app`), the working directory's included:
    the `jobsup` script's path starts at its own folder, not where it was run, so without
    this `--app myapp` beside `myapp.py` would need PYTHONPATH=. (`python -m` and RQ's CLI
    put the directory first too, where this puts it)."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    for app in apps:
        try:
            importlib.import_module(app)
        except Exception as exc:
            raise AppImportFailed(f"cannot import app {app!r}: {type(exc).__name__}: {exc}") from None


WorkerStart = Callable[[], object]
_worker_starts: list[WorkerStart] = []  # this process's `on_worker_start` functions, in order


def on_worker_start(function: WorkerStart) -> WorkerStart:
    """Run the decorated function (no arguments) in each worker process once it is forked,
    before it claims a job: the place for what must not cross a fork, such as
    ``sentry_sdk.init()``, an OpenTelemetry SDK's exporter, or a connection pool. One that
    raises fails that worker's boot (``worker.boot_failed`` names it; the supervisor retries
    with backoff, and stops when every worker fails at once)."""
    if not callable(function):
        raise BadInput(f"@jobsup.on_worker_start decorates a function, not {function!r}")
    if function not in _worker_starts:  # the same function decorated twice runs once
        _worker_starts.append(function)
    return function


def run_worker_starts() -> None:
    """Call the `on_worker_start` functions (a worker, after the fork)."""
    for function in _worker_starts:
        try:
            function()
        except BaseException as exc:  # SystemExit too: the boot fails, named, not as a crash
            where = f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', function)}"
            raise WorkerStartFailed(f"on_worker_start {where} raised {type(exc).__name__}: {exc}") from exc


def lookup(name: str) -> Registered | None:
    return _registry.get(name)


def registered_types() -> list[JobType]:
    return [_registry[name].type for name in sorted(_registry)]
