"""The fault campaign (`tests/chaos`, see its README) on every database, as CI runs it: a
seeded mixed workload and seeded faults against real `jobsup start` supervisors, checked
against a side channel the job functions write; no invariant may be violated.

Each parameter runs `python -m tests.chaos` in a process of its own for `SECONDS` plus its
quiescent end (about two minutes in all), so under `pytest -n 4` the three databases run
side by side. The seed is fixed per database, so a failure is reproducible; the
``JOBSUP_CHAOS_SEED`` environment variable picks another.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SECONDS = 75
SEEDS = {"sqlite": 11, "postgresql": 12, "mariadb": 13}


@pytest.mark.parametrize("database", ["sqlite", "postgresql", "mariadb"])
def test_the_campaign_finds_no_violation(database: str, request: pytest.FixtureRequest) -> None:
    request.getfixturevalue(
        {"sqlite": "sqlite_template", "postgresql": "pg_server", "mariadb": "mariadb_server"}[database]
    )
    seed = int(os.environ.get("JOBSUP_CHAOS_SEED", SEEDS[database]))
    done = subprocess.run(
        [sys.executable, "-m", "tests.chaos", "--database", database, "--seconds", str(SECONDS), "--seed", str(seed)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=SECONDS + 400,
    )
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert last.startswith("operations=") and " violations=0 " in last + " ", done.stdout[-20000:] + done.stderr[-5000:]
    assert done.returncode == 0, done.stderr[-5000:]
