"""The one jobsup job type every Django task runs as (`JOB_NAME`): its payload names the
task by import path, with its arguments (`results.payload_of`). Registered wherever the
backend is imported, so the web process's enqueue knows the type; run by
`jobsup start --app jobsup.contrib.django.worker`.

A raise fails the attempt as any job's does; the job type allows one attempt, as the
framework's tasks expect (`MAX_ATTEMPTS` in the backend's OPTIONS allows more). Before the
failure is written, the exception's class path and traceback go to the job's own log, from
which `get_result` builds `TaskResult.errors`.
"""

from __future__ import annotations

import json
import traceback
from dataclasses import replace
from typing import Any

import jobsup
from jobsup.contrib.django.results import ERROR_MARK, JOB_NAME


@jobsup.job(JOB_NAME, max_attempts=1)
def run_task(ctx: jobsup.JobContext, payload: dict[str, Any]) -> Any:
    from django.utils import timezone
    from django.utils.module_loading import import_string

    from jobsup.contrib.django.framework import (
        Task,
        TaskContext,
        TaskResultStatus,
        task_backends,
        task_finished,
        task_started,
    )

    task = import_string(payload["task"])
    if not isinstance(task, Task):
        raise jobsup.Discard(f"{payload['task']} is not a task (decorate it with @task)")
    backend = task_backends[payload.get("backend") or task.backend]
    # As a request does: a connection past its CONN_MAX_AGE, or broken, is not reused.
    _close_old_connections()
    try:
        # The result as stored now (RUNNING, this attempt counted): the context's, and the signals'.
        result = backend.get_result(str(ctx.job_id))
        task_started.send(sender=type(backend), task_result=result)
        try:
            args, kwargs = payload.get("args") or [], payload.get("kwargs") or {}
            if task.takes_context:
                value = task.call(TaskContext(task_result=result), *args, **kwargs)
            else:
                value = task.call(*args, **kwargs)
            value = json.loads(json.dumps(value))  # the return value as stored (tuples as lists), or TypeError
        except BaseException as exc:
            path = f"{type(exc).__module__}.{type(exc).__qualname__}"
            ctx.log.error("%s %s\n%s", ERROR_MARK, path, "".join(traceback.format_exception(exc)))
            _finished(task_finished, backend, result, TaskResultStatus.FAILED, timezone.now())
            raise
        _finished(task_finished, backend, result, TaskResultStatus.SUCCESSFUL, timezone.now(), value)
        return value
    finally:
        _close_old_connections()


def _close_old_connections() -> None:
    """Django's `close_old_connections`, except in a transaction: `jobsup.testing.drain` in a
    test runs tasks in the test's own thread, where Django would take the test's open
    transaction for an unusable connection and close it (its test client turns the same
    handler off for that reason)."""
    from django.db import close_old_connections, connections

    if not any(conn.in_atomic_block for conn in connections.all(initialized_only=True)):
        close_old_connections()


def _finished(signal: Any, backend: Any, result: Any, status: Any, at: Any, value: Any = None) -> None:
    """`task_finished` with the result as it is about to be written."""
    done = replace(result, status=status, finished_at=at)
    object.__setattr__(done, "_return_value", value)  # the framework's own field, not an init argument
    signal.send(sender=type(backend), task_result=done)
