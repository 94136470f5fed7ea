"""Django set up on a database of the test run's own, with Django's tables (migrate) and
jobsup's (`jobsup db upgrade`, as a deploy runs it)."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ["EXAMPLE_DB"] = str(Path(tempfile.mkdtemp()) / "db.sqlite3")
os.environ["DJANGO_SETTINGS_MODULE"] = "mysite.settings"

import django

django.setup()

from django.core.management import call_command  # noqa: E402

call_command("migrate", verbosity=0)
subprocess.run(
    [sys.executable, "-m", "jobsup", "db", "upgrade", "--database-url", f"sqlite:///{os.environ['EXAMPLE_DB']}"],
    check=True,
    capture_output=True,
)
