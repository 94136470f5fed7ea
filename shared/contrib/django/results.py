"""A jobsup job of type `JOB_NAME` read back as the framework's `TaskResult`.

- **status**: waiting and pending are READY (also between attempts: "ready to be executed
  again"), running is RUNNING, succeeded is SUCCESSFUL; dead-lettered and cancelled are
  FAILED, the framework having no other end.
- **times**: `enqueued_at` is the row's creation, `started_at` the first attempt's start,
  `last_attempted_at` the latest attempt's, `finished_at` the job's end.
- **worker_ids**: one per attempt that ran (a released attempt, given back at shutdown
  unrun or unfinished, does not count in jobsup and is not listed), its lease owner
  (host, worker, token), so `attempts` is jobsup's count.
- **errors**: one per failed attempt, oldest first: the exception's class path and
  traceback, which the runner logs to the job's own log (`ctx.log`) as it fails; an
  attempt that ended without one (timed out, its worker killed) gets its stored error.
"""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import Any

from django.utils.dateparse import parse_datetime
from django.utils.module_loading import import_string

from jobsup.contrib.django.framework import Task, TaskError, TaskResult, TaskResultDoesNotExist, TaskResultStatus
from jobsup.store.rows import RELEASED, SUCCEEDED, Job, LogLine

JOB_NAME = "django.task"
ERROR_MARK = "django.task raised"  # the first words of the runner's log line for a failure

_STATUS = {
    "waiting": TaskResultStatus.READY,
    "pending": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "succeeded": TaskResultStatus.SUCCESSFUL,
    "dead_lettered": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
}


def payload_of(task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any], alias: str) -> dict[str, Any]:
    """What the job stores: the task by its import path, its arguments, the backend alias
    and the run_after it was given (jobsup's row keeps the priority and queue)."""
    run_after = None if task.run_after is None else task.run_after.isoformat()
    return {"task": task.module_path, "args": args, "kwargs": kwargs, "backend": alias, "run_after": run_after}


def task_of(job: Job, alias: str) -> Task[Any, Any]:
    """The task as it was enqueued: the module-level task at its path, with the job's
    priority and queue and the payload's run_after."""
    payload = job.payload if isinstance(job.payload, dict) else {}
    path = payload.get("task")
    try:
        found = import_string(path) if isinstance(path, str) else None
    except ImportError:
        found = None
    if not isinstance(found, Task):
        raise TaskResultDoesNotExist(f"job {job.id}'s task {path!r} is not a task this code defines")
    run_after = payload.get("run_after")
    return found.using(
        priority=job.priority,
        queue_name=job.queue,
        backend=alias,
        run_after=parse_datetime(run_after) if isinstance(run_after, str) else None,
    )


def result_of(job: Job, alias: str, logs: list[LogLine]) -> TaskResult[Any, Any]:
    """The framework's view of `job` (`logs`: its error lines, for the tracebacks)."""
    payload = job.payload if isinstance(job.payload, dict) else {}
    ran = [attempt for attempt in job.history if attempt.outcome != RELEASED]
    status = _STATUS[job.status]
    result: TaskResult[Any, Any] = TaskResult(
        task=task_of(job, alias),
        id=str(job.id),
        status=status,
        enqueued_at=job.created_at,
        started_at=ran[0].started_at if ran else None,
        last_attempted_at=ran[-1].started_at if ran else None,
        finished_at=job.finished_at if status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED) else None,
        args=list(payload.get("args") or []),
        kwargs=dict(payload.get("kwargs") or {}),
        backend=alias,
        errors=errors_of(job, logs),
        worker_ids=[attempt.owner for attempt in ran],
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", job.result)  # the framework's own field: frozen
    return result


def errors_of(job: Job, logs: list[LogLine]) -> list[TaskError]:
    logged = {line.attempt: line.message for line in logs if line.message.startswith(ERROR_MARK)}
    errors = []
    for attempt in job.history:
        if attempt.outcome in (None, SUCCEEDED, RELEASED):
            continue
        message = logged.get(attempt.attempt)
        if message is not None:
            head, _, traceback = message.partition("\n")
            errors.append(TaskError(exception_class_path=head[len(ERROR_MARK) :].strip(), traceback=traceback))
        else:
            text = attempt.error or attempt.outcome or "failed"
            errors.append(TaskError(exception_class_path=_class_path(attempt.outcome, text), traceback=text))
    return errors


def _class_path(outcome: str | None, text: str) -> str:
    """An importable class for an attempt that logged no traceback: its stored error's own
    type where that is a built-in one (``ValueError: ...``), else TimeoutError for a timeout
    and Exception for the rest."""
    name = text.partition(":")[0].strip()
    if isinstance(getattr(builtins, name, None), type) and issubclass(getattr(builtins, name), BaseException):
        return f"builtins.{name}"
    return "builtins.TimeoutError" if outcome == "timed_out" else "builtins.Exception"


def aware(moment: datetime) -> datetime:
    """A naive run_after (USE_TZ off; the framework refuses one otherwise) is in Django's
    current time zone; jobsup refuses naive datetimes."""
    from django.utils import timezone

    return moment if timezone.is_aware(moment) else timezone.make_aware(moment)
