"""Real databases for the tests: SQLite files, PostgreSQL on 127.0.0.1:5432, and MariaDB on
127.0.0.1:3306.

PostgreSQL and MariaDB tests never skip silently: when the server is unreachable they fail
with a message, unless JOBSUP_TEST_POSTGRES=skip (JOBSUP_TEST_MARIADB=skip) says to leave
them out (then they are reported as skipped, with that reason). Each test session (each
xdist worker) gets its own fresh database on each server; each test starts from empty tables.

The `url` fixture runs a test on every dialect: SQLite and PostgreSQL everywhere, MariaDB in
the modules of `MARIADB_SUITE` (the store's conformance tests and a few process tests; the
other tests exercise no SQL of their own, and running them all three times would cost
minutes of suite time for nothing the conformance tests do not already cover).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

import jobsup
from jobsup.store import migrate
from jobsup.store.database import Database
from jobsup.store.schema import metadata

import broker
import competing
import harness
import jobapps  # noqa: F401 - registers the job types the tests enqueue
from harness import Supervisor
from helpers import (
    MARIADB_ADMIN_URL,
    PG_ADMIN_URL,
    create_mariadb_database,
    create_pg_database,
    drop_mariadb_database,
    drop_pg_database,
    mariadb_database_url,
    mariadb_error,
    pg_error,
    pg_url,
)

# The test modules (or single tests, as module::test) whose `url` tests also run on MariaDB
# (see the module docstring).
MARIADB_SUITE = {
    "test_store",
    "test_hardening_store",
    "test_claim_concurrency",
    "test_migrations",
    "test_explain",
    "test_mariadb",
    "test_workflows",
    "test_cancel_running",
    "test_concurrency_keys",
    "test_rate_limits",
    "test_breakers",
    "test_pauses",
    "test_recurring",
    "test_definitions",
    "test_calendars",
    "test_odd_rows",
    "test_bulk_enqueue",
    "test_concurrency",
    "test_job_logs",
    "test_audit",
    "test_sla",
    "test_events_announced",
    "test_retention_of_types",
    # Real `jobsup start` supervisors: a few, each of them seconds.
    "test_processes::test_kill_9_a_worker_and_its_job_comes_back_at_once",
    "test_processes::test_sigterm_lets_short_jobs_finish_and_releases_long_ones",
    "test_processes::test_a_brief_outage_during_settle_loses_neither_success_nor_failure",
    "test_processes::test_lease_loss_stops_the_job_before_another_instance_runs_it",
}


def pytest_configure(config: pytest.Config) -> None:
    # The processes the tests start (`jobsup` commands, supervisors, the xdist workers, which
    # start after this) cache their compiled modules, as Python does by default. Where the
    # environment says not to (PYTHONDONTWRITEBYTECODE, set on some CI machines), each of the
    # suite's ~800 `jobsup` processes compiled ~90 modules from source again: a sixth of its
    # start-up CPU, on a suite that is CPU-bound.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    competing.on_configure(config)


# A test marked `many_connections` (several supervisors on one server at once) takes this
# lock for its whole run, fixtures included, so at most one such test at a time holds its
# connections. Under `pytest -n 4` such tests side by side, beside the rest of the suite, can
# reach PostgreSQL's max_connections (100): workers that cannot renew their leases lose them
# (a job then runs twice, as at-least-once allows, which these tests rightly refuse in a
# healthy run) and other tests fail to connect. With a script holding 62 connections, the
# four-supervisor test beside two other files of supervisors did both.
MANY_CONNECTIONS_LOCK = Path(tempfile.gettempdir()) / "jobsup-tests-many-connections.lock"


@pytest.fixture(autouse=True)
def _many_connections_one_at_a_time(request: pytest.FixtureRequest) -> Iterator[None]:
    """Autouse, so it is set up before the test's other function fixtures (its supervisors)
    and torn down after them."""
    callspec = getattr(request.node, "callspec", None)
    on_sqlite = callspec is not None and callspec.params.get("url") == "sqlite"
    if request.node.get_closest_marker("many_connections") is None or on_sqlite:
        yield
        return
    try:  # read-only, and made only if missing: another user's file in /tmp still serves
        held = os.open(MANY_CONNECTIONS_LOCK, os.O_RDONLY)
    except FileNotFoundError:
        held = os.open(MANY_CONNECTIONS_LOCK, os.O_RDONLY | os.O_CREAT, 0o666)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # blocks until the test holding it has ended
        yield
    finally:
        os.close(held)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the MariaDB runs of `url` tests outside `MARIADB_SUITE`."""
    kept, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_mariadb = callspec is not None and callspec.params.get("url") == "mariadb"
        module = item.module.__name__.rpartition(".")[2] if item.module is not None else ""
        outside = not {module, f"{module}::{getattr(item, 'originalname', item.name)}"} & MARIADB_SUITE
        (dropped if on_mariadb and outside else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_collection_finish(session: pytest.Session) -> None:
    # Only a run that checks the competition pays for it (every xdist worker collects the same
    # items, so all of them agree on whether to take part).
    modules = {getattr(getattr(item, "module", None), "__name__", "") for item in session.items}
    if any(module.endswith("test_competing_instances") for module in modules):
        competing.on_session_start(session.config)


def pytest_sessionfinish(session: pytest.Session) -> None:
    competing.on_session_finish(session.config)
    harness.stop_all()


def _server(name: str, admin_url: str, error_of: Callable[[], str | None], variable: str) -> str:
    """A server's admin URL; a test that needs it fails (not skips) when it is down, unless
    `variable` is ``skip``."""
    if os.environ.get(variable) == "skip":
        pytest.skip(f"{name} tests switched off by {variable}=skip")
    error = error_of()
    if error:
        pytest.fail(
            f"{name} is not reachable at {admin_url} ({error}); start it, "
            f"or set {variable}=skip to leave the {name} tests out",
            pytrace=False,
        )
    return admin_url


def _fresh_database(
    create: Callable[[str], None], url: Callable[[str], str], drop: Callable[[str], None]
) -> Iterator[str]:
    """A fresh, migrated database for this session (this xdist worker), dropped after it."""
    name = f"jobsup_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    create(name)
    db = Database(url(name))
    migrate.upgrade(db)
    db.dispose()
    yield url(name)
    drop(name)


@pytest.fixture(scope="session")
def pg_server() -> str:
    return _server("PostgreSQL", PG_ADMIN_URL, pg_error, "JOBSUP_TEST_POSTGRES")


@pytest.fixture(scope="session")
def pg_session_url(pg_server: str) -> Iterator[str]:
    yield from _fresh_database(create_pg_database, pg_url, drop_pg_database)


@pytest.fixture(scope="session")
def mariadb_server() -> str:
    return _server("MariaDB", MARIADB_ADMIN_URL, mariadb_error, "JOBSUP_TEST_MARIADB")


@pytest.fixture(scope="session")
def mariadb_session_url(mariadb_server: str) -> Iterator[str]:
    yield from _fresh_database(create_mariadb_database, mariadb_database_url, drop_mariadb_database)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file that each test copies (cheaper than migrating every time)."""
    path = tmp_path_factory.mktemp("template") / "jobsup.db"
    db = Database(f"sqlite:///{path}")
    migrate.upgrade(db)
    db.dispose()
    return path


def _truncate(url: str) -> None:
    db = Database(url)
    names = ", ".join(table.name for table in metadata.sorted_tables)
    with db.transaction() as conn:
        conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY"))
    db.dispose()


def _empty(url: str) -> None:
    """MariaDB's TRUNCATE recreates each table (slow, and one at a time): DELETE instead."""
    db = Database(url)
    with db.transaction() as conn:
        for table in metadata.sorted_tables:
            conn.execute(table.delete())
    db.dispose()


@pytest.fixture(scope="session")
def rabbitmq() -> None:
    """The real RabbitMQ; fails (not skips) when unreachable, unless JOBSUP_TEST_RABBITMQ=skip."""
    broker.require_broker()


@pytest.fixture
def exchange(rabbitmq: None) -> Iterator[broker.Exchange]:
    """An exchange and queue of this test's own on the real broker."""
    made = broker.Exchange()
    yield made
    made.close()


@pytest.fixture
def events_on() -> Iterator[None]:
    """This process's transitions write the outbox for the test, and stop after it."""
    from jobsup.events import hooks, publishing

    publishing.enable()
    yield
    hooks.clear()


@pytest.fixture
def seen() -> Iterator[list[tuple[str, dict[str, object]]]]:
    """Every jobsup event (`jobsup.observe.events`) this process emits during the test."""
    from jobsup.events import hooks
    from jobsup.observe import events as observed

    found: list[tuple[str, dict[str, object]]] = []
    subscriber = observed.subscribe(lambda kind, fields: found.append((kind, dict(fields))))
    yield found
    observed.unsubscribe(subscriber)
    hooks.clear()


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    path = tmp_path / "jobsup.db"
    shutil.copy(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def postgres_url(pg_session_url: str) -> str:
    _truncate(pg_session_url)
    return pg_session_url


@pytest.fixture
def mariadb_url(mariadb_session_url: str) -> str:
    _empty(mariadb_session_url)
    return mariadb_session_url


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgresql", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def url(request: pytest.FixtureRequest) -> str:
    """An empty, migrated jobsup database of each kind."""
    return str(request.getfixturevalue(f"{request.param.replace('postgresql', 'postgres')}_url"))


@pytest.fixture
def record(tmp_path: Path) -> Path:
    """The folder the test jobs record their runs in (see jobapps.py)."""
    folder = tmp_path / "record"
    folder.mkdir()
    return folder


@pytest.fixture
def start(url: str, record: Path, tmp_path: Path) -> Iterator[object]:
    """Start real `jobsup start` supervisors on `url` (stopped after the test)."""
    started: list[Supervisor] = []

    def start(*args: str, **options: str) -> Supervisor:
        supervisor = Supervisor(url, record, tmp_path / f"supervisor-{len(started)}.log", *args, **options)
        started.append(supervisor)
        return supervisor

    yield start
    for supervisor in started:
        supervisor.stop()


@pytest.fixture
def client(url: str) -> Iterator[jobsup.Client]:
    """A client on `url`, closed after the test."""
    c = jobsup.Client(url)
    yield c
    c.close()
