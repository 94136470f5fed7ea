"""Migrations: exactly the metadata's schema, safe when many processes upgrade at once,
printable offline for every dialect, and a clear error when the schema is missing."""

from __future__ import annotations

import asyncio
import io
import multiprocessing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import event, inspect, text

import jobsup
from jobsup.store import migrate
from jobsup.store.database import Database
from jobsup.store.dialects import mariadb_schema
from jobsup.store.dialects.mariadb import migration_lock_name
from jobsup.store.schema import SCHEMA_REVISION, VERSION_TABLE, metadata

from helpers import (
    create_mariadb_database,
    create_pg_database,
    drop_mariadb_database,
    drop_pg_database,
    mariadb_database_url,
    pg_url,
)


def test_schema_revision_constant_is_the_migrations_head() -> None:
    assert migrate.head_revision() == SCHEMA_REVISION


def _drift(db: Database) -> list[object]:
    # MariaDB has no partial indexes: its migrations make the model's MariaDB shape.
    model = mariadb_schema.model() if db.dialect.name == "mariadb" else metadata
    with db.engine.connect() as conn:
        context = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "include_name": lambda name, kind, parent: name != VERSION_TABLE,
            },
        )
        return list(compare_metadata(context, model))


def test_migrations_produce_exactly_the_metadata_schema(url: str) -> None:
    db = Database(url)
    assert _drift(db) == []
    indexes = {index["name"] for index in inspect(db.engine).get_indexes("jobsup_job")}
    assert {"jobsup_job_claim", "jobsup_job_lease", "jobsup_job_unique_key"} <= indexes


def _upgrade(url: str) -> None:
    migrate.upgrade(Database(url))


def _upgrade_concurrently(url: str, processes: int = 4) -> None:
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_upgrade, args=(url,)) for _ in range(processes)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [worker.exitcode for worker in workers] == [0] * processes


def test_concurrent_upgrades_of_a_fresh_sqlite_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    _upgrade_concurrently(url)
    db = Database(url)
    assert _drift(db) == []
    jobsup.Client(url).enqueue("works")


@pytest.mark.postgres
def test_concurrent_upgrades_of_a_fresh_postgres_database(pg_server: str, tmp_path: Path) -> None:
    name = f"jobsup_fresh_{tmp_path.name[-20:].replace('-', '_')}".lower()
    create_pg_database(name)
    try:
        _upgrade_concurrently(pg_url(name))
        db = Database(pg_url(name))
        assert _drift(db) == []
        with db.read() as conn:
            assert conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all() == [SCHEMA_REVISION]
        db.dispose()
    finally:
        drop_pg_database(name)


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql", "mssql"])
def test_offline_sql_has_the_filtered_claim_index(dialect: str) -> None:
    out = io.StringIO()
    migrate.upgrade_sql(dialect, out)
    ddl = out.getvalue()
    assert "CREATE TABLE jobsup_job " in ddl
    assert (
        "CREATE INDEX jobsup_job_claim ON jobsup_job (queue, priority DESC, run_at, id) WHERE status = 'pending'" in ddl
    )
    assert "CREATE UNIQUE INDEX jobsup_job_unique_key" in ddl
    assert f"INSERT INTO {VERSION_TABLE} (version_num)" in ddl
    assert f"version_num='{SCHEMA_REVISION}'" in ddl  # the last revision's step


@pytest.mark.mariadb
def test_concurrent_upgrades_of_a_fresh_mariadb_database(mariadb_server: str, tmp_path: Path) -> None:
    name = f"jobsup_fresh_{tmp_path.name[-20:].replace('-', '_')}".lower()
    create_mariadb_database(name)
    try:
        _upgrade_concurrently(mariadb_database_url(name))
        db = Database(mariadb_database_url(name))
        assert _drift(db) == []
        with db.read() as conn:
            assert conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all() == [SCHEMA_REVISION]
            # The migration lock went with the connection back to the pool: it is free. (Its
            # own database's: another test may be upgrading another database on the server.)
            lock = migration_lock_name(name)
            assert conn.execute(text("SELECT IS_FREE_LOCK(:lock)"), {"lock": lock}).scalar() == 1
        db.dispose()
    finally:
        drop_mariadb_database(name)


@pytest.mark.parametrize("dialect", ["mariadb", "mysql"])
def test_offline_mariadb_sql_has_the_claim_index_and_the_live_key_column(dialect: str) -> None:
    out = io.StringIO()
    migrate.upgrade_sql(dialect, out)
    ddl = out.getvalue()
    assert "run_at DATETIME(6) NOT NULL" in ddl
    assert "payload LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL" in ddl
    assert "CREATE INDEX jobsup_job_claim ON jobsup_job (status, queue, priority DESC, run_at, id)" in ddl
    assert "GENERATED ALWAYS AS (CASE WHEN status IN ('pending', 'running') THEN unique_key END) STORED" in ddl
    assert "CREATE UNIQUE INDEX jobsup_job_unique_key ON jobsup_job (live_unique_key)" in ddl
    assert not [line for line in ddl.splitlines() if line.startswith("CREATE") and " WHERE " in line]
    assert f"version_num='{SCHEMA_REVISION}'" in ddl


