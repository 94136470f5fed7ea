"""Sensitive parameters and parameter evolution through real `jobsup start` supervisors
(issue 11, parts 2, 3 and 6): a sealed value appears nowhere in the database's bytes, the
logs, `/metrics`, the CLI's output or the stored errors, yet the worker gets it; a wrong
key fails the attempt and is counted; keys rotate while workers run; a deploy that no
longer fits waiting jobs says so at start."""

from __future__ import annotations

import base64
import hashlib
import subprocess
from pathlib import Path
from typing import Any

import pytest

import jobsup
from jobsup.jobtypes import JobType
from jobsup.params import params_of
from jobsup.secrets import ENV
from jobsup.store.rows import NewJob
from jobsup.store.schema import FINISHED_STATUSES

from harness import port_of, records, sample, scrape, status_of
from helpers import run_jobsup, wait_until

pytestmark = pytest.mark.slow

SECRET = "tok-Hx93kQe-never-shown"
K1 = "k1:" + base64.urlsafe_b64encode(bytes(range(100, 132))).decode()
K2 = "k2:" + base64.urlsafe_b64encode(bytes(range(132, 164))).decode()
DIGEST = hashlib.sha256(SECRET.encode()).hexdigest()


def database_bytes(url: str) -> bytes:
    """Everything the database holds, as bytes: the SQLite files, or a pg_dump."""
    if url.startswith("sqlite"):
        path = Path(url.split("///", 1)[1])
        return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*") if p.is_file())
    name = url.rsplit("/", 1)[1]
    done = subprocess.run(
        ["pg_dump", "-h", "127.0.0.1", "-U", "postgres", name], capture_output=True, timeout=120, check=True
    )
    return done.stdout


def test_a_sealed_value_is_nowhere_but_in_the_worker(
    url: str, start: Any, record: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, K1)
    client = jobsup.Client(url)
    supervisor = start(env={ENV: K1})
    port = port_of(supervisor)
    job_id = client.enqueue("sealed-app", {"to": "fail-first", "token": SECRET})
    monkeypatch.setenv(ENV, K2)  # sealed under a key the supervisor does not hold
    unopenable = client.enqueue("sealed-app", {"to": "x", "token": SECRET}, max_attempts=1)
    wait_until(lambda: status_of(client, job_id) == "succeeded", timeout=60, what="the sealed job to succeed")
    wait_until(lambda: status_of(client, unopenable) == "dead_lettered", timeout=60, what="the unopenable job")

    starts = [r for r in records(record, job_id) if r["what"] == "start"]
    assert [r["token"] for r in starts] == [DIGEST, DIGEST]  # both attempts got the real value
    assert records(record, unopenable) == []  # never called
    stored = client.get(unopenable)
    assert stored is not None and "sealed with key 'k2'" in str(stored.last_error)

    _, metrics = scrape(port)
    assert sample(metrics, "jobsup_sealed_parameter_failures_total", job="sealed-app") >= 1
    job = client.get(job_id)
    assert job is not None and job.payload["token"] == "***" and "***" in str(job.history[0].error)
    ran = [
        run_jobsup("--database-url", url, *command)
        for command in (
            ("jobs", "show", str(job_id), "--json"),
            ("jobs", "list", "--json"),
            ("jobs", "logs", str(job_id)),
            ("dead", "list", "--json"),
        )
    ]
    assert [done.returncode for done in ran] == [0, 0, 0, 0], [done.stderr for done in ran]
    shown = [done.stdout for done in ran]
    assert str(unopenable) in shown[3] and '"token": "***"' in shown[0]
    assert "calling fail-first with token ***" in shown[2]  # the secret is scrubbed, the diagnosis kept
    supervisor.stop()
    logs = supervisor.log_path.read_text(errors="replace")
    assert "sealed-app" in logs  # the log does speak of the job
    for where, text in [("metrics", metrics), ("logs", logs), *(("cli", s) for s in shown)]:
        assert SECRET not in text, f"the secret is in the {where}"
    dumped = database_bytes(url)
    assert b"calling fail-first with token ***" in dumped  # the dump does hold the job's rows
    assert SECRET.encode() not in dumped and SECRET[4:12].encode() not in dumped


def test_keys_rotate_while_workers_run(url: str, start: Any, record: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, K1)
    client = jobsup.Client(url)
    ids = client.enqueue_many(
        [{"name": "sealed-app", "payload": {"to": f"n{n}", "token": SECRET, "seconds": 0.02}} for n in range(200)]
    )
    start("--queue", "default=2", env={ENV: f"{K2},{K1}"})
    wait_until(lambda: records(record, ids[5]), timeout=60, what="the workers to be running")
    rotated = run_jobsup("--database-url", url, "keys", "rotate", env={ENV: f"{K2},{K1}"}, timeout=120)
    assert rotated.returncode == 0, rotated.stderr
    assert "re-sealed" in rotated.stdout and SECRET not in rotated.stdout + rotated.stderr

    def statuses() -> set[str]:
        return {status_of(client, job_id) for job_id in ids}

    # Every job, not the last few: two workers claim batches, so a later batch can finish
    # while an earlier one is still running.
    wait_until(
        lambda: statuses() <= set(FINISHED_STATUSES), timeout=120, what=lambda: f"all jobs to finish: {statuses()}"
    )
    assert statuses() == {"succeeded"}
    for job_id in ids:
        assert [r["token"] for r in records(record, job_id) if r["what"] == "start"] == [DIGEST]
    assert client.store.sealed.older_than_newest(jobsup.secrets.parse_keys(f"{K2},{K1}")) == 0


def test_a_deploy_that_no_longer_fits_waiting_jobs_says_so_at_start(url: str, start: Any, record: Path) -> None:
    client = jobsup.Client(url)
    old = params_of({"to": str, "count": int, "legacy": bool}, job="evolving").schema
    old_ok = params_of({"to": str}, job="evolving-ok").schema
    client.store.definitions.publish(
        [JobType("evolving", queue="evolve", params=old), JobType("evolving-ok", params=old_ok)], instance="old-deploy"
    )
    # Jobs the old deploy enqueued (written as it wrote them: this process has the new code).
    old_jobs = [
        NewJob("evolving", "evolve", f'{{"to":"a","count":{n},"legacy":true}}', 0, None, 5, None) for n in range(3)
    ]
    client.store.transitions.enqueue([*old_jobs, NewJob("evolving-ok", "default", '{"to":"b"}', 0, None, 5, None)])
    supervisor = start()
    warning = wait_until(
        lambda: [line for line in supervisor.output().splitlines() if "definitions.incompatible" in line],
        timeout=30,
        what="the incompatibility warning",
    )
    assert len(warning) == 1 and "name=evolving " in warning[0] and "jobs=3" in warning[0]
    assert "field 'count' must be a string, not an integer" in warning[0]
    assert "field 'legacy' is not a parameter of this job" in warning[0]
    ok = client.list_jobs(queue="default")[0].id
    wait_until(lambda: status_of(client, ok) == "succeeded", timeout=30, what="the job of the compatible change")
    assert records(record, ok)[0]["params"] == {"to": "b"}
