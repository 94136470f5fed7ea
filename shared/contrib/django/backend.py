"""`JobsupBackend`: Django's Tasks framework on jobsup.

    TASKS = {
        "default": {
            "BACKEND": "jobsup.contrib.django.JobsupBackend",
            "QUEUES": ["default", "emails"],  # optional: the framework's allowed queue names
            "OPTIONS": {
                "DATABASE_URL": "postgresql://app@db/app",  # jobsup's database (else JOBSUP_DATABASE_URL)
                "DATABASE": "default",  # optional: Django's alias of that same database
                "MAX_ATTEMPTS": 1,  # optional: attempts per task (1, as the framework expects)
            },
        }
    }

A task's priority is the job's (both from -100 to 100 here, larger sooner), its queue_name
the job's queue, its run_after the job's run_at. With `DATABASE`, an enqueue inside
`transaction.atomic()` on that database writes the job in Django's own transaction
(`bridge`), so it commits or rolls back with the view's writes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from jobsup.client import Client
from jobsup.contrib.django import runner  # noqa: F401 - registers the job type for enqueue
from jobsup.contrib.django.bridge import Lender
from jobsup.contrib.django.framework import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
)
from jobsup.contrib.django.results import JOB_NAME, aware, payload_of, result_of
from jobsup.errors import BadInput, JobsupError
from jobsup.store.dialects import LENDABLE, normalise_url, same_database

OPTIONS = ("DATABASE_URL", "DATABASE", "MAX_ATTEMPTS")


class JobsupBackend(BaseTaskBackend):
    supports_defer = True
    supports_async_task = True  # run through the framework's Task.call (async_to_sync)
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        where = f"TASKS[{alias!r}]['OPTIONS']"
        unknown = sorted(set(self.options) - set(OPTIONS))
        if unknown:
            raise ImproperlyConfigured(f"{where} has unknown options {unknown}: the options are {list(OPTIONS)}")
        url = self.options.get("DATABASE_URL") or os.environ.get("JOBSUP_DATABASE_URL")
        if not url:
            raise ImproperlyConfigured(
                f"{where} needs DATABASE_URL, jobsup's database (or set JOBSUP_DATABASE_URL), "
                "e.g. 'postgresql://user@host/db': the one `jobsup start --database-url` works on"
            )
        try:
            self.url = normalise_url(url)
        except JobsupError as exc:
            raise ImproperlyConfigured(f"{where}['DATABASE_URL']: {exc}") from None
        attempts = self.options.get("MAX_ATTEMPTS", 1)
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ImproperlyConfigured(f"{where}['MAX_ATTEMPTS'] must be a whole number of 1 or more, not {attempts!r}")
        self.max_attempts = attempts
        database = self.options.get("DATABASE")
        self.lender = None if database is None else Lender(database, self.url)
        if database is not None:
            _check_same(where, database, self.url)

    @cached_property
    def client(self) -> Client:
        """Made at first use (not when a tasks module is imported), in the process that uses it."""
        return Client(self.url.render_as_string(hide_password=False))

    def validate_task(self, task: Task[Any, Any]) -> None:
        super().validate_task(task)
        try:
            jobsup_name(task.queue_name)
        except BadInput as exc:
            raise InvalidTask(f"queue_name {task.queue_name!r} is not a jobsup queue name: {exc}") from None

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any, Any]:
        from django.utils import timezone

        self.validate_task(task)
        result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id="",  # given below, once the job has one
            status=TaskResultStatus.READY,
            enqueued_at=None,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=args,  # made JSON-ready by the framework (tuples as lists), or refused
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        options: dict[str, Any] = {"queue": task.queue_name, "priority": task.priority}
        options["max_attempts"] = self.max_attempts
        if task.run_after is not None:
            options["run_at"] = aware(task.run_after)
        payload = payload_of(task, result.args, result.kwargs, self.alias)
        try:
            if self.lender is None:
                job_id = self.client.enqueue(JOB_NAME, payload, **options)
            else:
                with self.lender.lend() as conn:
                    job_id = self.client.enqueue(JOB_NAME, payload, connection=conn, **options)
        except BadInput as exc:  # a payload jobsup refuses (too large, say): the task's fault
            raise InvalidTask(f"task {task.module_path} cannot be enqueued: {exc}") from None
        object.__setattr__(result, "id", str(job_id))
        # This process's clock: inside a transaction the row may not be readable yet.
        object.__setattr__(result, "enqueued_at", timezone.now())
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        try:
            job_id = int(result_id)
            job = self.client.get(job_id)
        except (ValueError, TypeError, BadInput):
            job = None
        if job is None or job.name != JOB_NAME:
            raise TaskResultDoesNotExist(result_id)
        failed = any(attempt.error is not None for attempt in job.history)
        logs = self.client.logs(job.id) if failed else []
        return result_of(job, self.alias, logs)


def jobsup_name(queue: str) -> str:
    from jobsup.checks import check_name

    return check_name(queue, "queue")


def _check_same(where: str, alias: str, url: Any) -> None:
    """`DATABASE` must be Django's alias of jobsup's database: the transactional enqueue
    writes jobsup's rows on it."""
    from django.db import connections

    if alias not in connections.settings:
        raise ImproperlyConfigured(f"{where}['DATABASE'] is {alias!r}, which is not in DATABASES")
    settings: Mapping[str, Any] = connections.settings[alias]
    vendor = connections[alias].vendor
    if vendor not in LENDABLE:
        # Lent to SQLAlchemy's dialect of another driver (Django's mysqlclient under jobsup's
        # PyMySQL dialect) and without jobsup's session settings: not tested, so not offered.
        raise ImproperlyConfigured(
            f"{where}['DATABASE']: the transactional enqueue is for SQLite and PostgreSQL; on {vendor} "
            "leave DATABASE out and enqueue in transaction.on_commit"
        )
    from sqlalchemy.engine import URL

    try:
        django_url = URL.create(
            vendor,
            host=settings.get("HOST") or None,
            port=int(settings["PORT"]) if settings.get("PORT") else None,
            database=str(settings.get("NAME") or ""),
        )
        same = same_database(django_url, url)
    except JobsupError:
        same = False
    if not same:
        raise ImproperlyConfigured(
            f"{where}: DATABASES[{alias!r}] is not the database of DATABASE_URL ({url.render_as_string()}): "
            "give DATABASE only when Django and jobsup share one database (same host, port and name, or "
            "SQLite file), else leave it out and enqueue in transaction.on_commit"
        )
