"""Competing instances: two `jobsup start` supervisors and the xdist workers of one test
run process one set of jobs on one database: one competition on PostgreSQL and one on
MariaDB, side by side (each xdist worker competes in both at once, from two threads).

Once a run's tests are collected, if they include test_competing_instances.py, every xdist
worker (or the lone process without xdist) joins a database
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
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from jobsup.client import Client
from jobsup.store import migrate
from jobsup.store.database import Database
from jobsup.store.rows import SUCCEEDED, Outcome

from helpers import (
    alive,
    create_mariadb_database,
    create_pg_database,
    drop_mariadb_database,
    drop_pg_database,
    mariadb_database_url,
    mariadb_error,
    pg_error,
    pg_url,
)

JOBS = 2000
QUEUE = "competition"
BARRIER_SECONDS = 60.0

_TABLES = (
    "CREATE TABLE IF NOT EXISTS competition_participant ("
    " worker varchar(100) PRIMARY KEY, claimed int, error text, finished boolean NOT NULL DEFAULT false)",
    "CREATE TABLE IF NOT EXISTS competition_claim (job_id bigint NOT NULL, worker varchar(100) NOT NULL)",
    "CREATE TABLE IF NOT EXISTS competition_supervisor (pid int PRIMARY KEY, started bigint NOT NULL)",
)
SUPERVISORS = 2
# The jobs are seeded not yet due, and made due once every competitor is up, so that none
# gets a head start.
HELD_BACK = datetime(2100, 1, 1, tzinfo=UTC)
RELEASE = "UPDATE jobsup_job SET run_at = {now} WHERE queue = :queue AND status = 'pending' AND run_at > {now}"
SUPERVISOR_WORKERS = 2  # each supervisor runs this many workers on the competition queue
_MIGRATING = threading.Lock()


@dataclass(frozen=True)
class Backend:
    """One server the competition runs on, and the few statements that differ there."""

    name: str
    prefix: str  # of the run's database name
    url: Callable[[str], str]
    error: Callable[[], str | None]
    create: Callable[[str], None]
    drop: Callable[[str], None]
    admin_database: str
    lock: str  # takes and releases a named lock: :n
    unlock: str
    exists: str  # a database named :n
    now: str  # the database clock in jobsup's stored form (UTC)
    record_error: str  # upsert of (:w, :e) into competition_participant
    skip_variable: str

    def available(self) -> bool:
        return os.environ.get(self.skip_variable) != "skip" and not self.error()


def competitor_url(backend: Backend, name: str) -> str:
    """The URL the competitors (the xdist workers' claims, the supervisors) use: the server's,
    or on PostgreSQL a pooler's port in front of it (JOBSUP_TEST_COMPETING_PORT; see
    test_pgbouncer.py). Setting up and checking always go to the server itself."""
    port = os.environ.get("JOBSUP_TEST_COMPETING_PORT")
    url = backend.url(name)
    return url.replace(":5432/", f":{port}/") if port and backend.name == "postgresql" else url


BACKENDS = {
    "postgresql": Backend(
        "postgresql",
        "jobsup_run_",
        pg_url,
        pg_error,
        create_pg_database,
        drop_pg_database,
        "postgres",
        "SELECT pg_advisory_lock(hashtext(:n))",
        "SELECT pg_advisory_unlock(hashtext(:n))",
        "SELECT 1 FROM pg_database WHERE datname = :n",
        "now()",
        "INSERT INTO competition_participant (worker, error, finished) VALUES (:w, :e, true) "
        "ON CONFLICT (worker) DO UPDATE SET error = :e, finished = true",
        "JOBSUP_TEST_POSTGRES",
    ),
    "mariadb": Backend(
        "mariadb",
        "jobsup_mrun_",
        mariadb_database_url,
        mariadb_error,
        create_mariadb_database,
        drop_mariadb_database,
        "mysql",
        "SELECT GET_LOCK(:n, 120)",
        "SELECT RELEASE_LOCK(:n)",
        "SELECT 1 FROM information_schema.schemata WHERE schema_name = :n",
        "UTC_TIMESTAMP(6)",
        "INSERT INTO competition_participant (worker, error, finished) VALUES (:w, :e, true) "
        "ON DUPLICATE KEY UPDATE error = :e, finished = true",
        "JOBSUP_TEST_MARIADB",
    ),
}


def database_name(run_id: str, backend: Backend = BACKENDS["postgresql"]) -> str:
    return f"{backend.prefix}{run_id[:16]}"


def record_dir(run_id: str, backend: Backend = BACKENDS["postgresql"]) -> Path:
    return Path(tempfile.gettempdir()) / database_name(run_id, backend)


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
    if _is_controller(config):
        return
    competitions = [
        threading.Thread(target=_compete, args=(backend, config), name=f"competition-{backend.name}")
        for backend in BACKENDS.values()
        if backend.available()
    ]
    for competition in competitions:
        competition.start()
    for competition in competitions:
        competition.join()


def _compete(backend: Backend, config: pytest.Config) -> None:
    name = database_name(run_id(config), backend)
    try:
        _participate(backend, name, record_dir(run_id(config), backend))
    except Exception as exc:  # recorded for the test to report; a hook must not crash the worker
        _record_error(backend, name, f"{type(exc).__name__}: {exc}")


def on_session_finish(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    for backend in BACKENDS.values():
        if not backend.error():
            name = database_name(run_id(config), backend)
            stop_supervisors(name, backend)
            backend.drop(name)
            shutil.rmtree(record_dir(run_id(config), backend), ignore_errors=True)


def supervisors(name: str, backend: Backend = BACKENDS["postgresql"]) -> list[tuple[int, int]]:
    """The run's supervisors, as (pid, start time) pairs."""
    from sqlalchemy import create_engine

    engine = create_engine(backend.url(name))
    try:
        with engine.connect() as conn:
            return [
                (pid, started) for pid, started in conn.execute(text("SELECT pid, started FROM competition_supervisor"))
            ]
    except Exception:
        return []  # no run database: nothing was started
    finally:
        engine.dispose()


