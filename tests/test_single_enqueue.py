"""A single enqueue on PostgreSQL, the call applications make most: its insert runs as the
driver's own text (`DriverText`) on a pooled driver connection, without SQLAlchemy's
execution (`Database.driver_value`), unless something watches the database's statements.
It writes what the bulk insert writes, refuses what SQLAlchemy refused, and fails as any
other statement does: errors translated, a lost connection invalidating the pool."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy import select as sql_select
from sqlalchemy.exc import StatementError

import jobsup
from jobsup.errors import ConstraintViolation
from jobsup.store import faults
from jobsup.store.rows import NewJob
from jobsup.store.schema import job

pytestmark = pytest.mark.postgres


def _connections_made(client: jobsup.Client) -> list[object]:
    """Every SQLAlchemy `Connection` the client's single-statement engine makes from now."""
    made: list[object] = []
    event.listen(client.database.single, "engine_connect", made.append)
    return made


def _executed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement psycopg's cursors run from now, in this process (they still run)."""
    statements: list[str] = []
    real = psycopg.Cursor.execute

    def execute(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        statements.append(str(query))
        return real(cursor, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    return statements


def test_a_plain_single_enqueue_is_one_statement_without_sqlalchemys_execution(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = jobsup.Client(postgres_url)
    client.enqueue("a")  # the schema check and the first connection
    made, statements = _connections_made(client), _executed(monkeypatch)
    job_id = client.enqueue("a", {"x": 1})
    assert made == []  # no SQLAlchemy Connection: the pooled driver connection directly
    assert len(statements) == 1 and "pg_notify" in statements[0] and "INSERT" in statements[0]
    stored = client.get(job_id)
    assert stored is not None and stored.status == "pending" and stored.payload == {"x": 1}
    client.close()


def test_a_watched_database_runs_the_single_enqueue_through_sqlalchemy(postgres_url: str) -> None:
    # Tracing (or `echo`) hooks the engine's statement events: they must see the enqueue.
    client = jobsup.Client(postgres_url)
    client.enqueue("a")
    seen: list[str] = []
    event.listen(client.database.single, "before_cursor_execute", lambda *args: seen.append(args[2]))
    assert not client.database.unwatched()
    client.enqueue("a")
    assert len(seen) == 1 and "pg_notify" in seen[0]
    client.close()


def test_fault_injection_reaches_the_single_enqueue(postgres_url: str) -> None:
    client = jobsup.Client(postgres_url)
    client.enqueue("a")  # the schema check, before the fault window opens
    faults.install(client.database.single, "any", "any:enqueue@0s+60s")
    with pytest.raises(jobsup.DatabaseUnavailable, match="injected fault"):
        client.enqueue("a")
    client.close()
    assert len(jobsup.Client(postgres_url).list_jobs()) == 1


def test_a_lost_connection_fails_one_enqueue_and_the_pool_replaces_the_rest(postgres_url: str) -> None:
    client = jobsup.Client(postgres_url)
    client.enqueue("a")
    engine = client.database.single
    with engine.connect() as first, engine.connect() as second:  # two pooled connections
        pids = [c.connection.driver_connection.info.backend_pid for c in (first, second)]  # type: ignore[union-attr]
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        for pid in pids:
            assert conn.execute(text("SELECT pg_terminate_backend(:pid, 5000)"), {"pid": pid}).scalar()
    admin.dispose()
    with pytest.raises(jobsup.DatabaseUnavailable):
        client.enqueue("a")
    # The other pooled connection was opened before the lost one: it is replaced at checkout,
    # as SQLAlchemy's execution would have it, rather than failing the next enqueue too.
    assert client.enqueue("a") > 0
    assert len(client.list_jobs()) == 2
    client.close()


def test_a_refused_single_statement_becomes_jobsups_error(postgres_url: str) -> None:
    client = jobsup.Client(postgres_url)
    client.enqueue("a")
    with pytest.raises(ConstraintViolation):  # name is NOT NULL
        client.database.driver_value("enqueue", "INSERT INTO jobsup_job (name) VALUES (NULL) RETURNING id", {})
    with pytest.raises(jobsup.DatabaseError, match="division by zero"):
        client.database.driver_value("enqueue", "SELECT 1 / 0", {})
    assert client.enqueue("a") > 0  # the pooled connection is fine afterwards
    client.close()


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "concurrency-key"])
def test_a_single_enqueue_run_as_driver_text_writes_what_the_bulk_insert_writes(postgres_url: str, keyed: bool) -> None:
    # A plain job takes `driver_value`; one with a concurrency key takes a transaction, its
    # insert still as `DriverText`. Each column, typed ones in another zone included, must
    # come out as the bulk insert (arrays through SQLAlchemy's types) writes it.
    client = jobsup.Client(postgres_url)
    zone = timezone(timedelta(hours=-5))
    slot = datetime(2026, 12, 6, 1, 2, 3, 456789, tzinfo=zone)
    fields = {
        "name": "a", "queue": "q", "payload": '{"x":1}', "priority": 3, "run_at": slot, "max_attempts": 7,
        "timeout": 12.5, "unique_key": None, "actor": "me", "scheduled_slot": slot,
        "concurrency_key": "k" if keyed else None, "concurrency_limit": 2 if keyed else None,
        "sla_start_by": slot + timedelta(minutes=1), "sla_finish_by": slot + timedelta(minutes=2),
        "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01",
    }  # fmt: skip
    try:
        one = client.store.transitions.enqueue([NewJob(**fields)])
        many = client.store.transitions.enqueue([NewJob(**fields)] * 2)
        columns = [c for c in job.c if c.name not in ("id", "created_at", "updated_at")]
        with client.database.read() as conn:
            rows = {r.id: r for r in conn.execute(sql_select(job.c.id, *columns)).all()}
    finally:
        client.close()
    assert rows[one[0]][1:] == rows[many[0]][1:]
    assert rows[one[0]].run_at == slot and rows[one[0]].scheduled_slot == slot


def test_a_single_enqueue_of_a_naive_datetime_is_refused_not_shifted(postgres_url: str) -> None:
    client = jobsup.Client(postgres_url)
    naive = NewJob("a", "default", "{}", 0, datetime(2026, 12, 6, 12, 0), 5, None)
    try:
        with pytest.raises(StatementError, match="aware datetimes only"):  # as SQLAlchemy's execution said it
            client.store.transitions.enqueue([naive])
        with client.database.read() as conn:
            assert conn.execute(sql_select(job.c.id)).first() is None
    finally:
        client.close()
