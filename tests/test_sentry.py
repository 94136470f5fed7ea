"""What a job's failure looks like to the tools applications already use: a dead letter
reaches Sentry (the real sentry-sdk, initialised by `@jobsup.on_worker_start` in each worker)
as an error event with the job's exception and traceback, while jobsup's own log lines stay
scrubbed; what a job logs through `logging` is shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sentryapp  # noqa: F401 - its job types, so that this process enqueues them with their settings

import jobsup

from harness import Supervisor
from helpers import wait_until

pytestmark = pytest.mark.slow

SECRET = "cust-8f3a9c2e71d04b"  # a payload string long enough to be scrubbed from jobsup's texts


def events(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_dead_letter_reaches_sentry_with_its_traceback_and_logging_is_shown(
    url: str, record: Path, tmp_path: Path
) -> None:
    sentry = tmp_path / "sentry.jsonl"
    log = tmp_path / "supervisor.log"
    supervisor = Supervisor(
        url, record, log, "--app", "sentryapp", "--queue", "default=2", env={"JOBSUP_TEST_SENTRY": str(sentry)}
    )
    client = jobsup.Client(url)
    try:
        dead = client.wait(client.enqueue("sentry-fails", {"customer": SECRET}), timeout=120)
        assert dead.status == "dead_lettered" and [a.outcome for a in dead.history] == ["failed", "failed"]
        client.wait(client.enqueue("sentry-logs", {"order": 7}), timeout=120)
        found = wait_until(lambda: events(sentry), timeout=30, what="the dead letter's Sentry event")
        booted = Path(f"{sentry}.started")
        started = wait_until(
            lambda: len(pids := {int(pid) for pid in booted.read_text().split()}) == 2 and pids,
            timeout=60,
            what="both workers' on_worker_start",
        )
        shown = wait_until(
            lambda: "charged 7 through the application's own logger" in log.read_text(), timeout=30, what="app log"
        )
    finally:
        supervisor.stop()
        client.close()
    assert shown and len(started) == 2 and supervisor.pid not in started  # once in each worker, after the fork
    (event,) = found  # the dead letter only: a failed attempt that will be retried is a warning
    assert event["level"] == "error" and event["logger"] == "jobsup"
    assert event["logentry"]["formatted"].startswith("job.dead_lettered ")
    (exception,) = event["exception"]["values"]
    assert exception["type"] == "KeyError" and SECRET in exception["value"]  # Sentry gets it as raised
    frames = exception["stacktrace"]["frames"]
    assert frames[-1]["function"] == "fails" and frames[-1]["filename"].endswith("sentryapp.py")
    lines = log.read_text()
    assert "job.dead_lettered" in lines and "KeyError: 'no customer ***'" in lines
    assert SECRET not in lines  # jobsup's own lines, its traceback line included, stay scrubbed


def test_an_on_worker_start_that_raises_fails_the_boot_and_says_which(url: str, tmp_path: Path) -> None:
    env = {"JOBSUP_TEST_SENTRY": str(tmp_path / "sentry.jsonl"), "JOBSUP_TEST_SENTRY_REFUSE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "jobsup", "start", "--app", "sentryapp", "--database-url", url, "--metrics-port", "-1"],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "on_worker_start sentryapp.start_sentry raised ValueError: no DSN in this environment" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("setup", "shown"),
    [
        ("share_with_root()", ["INFO [", "app says hi"]),  # jobsup's format
        ("pass", []),  # log_root off: the root logger left alone, INFO goes nowhere
        # the app's own setup at its import, which `jobsup start` does before sharing
        ("logging.basicConfig(format='MINE %(message)s', level='INFO'); share_with_root()", ["MINE app"]),
    ],
)
def test_the_root_logger_gets_jobsups_handler_only_when_asked_and_not_set_up(setup: str, shown: list[str]) -> None:
    code = "import logging; from jobsup.observe.logs import configure_logging, share_with_root; "
    code += f"configure_logging(); {setup}; logging.getLogger('myapp').info('app says hi')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert all(part in done.stderr for part in shown) and done.stderr.count("app says hi") == (1 if shown else 0)