def stop_supervisors(name: str, backend: Backend = BACKENDS["postgresql"]) -> None:
    """SIGTERM the run's supervisors and wait (bounded) until they are gone. Only the processes
    started then: a supervisor stopped earlier may have left its pid to another test's
    process by now."""
    pids = [pid for pid, started in supervisors(name, backend) if start_time(pid) == started]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def start_time(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot), which tells it from a later process
    given the same pid; None once it is gone. Not its command line: a supervisor's title
    (setproctitle) overwrites it, so the run's database name is no longer in it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])  # field 22, after the parenthesised name


def _participate(backend: Backend, name: str, records: Path) -> None:
    _join(backend, name, records)
    client = Client(competitor_url(backend, name))
    engine = client.database.engine
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO competition_participant (worker) VALUES (:w)"), {"w": worker_name()})
    _barrier(backend, engine)
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


def _join(backend: Backend, name: str, records: Path) -> None:
    """Create, migrate and seed the run's database and start the supervisors, once,
    whichever worker comes first."""
    from sqlalchemy import create_engine

    admin = create_engine(backend.url(backend.admin_database), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(backend.lock), {"n": name})
        try:
            exists = conn.execute(text(backend.exists), {"n": name}).first()
            if not exists:
                backend.create(name)
                db = Database(backend.url(name))
                with _MIGRATING:  # Alembic's context is one per process, not per thread
                    migrate.upgrade(db)
                with db.engine.begin() as run:
                    for statement in _TABLES:
                        run.exec_driver_sql(statement)
                db.dispose()
                client = Client(backend.url(name))
                held_back = [
                    {"name": "compete", "payload": n, "queue": QUEUE, "run_at": HELD_BACK} for n in range(JOBS)
                ]
                client.enqueue_many(held_back)
                client.close()
                _start_supervisors(backend, name, records)
        finally:
            conn.execute(text(backend.unlock), {"n": name})
    admin.dispose()


def _start_supervisors(backend: Backend, name: str, records: Path) -> None:
    from harness import Supervisor

    records.mkdir(parents=True, exist_ok=True)
    db = Database(backend.url(name))
    for n in range(SUPERVISORS):
        supervisor = Supervisor(
            competitor_url(backend, name),
            records,
            records / f"supervisor-{n}.log",
            "--queue",
            f"{QUEUE}={SUPERVISOR_WORKERS}",
        )
        with db.engine.begin() as conn:
            conn.execute(  # a child not yet reaped, so its /proc entry is there even if it ended
                text("INSERT INTO competition_supervisor (pid, started) VALUES (:pid, :started)"),
                {"pid": supervisor.pid, "started": start_time(supervisor.pid)},
            )
    db.dispose()


def _barrier(backend: Backend, engine: Any) -> None:
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
                conn.execute(text(RELEASE.format(now=backend.now)), {"queue": QUEUE})
            return
        time.sleep(0.02)
    raise TimeoutError(
        f"the competition's barrier timed out after {BARRIER_SECONDS:g}s: {joined} of {worker_count()} "
        f"xdist workers joined, {workers} of {SUPERVISORS * SUPERVISOR_WORKERS} supervisor workers up"
    )


def _record_error(backend: Backend, name: str, error: str) -> None:
    try:
        client = Client(backend.url(name))
        with client.database.engine.begin() as conn:
            conn.execute(text(backend.record_error), {"w": worker_name(), "e": error})
        client.close()
    except Exception:
        pass  # the checking test then times out waiting for this worker, naming it
