"""`jobsup start` refuses what cannot work, at once, with one readable line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from helpers import TESTS, run_jobsup


def start(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_jobsup("start", *args, cwd=cwd)


def test_an_app_that_does_not_import_stops_start_without_forking(tmp_path: Path) -> None:
    (tmp_path / "brokenapp.py").write_text("import jobsup\nraise ImportError('no module named payments')\n")
    env_path = f"{tmp_path}{os.pathsep}{TESTS}"
    result = run_jobsup("start", "--app", "brokenapp", cwd=tmp_path, env={"PYTHONPATH": env_path})
    assert result.returncode == 2
    assert "cannot import app 'brokenapp': ImportError: no module named payments" in result.stderr
    assert "worker.spawned" not in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unreachable_database_exits_1_with_host_and_port(tmp_path: Path) -> None:
    result = start("--database-url", "postgresql://jobs:hunter2@127.0.0.1:1/jobs", cwd=tmp_path)
    assert result.returncode == 1
    assert "cannot reach the database" in result.stderr and "host 127.0.0.1, port 1" in result.stderr
    assert "hunter2" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--queue", "default=zero"], "workers of queue 'default': 'zero' is not a whole number"),
        (["--lease", "10s", "--heartbeat", "20s"], "heartbeat (20s) must be at most a quarter of the lease (10s)"),
        (["--lease", "3m", "--heartbeat", "1m"], "heartbeat (60s) must be at most a quarter of the lease (180s)"),
        (["--log-level", "verbose"], "'verbose' is not one of 'debug', 'info', 'warning', 'error'"),
        (["--metrics-port", "70000"], "70000 is not in the range -1<=x<=65535"),
        (["--metrics-port", "ninety"], "'ninety' is not a valid integer"),
        (["--claim-batch", "0"], "0 is less than 1: claim at least one job at once (or auto)"),
        (["--claim-batch", "lots"], "'lots' is not a whole number or auto"),
        (["--faults", "everything@now"], "is not ROLE:OPERATIONS@START+LENGTH"),
        (["--faults", "worker:renew@0s+5s:explode"], "is not ROLE:OPERATIONS@START+LENGTH"),
        (["--faults", "worker:renwe@0s+5s"], "no operation named renwe; use all or some of"),
        (["--poll-interval", "0s"], "poll_interval (0s) would claim in a busy loop"),
        (["--faults", "worker:@0s+5s"], "names no operation"),
        (["--shutdown-grace", "a while"], "shutdown_grace: 'a while' is not a duration"),
    ],
)
def test_bad_options_exit_2_with_the_reason(tmp_path: Path, args: list[str], message: str) -> None:
    result = start(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "jobsup.db").exists()
