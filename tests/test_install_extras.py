"""What a SQLite-only install pulls: no PostgreSQL driver and no holiday data. Asking for
either without its extra says which extra to install, in one line."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import requires

import pytest


def test_the_base_install_needs_neither_psycopg_nor_holidays() -> None:
    base = [r for r in requires("jobsup") or [] if "extra ==" not in r]
    assert base and not [r for r in base if r.lower().startswith(("psycopg", "holidays"))], base
    extras = {r.split(";")[0].strip() for r in requires("jobsup") or [] if "extra ==" in r}
    assert "psycopg[binary]>=3.2" in extras and "holidays>=0.50" in extras


def without(module: str, code: str) -> subprocess.CompletedProcess[str]:
    """Run `code` where `module` cannot be imported, as in an install without its extra."""
    blocked = f"import sys; sys.modules[{module!r}] = None\n"
    return subprocess.run([sys.executable, "-c", blocked + code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("module", "code", "said"),
    [
        (
            "psycopg",
            "import jobsup; jobsup.Client('postgresql://u@127.0.0.1/db')",
            "postgresql needs the psycopg driver, which did not import "
            "(import of psycopg halted; None in sys.modules): pip install 'jobsup[postgresql]'",
        ),
        (
            "holidays",
            "from jobsup.calendars import parse_calendar; parse_calendar('x', [{'holidays': 'US'}])",
            "public holidays need the holidays package: pip install 'jobsup[calendars]'",
        ),
    ],
)
def test_a_missing_extra_is_named(module: str, code: str, said: str) -> None:
    done = without(module, code)
    assert done.returncode != 0 and said in done.stderr.splitlines()[-1], done.stderr


def test_sqlite_works_without_either(tmp_path: object) -> None:
    code = (
        "import sys; sys.modules['psycopg'] = sys.modules['holidays'] = None\n"
        "import jobsup; from jobsup.store.migrate import upgrade\n"
        f"c = jobsup.Client('sqlite:///{tmp_path}/j.db'); upgrade(c.database)\n"
        "print(c.get(c.enqueue('x', allow_unknown=True)).status)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "pending", done.stderr
