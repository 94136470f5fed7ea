"""jobsup through a real PgBouncer in transaction mode (Debian's, started by `pgbouncer.py`):
the store's transitions, real `jobsup start` supervisors, the warning when LISTEN would go
through the pooler, `listen_url` routed to the server itself, `listen_url=off`, and why
prepared statements must be off there."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import literal_column, select, text
from sqlalchemy.engine import make_url

import jobsup
from jobsup.settings import QueueConfig, Settings
from jobsup.store.database import Database
from jobsup.store.dialects.pooler import listen_route, pooled
from jobsup.store.rows import SUCCEEDED, Outcome
from jobsup.worker.loop import Worker
from jobsup.worker.slot import SlotTable
from jobsup.worker.spec import WorkerSpec
from jobsup.worker.stop import StopRequest

from harness import TESTS, Supervisor
from helpers import wait_until
from pgbouncer import PgBouncer

pytestmark = pytest.mark.postgres

LISTENING = text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'")


@pytest.fixture(scope="module")
def bouncer(pg_server: str) -> Iterator[PgBouncer]:
    running = PgBouncer()
    yield running
    running.stop()


@pytest.fixture
def pooled_url(postgres_url: str, bouncer: PgBouncer) -> str:
    """This test's (empty, migrated) PostgreSQL database, through PgBouncer."""
    return bouncer.url(str(make_url(postgres_url).database))


def statuses(client: jobsup.Client, ids: list[int]) -> set[str]:
    return {job.status for job in map(client.get, ids) if job is not None}


