"""Competing instances: two `jobsup start` supervisors and the xdist workers of one test
run process one set of jobs on one PostgreSQL database.

At session start every xdist worker (or the lone process without xdist) joins a database
named from the run id. The first creates it, seeds the jobs and starts two supervisors
(whose workers run the `compete` job, which records each execution in a file); all xdist
workers wait at a barrier so they really overlap, then each claims and settles until
nothing is left, recording every claim in a table. `test_competing_instances.py` checks,
once every worker has reported, that each job ran exactly once. The controller stops the
supervisors and drops the database.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from jobsup.client import Client
from jobsup.store import migrate
from jobsup.store.database import Database
from jobsup.store.rows import SUCCEEDED, Outcome

from helpers import alive, create_pg_database, drop_pg_database, pg_error, pg_url

JOBS = 2000
QUEUE = "competition"
BARRIER_SECONDS = 60.0

_TABLES = """
CREATE TABLE IF NOT EXISTS competition_participant (
    worker text PRIMARY KEY, claimed int, error text, finished boolean NOT NULL DEFAULT false);
CREATE TABLE IF NOT EXISTS competition_claim (job_id bigint NOT NULL, worker text NOT NULL);
CREATE TABLE IF NOT EXISTS competition_supervisor (pid int PRIMARY KEY);
"""
SUPERVISORS = 2
# The jobs are seeded not yet due, and made due once every competitor is up, so that none
# gets a head start.
HELD_BACK = datetime(2100, 1, 1, tzinfo=UTC)
RELEASE = "UPDATE jobsup_job SET run_at = now() WHERE queue = :queue AND status = 'pending' AND run_at > now()"
SUPERVISOR_WORKERS = 2  # each supervisor runs this many workers on the competition queue


def competitor_url(name: str) -> str:
    """The URL the competitors (the xdist workers' claims, the supervisors) use: the server's,
    or a pooler's port in front of it (JOBSUP_TEST_COMPETING_PORT; see test_pgbouncer.py).
    Setting up and checking always go to the server itself."""
    port = os.environ.get("JOBSUP_TEST_COMPETING_PORT")
    return pg_url(name).replace(":5432/", f":{port}/") if port else pg_url(name)


def database_name(run_id: str) -> str:
    return f"jobsup_run_{run_id[:16]}"


def record_dir(run_id: str) -> Path:
    return Path(tempfile.gettempdir()) / database_name(run_id)


def worker_name() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "solo")


def worker_count() -> int:
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def run_id(config: pytest.Config) -> str:
    return os.environ.get("PYTEST_XDIST_TESTRUNUID") or str(config.stash[_RUN_ID])


_RUN_ID = pytest.StashKey[str]()


def _is_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput") and bool(config.getoption("numprocesses", None))


def on_configure(config: pytest.Config) -> None:
    # Fix the run id in the controller before xdist makes one, so it can clean up after.
    if _is_controller(config) and config.getoption("testrunuid", None) is None:
        config.option.testrunuid = uuid.uuid4().hex
    config.stash[_RUN_ID] = config.getoption("testrunuid", None) or uuid.uuid4().hex


def on_session_start(config: pytest.Config) -> None:
    if _is_controller(config) or os.environ.get("JOBSUP_TEST_POSTGRES") == "skip" or pg_error():
        return
    name = database_name(run_id(config))
    try:
        _participate(name, record_dir(run_id(config)))
    except Exception as exc:  # recorded for the test to report; a hook must not crash the worker
        _record_error(name, f"{type(exc).__name__}: {exc}")


def on_session_finish(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and not pg_error():
        name = database_name(run_id(config))
        stop_supervisors(name)
        drop_pg_database(name)
        shutil.rmtree(record_dir(run_id(config)), ignore_errors=True)


def supervisor_pids(name: str) -> list[int]:
    from sqlalchemy import create_engine

    engine = create_engine(pg_url(name))
    try:
        with engine.connect() as conn:
            return list(conn.execute(text("SELECT pid FROM competition_supervisor")).scalars())
    except Exception:
        return []  # no run database: nothing was started
    finally:
        engine.dispose()


def stop_supervisors(name: str) -> None:
    """SIGTERM the run's supervisors and wait (bounded) until they are gone. Only processes
    still running on the run's database: a supervisor stopped earlier may have left its pid
    to another test's process by now."""
    pids = [pid for pid in supervisor_pids(name) if _runs_on(pid, name)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def _runs_on(pid: int, name: str) -> bool:
    try:
        return name in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def _participate(name: str, records: Path) -> None:
    _join(name, records)
    client = Client(competitor_url(name))
    engine = client.database.engine
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO competition_participant (worker) VALUES (:w)"), {"w": worker_name()})
    _barrier(engine)
    claimed = 0
    while batch := client.store.transitions.claim(QUEUE, f"xdist-{worker_name()}", limit=5, lease=300.0):
        with engine.begin() as conn:
            conn.execute(
                text("INSERT INTO competition_claim (job_id, worker) VALUES (:job_id, :worker)"),
                [{"job_id": job.id, "worker": worker_name()} for job in batch],
            )
        client.store.transitions.complete([Outcome(job.held, SUCCEEDED) for job in batch])
        claimed += len(batch)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE competition_participant SET claimed = :n, finished = true WHERE worker = :w"),
            {"n": claimed, "w": worker_name()},
        )
    client.close()


def _join(name: str, records: Path) -> None:
    """Create, migrate and seed the run's database and start the supervisors, once,
    whichever worker comes first."""
    from sqlalchemy import create_engine

    admin = create_engine(pg_url("postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(hashtext(:n))"), {"n": name})
        try:
            exists = conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).first()
            if not exists:
                create_pg_database(name)
                db = Database(pg_url(name))
                migrate.upgrade(db)
                with db.engine.begin() as run:
                    run.exec_driver_sql(_TABLES)
                db.dispose()
                client = Client(pg_url(name))
                held_back = [
                    {"name": "compete", "payload": n, "queue": QUEUE, "run_at": HELD_BACK} for n in range(JOBS)
                ]
                client.enqueue_many(held_back)
                client.close()
                _start_supervisors(name, records)
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(hashtext(:n))"), {"n": name})
    admin.dispose()


