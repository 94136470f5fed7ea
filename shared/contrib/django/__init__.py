"""Django's Tasks framework on jobsup: ``TASKS = {"default": {"BACKEND":
"jobsup.contrib.django.JobsupBackend", ...}}`` (`backend`), and the worker app module
``jobsup start --app jobsup.contrib.django.worker`` (`worker`). See docs/how-to/django.md."""

from jobsup.contrib.django.backend import JobsupBackend

__all__ = ["JobsupBackend"]
