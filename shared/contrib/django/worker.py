"""The app module of a jobsup worker that runs Django tasks:

    DJANGO_SETTINGS_MODULE=mysite.settings jobsup start --app jobsup.contrib.django.worker

Importing it sets Django up (the settings module named by DJANGO_SETTINGS_MODULE, as
`manage.py` does), once in the supervisor before it forks its workers, and registers the
job type the tasks run as. The tasks' own modules are imported when a task first runs.
"""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

if not os.environ.get("DJANGO_SETTINGS_MODULE"):
    raise ImproperlyConfigured(
        "jobsup.contrib.django.worker sets Django up from DJANGO_SETTINGS_MODULE, which is not set: "
        "DJANGO_SETTINGS_MODULE=mysite.settings jobsup start --app jobsup.contrib.django.worker"
    )

import django  # after the check, so that its message is the one shown

django.setup()

from jobsup.contrib.django import runner  # noqa: E402, F401 - registers the job type
