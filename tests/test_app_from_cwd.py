"""`--app` imports a module from the working directory, as `python -m` and RQ's CLI do, without
PYTHONPATH: the installed `jobsup` script's own folder is what Python puts first on its path,
so these tests run that script, never ``python -m jobsup`` (which adds the directory itself)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import jobsup

from helpers import wait_until

APP = """\
import os

import jobsup


@jobsup.job("cwd-app-pid")
def pid(ctx, payload):
    return {"pid": os.getpid()}
"""


def script() -> str:
    found = Path(sys.executable).parent / "jobsup"
    assert found.exists(), f"no installed jobsup script beside {sys.executable}: pip install -e ."
    return str(found)


def environment() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "JOBSUP_FAULTS")}
    return {**env, "PYTHONSAFEPATH": "1"}  # nothing but jobsup may add the directory


def jobsup_command(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([script(), *args], cwd=cwd, env=environment(), capture_output=True, text=True, timeout=60)


def test_definitions_sync_and_start_import_an_app_from_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "ncapp.py").write_text(APP)
    upgraded = jobsup_command("db", "upgrade", cwd=tmp_path)
    assert upgraded.returncode == 0, upgraded.stderr
    synced = jobsup_command("definitions", "sync", "--app", "ncapp", cwd=tmp_path)
    assert synced.returncode == 0, synced.stderr
    assert "published 1 job types" in synced.stdout
    client = jobsup.Client(f"sqlite:///{tmp_path / 'jobsup.db'}")
    job_id = client.enqueue("cwd-app-pid")
    log = tmp_path / "supervisor.log"
    with open(log, "wb") as out:
        supervisor = subprocess.Popen(
            [script(), "start", "--app", "ncapp", "--queue", "default=1", "--metrics-port", "-1"],
            cwd=tmp_path,
            env=environment(),
            stdout=out,
            stderr=out,
        )
        try:
            done = wait_until(
                lambda: supervisor.poll() is not None or client.get(job_id).status == "succeeded",  # type: ignore[union-attr]
                timeout=60,
                what=lambda: f"job {job_id} to succeed: {log.read_text(errors='replace')}",
            )
            assert done is True and supervisor.poll() is None, log.read_text(errors="replace")
        finally:
            if supervisor.poll() is None:
                supervisor.send_signal(signal.SIGTERM)
            supervisor.wait(30)
    assert client.get(job_id).result["pid"] != supervisor.pid  # type: ignore[union-attr]
    client.close()
