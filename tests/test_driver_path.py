"""PostgreSQL's hottest single statements, a single enqueue (the call applications make most),
a claim (an idle worker's wake-up) and a worker's settle, run as the driver's own text
(`DriverText`) on a pooled driver connection, without SQLAlchemy's execution
(`Database.driver_run`), unless something watches the database's statements. The enqueue
writes what the bulk insert writes and refuses what SQLAlchemy refused; the claim and the
settles return what SQLAlchemy's result did and the settles write what it wrote; all fail as
any other statement does: errors translated, a lost connection invalidating the pool."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, Float, create_engine, event, literal_column, select, text, type_coerce
from sqlalchemy import select as sql_select
from sqlalchemy.exc import StatementError

import jobsup
from jobsup.errors import ConstraintViolation, DatabaseMisconfigured
from jobsup.store import faults
from jobsup.store.claim import claim_params
from jobsup.store.database import Database
from jobsup.store.dialects.drivertext import DriverText
from jobsup.store.rows import LEASE_EXPIRED, SUCCEEDED, Held, Lease, NewJob, Outcome
from jobsup.store.schema import job

from helpers import claim, fail, in_new_york, release

pytestmark = pytest.mark.postgres


@pytest.fixture
def client(postgres_url: str) -> Iterator[jobsup.Client]:
    client = jobsup.Client(postgres_url)
    client.enqueue("a")  # the schema check and the first pooled connection
    try:
        yield client
    finally:
        client.close()


def _connections_made(client: jobsup.Client, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every SQLAlchemy `Connection` the client's single-statement engine makes from now.
    (Not with a listener: any engine event makes SQLAlchemy dispatch, hence watched.)"""
    made: list[object] = []
    engine = client.database.single
    real = engine.connect

    def connect() -> Any:
        made.append(connection := real())
        return connection

    monkeypatch.setattr(engine, "connect", connect)
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


def _backend(client: jobsup.Client) -> int:
    return int(client.database.driver_value("read", "SELECT pg_backend_pid()", {}))


