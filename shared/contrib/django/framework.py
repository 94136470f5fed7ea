"""The Tasks framework this backend implements: Django's own `django.tasks` (Django 6.0 and
later), else the `django-tasks` backport for older Django, which defines the same API under
another package (and calls `InvalidTask` `InvalidTaskError`). Type checkers read Django's
(django-stubs); both behave alike at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
else:
    try:
        from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task_backends
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import TaskError
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started
    except ImportError:  # Django before 6.0: the backport
        try:
            from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
        except ImportError:
            from django.core.exceptions import ImproperlyConfigured

            raise ImproperlyConfigured(
                "jobsup.contrib.django needs Django 6.0's django.tasks or, for older Django, the django-tasks "
                "backport: pip install 'jobsup[django]'"
            ) from None
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskError
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started

__all__ = [
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