def worker_titles(supervisor: Supervisor) -> list[str]:
    titles = []
    for pid in supervisor.workers():
        with contextlib.suppress(FileNotFoundError):
            titles.append(Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"))
    return titles


def test_a_connection_through_pgbouncer_is_seen_pooled_and_prepares_nothing(postgres_url: str, pooled_url: str) -> None:
    through, direct = Database(pooled_url), Database(postgres_url)
    try:
        assert pooled(through) and not pooled(direct)
        for db, threshold in ((through, None), (direct, 5)):
            for engine in (db.engine, db.single):
                with engine.connect() as conn:
                    assert conn.connection.driver_connection.prepare_threshold == threshold  # type: ignore[union-attr]
    finally:
        through.dispose()
        direct.dispose()


def test_a_driver_statement_is_prepared_at_its_first_run_but_never_through_a_pooler(
    postgres_url: str, pooled_url: str
) -> None:
    # The worker's claim and settle run this way (`DriverText`): prepared at once where the
    # server session is the client's own, and nowhere behind PgBouncer.
    from jobsup.store.dialects.drivertext import DriverText

    statement = DriverText.of(select(literal_column("41 + 1").label("answer")))
    for url, prepared in ((postgres_url, True), (pooled_url, False)):
        db = Database(url)
        try:
            assert db.driver_run("read", *statement.bind({}), statement.rows) == [(42,)]
            with db.single.connect() as conn:  # the one connection of its pool: the same session
                texts = conn.exec_driver_sql("SELECT statement FROM pg_prepared_statements").scalars().all()
            assert any("41 + 1" in text for text in texts) is prepared, (url, texts)
        finally:
            db.dispose()


def test_repeated_statements_through_pgbouncer_break_when_prepared(bouncer: PgBouncer, pg_server: str) -> None:
    """Why prepared statements are off behind a pooler: psycopg prepares a statement run 5
    times on one connection, and through transaction pooling another client's transaction
    lands on that server session (or this client on another one)."""
    target = make_url(bouncer.url("postgres"))
    clients = [
        psycopg.connect(host="127.0.0.1", port=target.port, user="postgres", dbname="postgres", autocommit=True)
        for _ in range(3)
    ]
    try:
        with pytest.raises(psycopg.Error, match="prepared statement"):
            for n in range(20):
                for conn in clients:
                    conn.execute("SELECT %s::int + 1", (n,)).fetchone()
    finally:
        for conn in clients:
            conn.close()


def test_enqueue_claim_and_settle_through_pgbouncer(pooled_url: str) -> None:
    """Each transition runs far more often than psycopg's prepare threshold, on a few pooled
    connections: without prepare_threshold=None this fails with "prepared statement ... does
    not exist" (or "already exists")."""
    client = jobsup.Client(pooled_url)
    try:
        ids = [client.enqueue("a", {"n": n}, allow_unknown=True) for n in range(15)]
        ids += client.enqueue_many([{"name": "a", "payload": {"n": n}} for n in range(15)], allow_unknown=True)
        claimed = []
        while batch := client.store.transitions.claim("default", "through-pgbouncer", limit=1, lease=60.0):
            client.store.transitions.complete([Outcome(job.held, SUCCEEDED) for job in batch])
            claimed += [job.id for job in batch]
        assert sorted(claimed) == sorted(ids)
        assert statuses(client, ids) == {"succeeded"}
    finally:
        client.close()


def test_a_settle_is_never_sent_behind_through_pgbouncer(pooled_url: str) -> None:
    """A worker's large claim sends its successes' settle behind it, prepared on the server
    session (`jobsup.store.dialects.sent`); through a pooler nothing is sent (the worker
    writes in line), and nothing was written by the try."""
    client = jobsup.Client(pooled_url)
    try:
        assert pooled(client.store.db) and client.store.db.may_run_on_driver()  # the pooler is why, nothing else
        ids = client.enqueue_many([{"name": "a"}] * 3, allow_unknown=True)
        batch = client.store.transitions.claim("default", "through-pgbouncer", limit=3, lease=60.0)
        outcomes = [Outcome(job.held, SUCCEEDED) for job in batch]
        assert client.store.transitions.send_complete(outcomes) is None
        assert statuses(client, ids) == {"running"}
        assert client.store.transitions.complete(outcomes) == set(ids)
    finally:
        client.close()


@pytest.mark.slow
def test_start_through_pgbouncer_runs_jobs_and_warns_once_about_listen(
    pooled_url: str, record: Path, tmp_path: Path
) -> None:
    supervisor = Supervisor(pooled_url, record, tmp_path / "supervisor.log", "--queue", "default=2")
    client = jobsup.Client(pooled_url)
    try:
        ids = client.enqueue_many([{"name": "work", "payload": {}} for _ in range(30)])
        wait_until(lambda: statuses(client, ids) == {"succeeded"}, timeout=60, what="30 jobs through pgbouncer")
        warnings = [line for line in supervisor.output().splitlines() if "supervisor.polling" in line]
        assert len(warnings) == 1, supervisor.output()
        assert "WARNING" in warnings[0] and "listen_url" in warnings[0] and "pooler" in warnings[0]
        assert "prepared statement" not in supervisor.output()
    finally:
        client.close()
        supervisor.stop()


@pytest.mark.slow
def test_listen_url_on_the_server_wakes_a_worker_idle_behind_pgbouncer(
    postgres_url: str, pooled_url: str, record: Path, tmp_path: Path
) -> None:
    """The worker polls once an hour: only the notification of an enqueue made through
    PgBouncer, heard on the direct connection, can start the job within the test."""
    supervisor = Supervisor(
        pooled_url, record, tmp_path / "supervisor.log", poll_interval="1h", listen_url=postgres_url
    )
    direct = Database(postgres_url)
    client = jobsup.Client(pooled_url)
    try:
        supervisor.wait_for_workers(1)
        with direct.read() as conn:
            wait_until(lambda: conn.execute(LISTENING).scalar_one() >= 1, timeout=30, what="the worker's LISTEN")
        job = client.enqueue("work", {})
        wait_until(lambda: statuses(client, [job]) == {"succeeded"}, timeout=30, what="the woken worker's job")
        assert "supervisor.polling" not in supervisor.output()
    finally:
        client.close()
        direct.dispose()
        supervisor.stop()


def test_the_listen_connection_goes_to_listen_url(postgres_url: str, pooled_url: str) -> None:
    db = Database(pooled_url, listen_url=postgres_url)
    listener = db.dialect.listener(db, "default")
    try:
        assert listener is not None
        assert listen_route(db) == make_url(postgres_url)
        assert listener.conn.info.port == 5432 and listener.conn.info.backend_pid > 0  # type: ignore[attr-defined]
    finally:
        if listener is not None:
            listener.close()
        db.dispose()


def test_start_checks_that_listen_url_hears_the_database(postgres_url: str, pooled_url: str, pg_server: str) -> None:
    """A listen_url on the server itself hears an enqueue's NOTIFY sent through PgBouncer; one
    through PgBouncer, or on another database, does not, and start says so."""
    other = str(make_url(postgres_url).set(database="postgres"))
    expected = {postgres_url: None, pooled_url: "did not hear a notification", other: "did not hear a notification"}
    for listen_url, warning in expected.items():
        db = Database(pooled_url, listen_url=listen_url)
        try:
            said = db.dialect.wakeup_warning(db)
        finally:
            db.dispose()
        if warning is None:
            assert said is None
        else:
            assert said is not None and warning in said and said.startswith("listen_url ")


@pytest.mark.parametrize("listen_url", ["", "off"])
def test_no_listen_behind_pgbouncer_without_listen_url_nor_when_off(
    pooled_url: str, postgres_url: str, listen_url: str
) -> None:
    for url in (pooled_url, postgres_url) if listen_url else (pooled_url,):
        db = Database(url, listen_url=listen_url)
        try:
            assert db.dialect.listener(db, "default") is None
        finally:
            db.dispose()


@pytest.mark.parametrize(("poll_interval", "unwoken"), [(None, 1.0), (0.3, 0.3)])
def test_a_worker_nothing_can_wake_polls_every_second_unless_told(
    pooled_url: str, poll_interval: float | None, unwoken: float
) -> None:
    settings = Settings(database_url=pooled_url, poll_interval=poll_interval, queues={"default": QueueConfig()})
    spec = WorkerSpec(settings, "default", 1, "test-host:default#1:unwoken", os.getppid())
    slot = SlotTable(1, 1).slot(0)
    slot.reset()
    db = Database(pooled_url, role="worker")
    try:
        worker = Worker(spec, db, StopRequest(), slot, None)
        assert worker.listen() is None
        assert worker.unwoken_poll == unwoken
        assert worker.poll_interval == (5.0 if poll_interval is None else poll_interval)  # with LISTEN
    finally:
        db.dispose()


@pytest.mark.slow
def test_listen_url_off_polls(postgres_url: str, record: Path, tmp_path: Path) -> None:
    """Off even on a direct connection: no LISTEN at all, every job still runs."""
    supervisor = Supervisor(postgres_url, record, tmp_path / "supervisor.log", listen_url="off")
    client = jobsup.Client(postgres_url)
    direct = Database(postgres_url)
    try:
        ids = client.enqueue_many([{"name": "work", "payload": {}} for _ in range(5)])
        wait_until(lambda: statuses(client, ids) == {"succeeded"}, timeout=60, what="5 jobs, polled")
        wait_until(
            lambda: any("idle" in title for title in worker_titles(supervisor)),
            timeout=30,
            what="an idle worker",
        )
        with direct.read() as conn:
            assert conn.execute(LISTENING).scalar_one() == 0
        assert "supervisor.polling" not in supervisor.output()
    finally:
        client.close()
        direct.dispose()
        supervisor.stop()


@pytest.mark.slow
def test_the_competing_instances_test_passes_through_pgbouncer(bouncer: PgBouncer) -> None:
    """test_competing_instances.py in a pytest run of its own, whose competitors (3 xdist
    workers claiming, 2 supervisors) all reach PostgreSQL through PgBouncer."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    env["JOBSUP_TEST_COMPETING_PORT"] = str(bouncer.port)
    env["JOBSUP_TEST_MARIADB"] = "skip"  # PgBouncer is PostgreSQL's: the MariaDB competition is not this test's
    command = [sys.executable, "-m", "pytest", "-n", "3", "-p", "no:cacheprovider", "-q", "-k", "postgresql"]
    result = subprocess.run(
        [*command, str(TESTS / "test_competing_instances.py")],
        cwd=TESTS.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"{result.stdout[-6000:]}{result.stderr[-2000:]}\npgbouncer: {bouncer.log()}"
    assert "1 passed" in result.stdout, result.stdout[-2000:]
    # The competitors really came through this pgbouncer (it logs each login).
    assert "login attempt: db=jobsup_run_" in (bouncer.folder / "pgbouncer.log").read_text(errors="replace")
