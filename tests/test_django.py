"""jobsup.contrib.django: a real Django project (tests/django_project) on SQLite and on
PostgreSQL, its tasks run by a real `jobsup start`, its enqueues inside
`transaction.atomic()` committed and rolled back with the view's rows.

Django is set up only in subprocesses (`python -m scenarios NAME`), never in the pytest
worker, so no settings leak into the other tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import jobsup

from helpers import create_pg_database, drop_pg_database, pg_url, run_jobsup

PROJECT = Path(__file__).parent / "django_project"


class Site:
    """The Django project on one database, jobsup's tables beside its own."""

    def __init__(self, django_db: str, url: str) -> None:
        self.url = url
        self.env = {
            **os.environ,
            "PYTHONPATH": str(PROJECT),
            "DJANGO_SETTINGS_MODULE": "mysite.settings",
            "JOBSUP_DJANGO_DB": django_db,
            "JOBSUP_DATABASE_URL": url,
        }
        self.env.pop("JOBSUP_FAULTS", None)

    def run(self, name: str, *args: str, env: dict[str, str] | None = None) -> Any:
        command = [sys.executable, "-m", "scenarios", name, *args]
        done = subprocess.run(
            command, capture_output=True, text=True, cwd=PROJECT, env={**self.env, **(env or {})}, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    def client(self) -> jobsup.Client:
        return jobsup.Client(self.url)


def _prepared(django_db: str, url: str) -> Site:
    site = Site(django_db, url)
    upgraded = run_jobsup("db", "upgrade", "--database-url", url)  # jobsup's tables, as a deploy runs it
    assert upgraded.returncode == 0, upgraded.stderr
    assert site.run("migrate") == {"ok": True}  # Django's, beside them
    return site


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    if request.param == "sqlite":
        yield _prepared(str(tmp_path / "app.db"), f"sqlite:///{tmp_path / 'app.db'}")
        return
    request.getfixturevalue("pg_server")
    name = f"jobsup_django_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    create_pg_database(name)
    try:
        yield _prepared(f"pg:{name}", pg_url(name))
    finally:
        drop_pg_database(name)


@pytest.fixture
def worker(site: Site, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`jobsup start` with the Django worker app, on both queues the project uses."""
    command = [sys.executable, "-m", "jobsup", "start", "--app", "jobsup.contrib.django.worker"]
    command += ["--database-url", site.url, "--queue", "default=1:4", "--queue", "emails=1"]
    command += ["--poll-interval", "100ms", "--metrics-port", "-1", "--shutdown-grace", "3s"]
    with open(tmp_path / "worker.log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=log, env=site.env, cwd=tmp_path, start_new_session=True)
    yield process
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def test_tasks_run_on_jobsup_start(site: Site, worker: subprocess.Popen[bytes], tmp_path: Path) -> None:
    enqueued = site.run("enqueue")
    assert all(view["status"] == "READY" and view["enqueued_at"] for view in enqueued.values())
    client = site.client()
    try:
        for name in ("receipt", "explode", "context", "async"):
            client.wait(int(enqueued[name]["id"]), timeout=90)
        # The task's priority and queue are the job's; run_after its run_at, so it waits.
        receipt_job = client.get(int(enqueued["receipt"]["id"]))
        later_job = client.get(int(enqueued["later"]["id"]))
        assert receipt_job is not None and later_job is not None
        assert (receipt_job.name, receipt_job.queue, receipt_job.priority) == ("django.task", "emails", 7)
        assert later_job.status == "pending" and later_job.run_at is not None
        assert later_job.run_at.isoformat() == enqueued["later"]["run_after"]
    finally:
        client.close()
    ids = [enqueued[name]["id"] for name in ("receipt", "explode", "context", "async", "later")]
    seen = site.run("get", *ids)
    receipt = seen[enqueued["receipt"]["id"]]
    assert receipt["status"] == "SUCCESSFUL", (tmp_path / "worker.log").read_text()
    assert receipt["return_value"] == {"to": "ann@example.com", "text": "Thanks, order 1", "pair": [1, 2]}
    assert (receipt["priority"], receipt["queue_name"], receipt["attempts"]) == (7, "emails", 1)
    assert receipt["started_at"] and receipt["finished_at"] and receipt["last_attempted_at"]
    assert receipt["errors"] == []
    failed = seen[enqueued["explode"]["id"]]
    assert failed["status"] == "FAILED" and failed["attempts"] == 1 and failed["finished_at"]
    [error] = failed["errors"]
    assert error["class"] == "builtins.LookupError"
    assert "LookupError: boom: on purpose" in error["traceback"] and "in explode" in error["traceback"]
    context = seen[enqueued["context"]["id"]]
    assert context["return_value"] == {"label": "ctx", "attempt": 1, "id": enqueued["context"]["id"]}
    assert seen[enqueued["async"]["id"]]["return_value"] == 5
    assert seen[enqueued["later"]["id"]]["status"] == "READY"


def test_refresh_follows_the_worker(site: Site, worker: subprocess.Popen[bytes]) -> None:
    [done, failed] = site.run("refresh", "90")["results"]
    assert done["status"] == "SUCCESSFUL" and done["return_value"]["to"] == "bob@example.com"
    assert failed["status"] == "FAILED" and failed["errors"][0]["class"] == "builtins.LookupError"


def test_enqueue_commits_and_rolls_back_with_the_view(site: Site) -> None:
    separate = "separate" if site.url.startswith("postgresql") else ""
    found = site.run("atomic", separate)
    ids = found["ids"]
    assert found["orders"] == ["kept@example.com", "outer@example.com"]
    client = site.client()
    try:
        jobs = {job.id: job for job in client.list_jobs(limit=50)}
        # The enqueue in the committed block is there; those in the rolled-back block and
        # savepoint are not (on SQLite a later job may reuse a lost id: it is another job).
        assert jobs[int(ids["committed"])].payload["args"] == [1]
        assert jobs[int(ids["outer"])].payload["args"] == [1, 2]
        assert sorted(job.payload["args"] for job in jobs.values()) == (
            [[1], [1, 2], [4, 4]] if separate else [[1], [1, 2]]
        )
        if separate:  # the backend without DATABASE wrote at once, on a connection of its own
            assert jobs[int(ids["separate"])].payload["args"] == [4, 4]
    finally:
        client.close()


def test_drain_runs_tasks_without_a_worker(tmp_path: Path) -> None:
    site = _prepared(str(tmp_path / "app.db"), f"sqlite:///{tmp_path / 'app.db'}")
    found = site.run("drain")
    assert found["result"]["status"] == "SUCCESSFUL"
    assert found["result"]["return_value"]["text"] == "Drained, order 1"
    assert found["failing"]["status"] == "FAILED"
    assert "boom: drained" in found["failing"]["errors"][0]["traceback"]


def test_the_framework_refuses_what_it_defines_as_invalid(tmp_path: Path) -> None:
    site = _prepared(str(tmp_path / "app.db"), f"sqlite:///{tmp_path / 'app.db'}")
    refused = site.run("refused")
    assert refused["priority"].startswith("InvalidTask")
    assert refused["queue"].startswith("InvalidTask")
    assert refused["naive"].startswith("InvalidTask")
    assert refused["arguments"].startswith("TypeError")  # not JSON: refused before anything is written


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"DATABASE_URL": None}, "needs DATABASE_URL"),
        ({"DATABSE": "default"}, "unknown options ['DATABSE']"),
        ({"MAX_ATTEMPTS": 0}, "MAX_ATTEMPTS"),
        ({"DATABASE_URL": "redis://x"}, "unsupported database URL scheme"),
        ({"DATABASE": "other"}, "'other', which is not in DATABASES"),
        ({"DATABASE_URL": "sqlite:///elsewhere.db"}, "is not the database of DATABASE_URL"),
    ],
)
def test_bad_configuration_is_named(tmp_path: Path, options: dict[str, Any], named: str) -> None:
    site = Site(str(tmp_path / "app.db"), f"sqlite:///{tmp_path / 'app.db'}")
    env = {"JOBSUP_DJANGO_OPTIONS": json.dumps(options)}
    if options.get("DATABASE_URL", "") is None:
        env["JOBSUP_DATABASE_URL"] = ""
    found = site.run("backend", env=env)
    assert found["error"] is not None and named in found["error"], found
    assert "ImproperlyConfigured" in found["classes"]
    assert "\n" not in found["error"]


def test_the_worker_app_names_a_missing_settings_module(tmp_path: Path) -> None:
    done = run_jobsup(
        "start", "--app", "jobsup.contrib.django.worker", "--database-url", f"sqlite:///{tmp_path / 'j.db'}",
        env={"DJANGO_SETTINGS_MODULE": ""},
    )  # fmt: skip
    assert done.returncode == 2
    assert "DJANGO_SETTINGS_MODULE" in done.stderr