def test_an_upgrade_of_a_schema_newer_than_this_jobsup_says_to_upgrade_jobsup(url: str) -> None:
    """A rolled-back deploy: the version table names a revision this code does not know. The
    upgrade's read of that table finds it is not at head and leaves it to Alembic, which
    refuses it; the error names the fix."""
    db = Database(url)
    with db.transaction() as conn:
        conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = '9999'"))
    try:
        with pytest.raises(jobsup.SchemaOutdated, match=r"'9999'.*upgrade jobsup"):
            migrate.upgrade(db)
    finally:
        with db.transaction() as conn:
            conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = :head"), {"head": SCHEMA_REVISION})
        db.dispose()


def test_missing_schema_names_the_upgrade_command(tmp_path: Path) -> None:
    client = jobsup.Client(f"sqlite:///{tmp_path / 'empty.db'}")
    with pytest.raises(jobsup.SchemaOutdated, match="run `jobsup db upgrade`"):
        client.enqueue("a")
    assert not inspect(client.database.engine).has_table("jobsup_job")  # nothing was written


def test_every_part_of_the_client_checks_the_schema_once_when_it_first_uses_the_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'later.db'}"
    client = jobsup.Client(url)
    first_uses = [
        lambda: client.list_jobs(),
        lambda: client.workflows.list(),
        lambda: client.batches.get(1),
        lambda: client.schedules.list(),
        lambda: client.queues.pause("mail", allow_unknown=True),
        lambda: client.dead_letters.purge(),
        lambda: client.audit.list(),
    ]
    for use in first_uses:  # refused before anything is written, and asked again at the next use
        with pytest.raises(jobsup.SchemaOutdated, match="run `jobsup db upgrade`"):
            use()
    migrate.upgrade(Database(url))
    checks: list[str] = []
    event.listen(
        client.database.single,
        "before_cursor_execute",
        lambda conn, cursor, statement, *rest: checks.append(statement) if VERSION_TABLE in statement else None,
    )
    for use in first_uses:
        use()
    assert len(checks) == 1, "the schema is checked once, not at each call"
    client.close()


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda c: c.get("1"), jobsup.BadInput),
        (lambda c: c.list_jobs(limit=0), jobsup.BadInput),
        (lambda c: c.workflows.get(True), jobsup.BadInput),
        (lambda c: c.batches.list(limit=0), jobsup.BadInput),
        (lambda c: c.events.retry([0]), jobsup.BadInput),
        (lambda c: c.events.parked(limit=0), jobsup.BadInput),
        (lambda c: c.breakers.reset("x", actor=""), jobsup.BadInput),
        (lambda c: c.audit.list(limit=0), jobsup.BadInput),
        (lambda c: c.enqueue("a", {"x": object()}, allow_unknown=True), jobsup.InvalidPayload),
    ],
    ids=str.split(
        "get list_jobs workflows.get batches.list events.retry events.parked breakers.reset audit.list enqueue"
    ),
)
def test_bad_input_is_refused_before_the_schema_is_checked(tmp_path: Path, call: Any, error: type) -> None:
    """Bad input is the caller's to fix whatever the database's state: it is named first,
    before the first call through the store checks the schema."""
    client = jobsup.Client(f"sqlite:///{tmp_path / 'empty.db'}")
    with pytest.raises(error) as raised:
        call(client)
    assert not isinstance(raised.value, jobsup.SchemaOutdated)