def test_a_plain_single_enqueue_is_one_statement_without_sqlalchemys_execution(
    client: jobsup.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert client.database.may_run_on_driver()
    made, statements = _connections_made(client, monkeypatch), _executed(monkeypatch)
    job_id = client.enqueue("a", {"x": 1})
    assert made == []  # no SQLAlchemy Connection: the pooled driver connection directly
    assert len(statements) == 1 and "pg_notify" in statements[0] and "INSERT" in statements[0]
    stored = client.get(job_id)
    assert stored is not None and stored.status == "pending" and stored.payload == {"x": 1}


def _on_cursor(seen: list[str]) -> Callable[..., None]:
    return lambda conn, cursor, statement, *args: seen.append(statement)


def test_an_engine_listener_gets_the_single_enqueue_through_sqlalchemy(client: jobsup.Client) -> None:
    # Tracing hooks the engine's statement events: they must see the enqueue.
    seen: list[str] = []
    event.listen(client.database.single, "before_cursor_execute", _on_cursor(seen))
    assert not client.database.may_run_on_driver()
    client.enqueue("a")
    assert len(seen) == 1 and "pg_notify" in seen[0]


def test_a_listener_on_every_engine_gets_the_single_enqueue_through_sqlalchemy(
    client: jobsup.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As instrumentation libraries listen: on the Engine class, before or after the client.
    seen: list[str] = []
    listener = _on_cursor(seen)
    # SQLAlchemy never lowers the class's flag again: put it back for the tests after this one.
    monkeypatch.setattr(Engine, "_has_events", Engine._has_events)
    event.listen(Engine, "before_cursor_execute", listener)
    try:
        assert not client.database.may_run_on_driver()
        client.enqueue("a")
    finally:
        event.remove(Engine, "before_cursor_execute", listener)
    assert len(seen) == 1 and "pg_notify" in seen[0]


@pytest.mark.parametrize("watcher", ["handle_error", "do_execute", "echo"])
def test_other_watchers_of_the_statements_turn_the_driver_path_off(client: jobsup.Client, watcher: str) -> None:
    engine = client.database.single
    if watcher == "echo":
        engine.echo = True
    else:
        event.listen(engine, watcher, lambda *args: None)
    assert not client.database.may_run_on_driver()
    assert client.enqueue("a") > 0


def test_fault_injection_reaches_the_single_enqueue(client: jobsup.Client) -> None:
    faults.install(client.database.single, "any", "any:enqueue@0s+60s")
    with pytest.raises(jobsup.DatabaseUnavailable, match="injected fault"):
        client.enqueue("a")
    assert len(client.list_jobs()) == 1  # the fixture's: reads are not in the fault's window


def test_a_lost_connection_fails_one_enqueue_and_the_pool_replaces_the_rest(
    client: jobsup.Client, postgres_url: str
) -> None:
    engine = client.database.single
    with engine.connect() as first, engine.connect() as second:  # two pooled connections
        pids = [c.connection.driver_connection.info.backend_pid for c in (first, second)]  # type: ignore[union-attr]
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            for pid in pids:
                assert conn.execute(text("SELECT pg_terminate_backend(:pid, 5000)"), {"pid": pid}).scalar()
    finally:
        admin.dispose()
    with pytest.raises(jobsup.DatabaseUnavailable):
        client.enqueue("a")
    # The other pooled connection was opened before the lost one: it is replaced at checkout,
    # as SQLAlchemy's execution would have it, rather than failing the next enqueue too.
    assert client.enqueue("a") > 0
    assert len(client.list_jobs()) == 2


def test_a_refused_single_statement_becomes_jobsups_error_and_keeps_its_connection(client: jobsup.Client) -> None:
    backend = _backend(client)
    with pytest.raises(ConstraintViolation):  # name is NOT NULL
        client.database.driver_value("enqueue", "INSERT INTO jobsup_job (name) VALUES (NULL) RETURNING id", {})
    with pytest.raises(jobsup.DatabaseError, match="division by zero"):
        client.database.driver_value("enqueue", "SELECT 1 / 0", {})
    assert _backend(client) == backend  # an error of the statement is not a lost connection


@pytest.mark.parametrize(
    ("where", "refused"),
    [("127.0.0.1:1/test", jobsup.DatabaseUnavailable), ("127.0.0.1/no_such_db", DatabaseMisconfigured)],
    ids=["nothing-listens", "no-such-database"],
)
def test_a_refused_connection_becomes_jobsups_error(where: str, refused: type[Exception]) -> None:
    db = Database(f"postgresql://postgres@{where}")
    try:
        with pytest.raises(refused):
            db.driver_value("enqueue", "SELECT 1", {})
    finally:
        db.dispose()


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


def test_a_claim_on_the_driver_returns_what_sqlalchemys_result_returns(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Typed columns (the due time, whatever the session's time zone) must come back as
    # SQLAlchemy's result processing made them: the worker builds its jobs from these rows.
    elsewhere = in_new_york(postgres_url)
    client, watched = jobsup.Client(elsewhere), jobsup.Client(elsewhere)
    event.listen(watched.database.single, "before_cursor_execute", lambda *args: None)
    due = datetime(2026, 12, 6, 1, 2, 3, 456789, tzinfo=timezone(timedelta(hours=-5)))
    fields = {
        "name": "a", "queue": "q", "payload": '{"x":1}', "priority": 3, "run_at": due, "max_attempts": 7,
        "timeout": 12.5, "actor": "me", "triggers": '[{"job": "t", "on": "any"}]', "concurrency_key": "k",
        "concurrency_limit": 2, "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01",
    }  # fmt: skip
    try:
        client.store.transitions.enqueue([NewJob(**fields), NewJob(**fields)])
        params = claim_params(client.database.dialect, queue="q", owner="w", limit=1, lease=30, now=None)
        made = _connections_made(client, monkeypatch)
        (driver,) = client.database.dialect.claim(client.database, params, None)
        assert made == []  # the driver's connection, not SQLAlchemy's
        (core,) = watched.database.dialect.claim(watched.database, params, None)
        with client.database.read() as conn:  # the session does answer in New York's time
            assert conn.exec_driver_sql("SELECT now()").scalar_one().utcoffset() != timedelta(0)
    finally:
        client.close()
        watched.close()
    assert type(core).__name__ == "Row" and driver[0] != core[0]  # two jobs, each path's own
    assert list(driver[1:]) == list(core[1:])
    assert [type(v) for v in driver[1:]] == [type(v) for v in core[1:]]
    # The due time as seconds since the epoch on both paths, whatever the session's zone (the
    # worker subtracts it from its clock; a template's moment makes it a UTC datetime).
    assert type(driver[-1]) is float and driver[-1] == due.timestamp()


def test_driver_text_rows_process_each_column_by_the_type_the_driver_reports(client: jobsup.Client) -> None:
    # A Float read from a numeric (the driver's Decimal) is a float, as SQLAlchemy's result gives it.
    statement = select(type_coerce(literal_column("12.5::numeric"), Float).label("x"))
    text_ = DriverText.of(statement)
    (row,) = client.database.driver_run("read", *text_.bind({}), text_.rows)
    with client.database.read() as conn:
        (core,) = conn.execute(statement).all()
    assert row == tuple(core) and type(row[0]) is float is type(core[0])


def test_a_claim_on_the_driver_takes_the_queues_jobs_in_order_and_leaves_the_rest(client: jobsup.Client) -> None:
    ids = client.enqueue_many([{"name": "a", "priority": p} for p in (0, 5, 1)])
    params = claim_params(client.database.dialect, queue="default", owner="w", limit=2, lease=30, now=None)
    assert client.database.may_run_on_driver()
    rows = client.database.dialect.claim(client.database, params, None)
    assert [row[0] for row in rows] == [ids[1], ids[2]]  # by priority, then age
    assert {job.id for job in client.list_jobs(status="running")} == {ids[1], ids[2]}
    assert ids[0] in {job.id for job in client.list_jobs(status="pending")}


def test_settles_on_the_driver_write_and_return_what_sqlalchemys_path_does(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker's settles (a batch's success, a retry, a release) and the sweep's (a lapsed
    # lease's) run alone, on the driver where nothing watches. The same transitions, once on
    # the driver and once watched (SQLAlchemy's execution): what they write and the rows
    # they return must be the same.
    client, watched = jobsup.Client(postgres_url), jobsup.Client(postgres_url)
    event.listen(watched.database.single, "before_cursor_execute", lambda *args: None)
    later = datetime.now(UTC) + timedelta(hours=2)  # every lease of the claim has lapsed by then
    written: list[list[tuple[Any, ...]]] = []
    returned: list[list[dict[str, Any]]] = []
    try:
        for each in (client, watched):
            queue = f"q{len(written)}"
            ids = each.enqueue_many([{"name": "a", "queue": queue} for _ in range(8)])
            jobs = claim(each, "w", queue, limit=8)
            transitions, dialect = each.store.transitions, each.database.dialect
            made = _connections_made(each, monkeypatch)
            stale = Held(Lease(ids[1], "w", 99), "a", queue, False)  # another attempt's lease settles nothing
            outcomes = [Outcome(jobs[0].held, SUCCEEDED, result='{"n": 1}'), Outcome(jobs[1].held, SUCCEEDED)]
            assert transitions.complete([*outcomes, Outcome(stale, SUCCEEDED)]) == set(ids[:2])
            assert fail(each, jobs[2], retry_in=60) == "pending"
            assert release(each, jobs[3:4]) == {ids[3]}
            sweep = Outcome(jobs[6].held, LEASE_EXPIRED, "lost")
            assert transitions.fail(sweep, now=later, expired_only=True) == "pending"
            assert transitions.release([jobs[7].held], now=later, expired_only=True) == {ids[7]}
            clock = dialect.clock_params(None)
            succeeded = {"p_outcome": SUCCEEDED, "p_error": None, **clock}
            succeeded |= transitions.sql.fence_params([jobs[4].lease], ['"r"'])
            failed = {**dialect.clock_params(None, retry=30), **transitions.sql.fence_params([jobs[5].lease])}
            failed |= {"p_discard": False, "p_error": "boom", "p_traceback": None, "p_outcome": "failed"}
            rows = [
                *transitions._run("complete", transitions.sql.complete, succeeded, "settle"),
                *transitions._run("fail", transitions.sql.fail, failed, "settle"),
            ]
            assert (made == []) is (each is client)  # only the unwatched one skips SQLAlchemy's execution
            assert [(row[0], row.id, row.status) for row in rows] == [
                (ids[4], ids[4], "succeeded"),
                (ids[5], ids[5], "pending"),
            ]
            assert rows[1].run_at.tzinfo is UTC  # the due time of the retry, processed as SQLAlchemy does
            ignored = ("id", "queue", "run_at")  # each path's own jobs, queue and clock
            returned.append([{k: v for k, v in row._asdict().items() if k not in ignored} for row in rows])
            written.append(_written(each, ids))
    finally:
        client.close()
        watched.close()
    assert written[0] == written[1] and returned[0] == returned[1]
    assert written[0][0][:2] == ("succeeded", {"n": 1}) and written[0][2][0] == "pending"
    assert [row[0] for row in written[0][5:]] == ["pending", "pending", "pending"]


def _written(client: jobsup.Client, ids: list[int]) -> list[tuple[Any, ...]]:
    """What the transitions wrote to the jobs and their attempts, without ids or times."""
    rows = []
    for job_id in ids:
        found = client.get(job_id)
        assert found is not None
        history = [(a.attempt, a.outcome, a.error) for a in found.history]
        rows.append((found.status, found.result, found.attempts, found.last_error, history))
    return rows
