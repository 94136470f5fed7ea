"""The fault campaign (`tests/chaos`, see its README) on every database, as CI runs it: a
seeded mixed workload and seeded faults against real `jobsup start` supervisors, checked
against a side channel the job functions write; no invariant may be violated.

Each parameter runs `python -m tests.chaos` in a process of its own for `SECONDS` plus its
quiescent end, so under `pytest -n 4` the three databases run side by side: about two
minutes each on a lightly loaded 2-core host, three to five on one loaded by other work.
On PostgreSQL the campaign runs a private cluster (`tests/pgcluster.py`) and restarts it
among its faults, where the server binaries are installed (MariaDB's, `--restarts` with
`tests/mariadbserver.py`, run by hand for now: see below). The seed is fixed per database,
so a run draws the same operations and faults again (not the same interleaving);
``JOBSUP_CHAOS_SEED`` picks another.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import pgcluster

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SECONDS = 45  # per database; with setup and the quiescent end about 1.5 min each, side by side
SEEDS = {"sqlite": 11, "postgresql": 12, "mariadb": 13}


@pytest.mark.parametrize("database", ["sqlite", "postgresql", "mariadb"])
def test_the_campaign_finds_no_violation(database: str, request: pytest.FixtureRequest) -> None:
    server = {"postgresql": "pg_server", "mariadb": "mariadb_server"}.get(database)
    if server is not None:
        request.getfixturevalue(server)  # fails (or skips, when asked to) like every test of that server
    seed = int(os.environ.get("JOBSUP_CHAOS_SEED", SEEDS[database]))
    command = [sys.executable, "-m", "tests.chaos", "--database", database, "--seconds", str(SECONDS)]
    # MariaDB's restarts (`--restarts` with `tests/mariadbserver.py`) stay out of CI for now: in
    # one full run they left fragile jobs pending at the end (seed 13), not yet understood.
    private = {"postgresql": pgcluster.unusable}.get(database)
    if private is not None and private() is None:
        command.append("--restarts")  # a private server, restarted among the faults
    campaign = subprocess.Popen(
        [*command, "--seed", str(seed)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = campaign.communicate(timeout=SECONDS + 400)
    except subprocess.TimeoutExpired:
        campaign.terminate()  # it stops its supervisors on the way out
        out, err = campaign.communicate(timeout=120)
    last = out.strip().splitlines()[-1] if out.strip() else ""
    assert last.startswith("operations=") and " violations=0 " in last + " ", out[-20000:] + err[-5000:]
    assert campaign.returncode == 0, err[-5000:]