def _start_supervisors(name: str, records: Path) -> None:
    from harness import Supervisor

    records.mkdir(parents=True, exist_ok=True)
    db = Database(pg_url(name))
    for n in range(SUPERVISORS):
        supervisor = Supervisor(
            competitor_url(name), records, records / f"supervisor-{n}.log", "--queue", f"{QUEUE}={SUPERVISOR_WORKERS}"
        )
        with db.engine.begin() as conn:
            conn.execute(text("INSERT INTO competition_supervisor (pid) VALUES (:pid)"), {"pid": supervisor.pid})
    db.dispose()


def _barrier(engine: Any) -> None:
    """Wait until every xdist worker has joined and the supervisors' workers are up, so that
    every competitor claims from the start; a barrier that times out is an error (the
    checking test then names it), never a silent head start."""
    deadline = time.monotonic() + BARRIER_SECONDS
    joined = workers = 0
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            joined = conn.execute(text("SELECT count(*) FROM competition_participant")).scalar_one()
            workers = conn.execute(text("SELECT count(*) FROM jobsup_process WHERE kind = 'worker'")).scalar_one()
        if joined >= worker_count() and workers >= SUPERVISORS * SUPERVISOR_WORKERS:
            # Everyone is up: make the jobs due for all competitors at once.
            with engine.begin() as conn:
                conn.execute(text(RELEASE), {"queue": QUEUE})
            return
        time.sleep(0.02)
    raise TimeoutError(
        f"the competition's barrier timed out after {BARRIER_SECONDS:g}s: {joined} of {worker_count()} "
        f"xdist workers joined, {workers} of {SUPERVISORS * SUPERVISOR_WORKERS} supervisor workers up"
    )


def _record_error(name: str, error: str) -> None:
    try:
        client = Client(pg_url(name))
        with client.database.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO competition_participant (worker, error, finished) VALUES (:w, :e, true) "
                    "ON CONFLICT (worker) DO UPDATE SET error = :e, finished = true"
                ),
                {"w": worker_name(), "e": error},
            )
        client.close()
    except Exception:
        pass  # the checking test then times out waiting for this worker, naming it
