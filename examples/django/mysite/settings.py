"""The Django example's settings: one SQLite file (EXAMPLE_DB, else ./db.sqlite3) holds
Django's tables and jobsup's, so an enqueue commits with the view's writes."""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
DB = Path(os.environ.get("EXAMPLE_DB") or BASE_DIR / "db.sqlite3")

SECRET_KEY = "example-only"
DEBUG = True
ALLOWED_HOSTS = ["*"]
USE_TZ = True
ROOT_URLCONF = "mysite.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["orders"]
try:
    import django.tasks  # noqa: F401 - Django 6.0+: the framework is built in
except ImportError:
    INSTALLED_APPS.append("django_tasks")  # the backport: its checks and signal receivers

DATABASES = {
    # IMMEDIATE: a transaction that writes takes the file's write lock at BEGIN, as jobsup's do.
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": DB, "OPTIONS": {"transaction_mode": "IMMEDIATE"}}
}

TASKS = {
    "default": {
        "BACKEND": "jobsup.contrib.django.JobsupBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"DATABASE_URL": f"sqlite:///{DB}", "DATABASE": "default"},
    }
}