def test_an_action_refused_for_the_schema_records_no_failure(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The schema is checked before an audited action starts, so its failure handler (which
    records what a half-run purge did) never runs for it."""
    client = jobsup.Client(f"sqlite:///{tmp_path / 'empty.db'}")
    for action in (client.dead_letters.purge, client.dead_letters.retry_all):
        with pytest.raises(jobsup.SchemaOutdated) as raised:
            action()
        assert raised.value.__context__ is None
    assert "audit.failed" not in caplog.text


def test_the_dashboard_checks_the_schema_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's first call through its store checks the schema, a round trip (up to a
    connect timeout while the database is down): never on the event loop, which every
    request shares."""
    from starlette.testclient import TestClient

    from jobsup.store.store import Store
    from jobsup.web import asgi_app

    url = f"sqlite:///{tmp_path / 'web.db'}"
    migrate.upgrade(Database(url))
    where: list[bool] = []
    check = Store.schema_check

    def spy(store: Store) -> None:
        try:
            asyncio.get_running_loop()
            where.append(True)
        except RuntimeError:
            where.append(False)
        check(store)

    monkeypatch.setattr(Store, "schema_check", spy)
    app = asgi_app(url, secret="s" * 32)
    with TestClient(app, base_url="http://127.0.0.1") as http:
        assert http.get(f"/?token={app.one_time_token}", follow_redirects=False).status_code == 303  # a session begins
        assert http.get("/").status_code == 200  # its cookie is checked against the server's sessions
    assert where and not any(where), "the schema was checked on the event loop"


@pytest.mark.postgres
def test_missing_schema_on_postgres_names_the_upgrade_command(pg_server: str) -> None:
    name = "jobsup_no_schema"
    create_pg_database(name)
    try:
        client = jobsup.Client(pg_url(name))
        with pytest.raises(jobsup.SchemaOutdated, match="run `jobsup db upgrade`"):
            client.list_jobs()
        client.close()
    finally:
        drop_pg_database(name)


@pytest.mark.postgres
def test_postgres_job_tables_vacuum_early_and_attempts_fill_their_pages(postgres_url: str) -> None:
    db = Database(postgres_url)
    with db.read() as conn:
        options = dict(
            conn.execute(text("SELECT relname, reloptions FROM pg_class WHERE relname LIKE 'jobsup_job%'")).all()
        )
    db.dispose()
    assert "autovacuum_vacuum_scale_factor=0.02" in options["jobsup_job"]
    assert "autovacuum_vacuum_scale_factor=0.02" in options["jobsup_job_attempt"]
    # An attempt's row is written once, when it ends (0018): no room is kept for an update (0017's).
    assert not [option for option in options["jobsup_job_attempt"] if option.startswith("fillfactor")]


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgresql", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with no schema yet, on each server."""
    name = f"jobsup_empty_{tmp_path.name[-20:].replace('-', '_')}".lower()
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobsup.db'}"
    elif request.param == "postgresql":
        request.getfixturevalue("pg_server")
        create_pg_database(name)
        yield pg_url(name)
        drop_pg_database(name)
    else:
        request.getfixturevalue("mariadb_server")
        create_mariadb_database(name)
        yield mariadb_database_url(name)
        drop_mariadb_database(name)


def _migrate(db: Database, revision: str, *, down: bool = False) -> None:
    from alembic import command

    config = migrate._config()
    with db.engine.begin() as conn:
        config.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(config, revision)


def test_the_upgrade_to_0018_moves_each_running_attempt_onto_its_job_and_back(empty_url: str) -> None:
    """Revision 0018: a running job's open attempt row becomes its job row's start and
    progress (an attempt's row is written when it ends); the downgrade opens it again."""
    db = Database(empty_url)
    _migrate(db, "0017")
    at, later = "2026-12-06 10:00:00", "2026-12-06 10:05:00"
    with db.engine.begin() as conn:
        for job_id, status, attempts, owner in ((1, "running", 2, "w1"), (2, "succeeded", 1, None)):
            conn.execute(
                text(
                    "INSERT INTO jobsup_job (id, name, queue, priority, payload, status, run_at, attempts,"
                    " max_attempts, lease_owner, created_at, updated_at) VALUES (:id, 'a', 'default', 0, '{}',"
                    " :status, :at, :attempts, 3, :owner, :at, :at)"
                ),
                {
                    "id": job_id,
                    "status": status,
                    "at": at,
                    "attempts": attempts,
                    "owner": owner,
                },
            )
        attempt = (
            "INSERT INTO jobsup_job_attempt (job_id, attempt, owner, started_at, finished_at, outcome, progress)"
            " VALUES (:job, :attempt, 'w1', :started, :finished, :outcome, :progress)"
        )
        for row in (
            {"job": 1, "attempt": 1, "started": at, "finished": at, "outcome": "failed", "progress": "0.2"},
            {"job": 1, "attempt": 2, "started": later, "finished": None, "outcome": None, "progress": "0.5"},
            {"job": 2, "attempt": 1, "started": at, "finished": at, "outcome": "succeeded", "progress": None},
        ):
            conn.execute(text(attempt), row)
    _migrate(db, "0018")
    client = jobsup.Client(empty_url)
    running = client.get(1)
    assert running is not None and running.progress == 0.5
    assert [(a.attempt, a.outcome, a.progress) for a in running.history] == [(1, "failed", 0.2), (2, None, 0.5)]
    assert running.history[1].started_at is not None and running.history[1].started_at.minute == 5
    finished = client.get(2)
    assert finished is not None and [(a.attempt, a.outcome) for a in finished.history] == [(1, "succeeded")]
    with db.read() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM jobsup_job_attempt WHERE finished_at IS NULL")).scalar_one() == 0
    client.close()
    _migrate(db, "0017", down=True)
    with db.read() as conn:
        reopened = conn.execute(
            text("SELECT job_id, attempt, owner, progress FROM jobsup_job_attempt WHERE finished_at IS NULL")
        ).all()
    assert [tuple(row) for row in reopened] == [(1, 2, "w1", "0.5")]
    db.dispose()
