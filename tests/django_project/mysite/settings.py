"""A small Django project for jobsup's Django tests: its database from the environment
(JOBSUP_DJANGO_DB: a SQLite path, or pg:NAME on the test server), jobsup on the same
database (JOBSUP_DATABASE_URL)."""

import json
import os

SECRET_KEY = "tests-only"
USE_TZ = True
INSTALLED_APPS = ["shop"]
try:
    import django.tasks  # noqa: F401 - Django 6.0+: built in
except ImportError:
    INSTALLED_APPS.append("django_tasks")  # the backport's checks and signal receivers

_DB = os.environ["JOBSUP_DJANGO_DB"]
if _DB.startswith("pg:"):
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": _DB[3:],
            "HOST": "127.0.0.1",
            "PORT": "5432",
            "USER": "postgres",
        }
    }
else:
    # IMMEDIATE: a transaction that writes takes the write lock at BEGIN, as jobsup's own do.
    DATABASES = {
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": _DB, "OPTIONS": {"transaction_mode": "IMMEDIATE"}}
    }

_OPTIONS = {"DATABASE_URL": os.environ.get("JOBSUP_DATABASE_URL"), "DATABASE": "default"}
_OPTIONS.update(json.loads(os.environ.get("JOBSUP_DJANGO_OPTIONS", "{}")))  # the bad-configuration tests
TASKS = {
    "default": {
        "BACKEND": "jobsup.contrib.django.JobsupBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {key: value for key, value in _OPTIONS.items() if value is not None},
    },
    # Another database in all but name: no DATABASE, so an enqueue commits at once.
    "separate": {
        "BACKEND": "jobsup.contrib.django.JobsupBackend",
        "QUEUES": [],
        "OPTIONS": {"DATABASE_URL": os.environ.get("JOBSUP_DATABASE_URL")},
    },
}
