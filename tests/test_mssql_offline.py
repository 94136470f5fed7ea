"""SQL Server, checked offline: no SQL Server can run where jobsup is developed, so these tests
run the store's transitions against a connection that compiles every statement with
SQLAlchemy's real SQL Server dialect and keeps the SQL (`offline.py`), connect through a
stand-in driver, and read the generated DDL. Nothing here executes against SQL Server."""

from __future__ import annotations

import io
import re
import sys
import types
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from offline import OfflineDatabase
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from jobsup.jobtypes import JobType, Resolver
from jobsup.store import migrate
from jobsup.store.builder import build
from jobsup.store.dialects.mssql import SQLServerDialect
from jobsup.store.overview import OverviewReads
from jobsup.store.reads import Reads
from jobsup.store.recurring import RecurringStore
from jobsup.store.rows import FAILED, SUCCEEDED, Held, Lease, Outcome, RecurringSchedule
from jobsup.store.transitions import Transitions

from helpers import run_jobsup, without_modules

T0 = datetime(2030, 1, 1, tzinfo=UTC)
HELD = Held(Lease(7, "w", 2), "a", "default", needs_steps=False)


@pytest.fixture
def db() -> OfflineDatabase:
    return OfflineDatabase()


def transitions(db: OfflineDatabase) -> Transitions:
    return Transitions(db, Resolver(None))  # type: ignore[arg-type]


# Per transition: what it does, fragments its SQL must contain, parameters it must bind.
TRANSITIONS: dict[str, tuple[Callable[[Transitions], Any], list[str], dict[str, Any]]] = {
    "enqueue": (
        lambda t: t.enqueue([build(JobType("a"), {"x": 1}, {"unique_key": "k"}), build(JobType("a"), None, {})]),
        [
            "INSERT INTO jobsup_job (name, queue, priority, payload",
            "OUTPUT inserted.id",
            "coalesce(:j_run_at, coalesce(",
        ],
        {"j_unique_key": "k", "j_payload": '{"x":1}'},
    ),
    "claim": (
        lambda t: t.claim("default", "w", limit=7, lease=90.5),
        [
            "SELECT TOP 7 jobsup_job.id",
            "FROM jobsup_job WITH (UPDLOCK, READPAST, ROWLOCK)",
            "WHERE jobsup_job.status = 'pending' AND jobsup_job.queue = :p_queue",  # the filtered index's literal
            "ORDER BY jobsup_job.priority DESC, jobsup_job.run_at, jobsup_job.id",
            "OUTPUT inserted.id, inserted.name",
            "dateadd(millisecond, :p_off_ms_lease, dateadd(second, :p_off_s_lease,",
        ],
        {"p_queue": "default", "p_owner": "w", "p_off_s_lease": 90, "p_off_ms_lease": 500},
    ),
    "renew": (
        lambda t: t.renew([HELD.lease], lease=60.0),
        [
            "SET lease_expires_at=CASE WHEN (jobsup_job.lease_expires_at > dateadd(",
            "concat(jobsup_job.id, ':', jobsup_job.attempts) IN (:p_fence_keys_1)",
        ],
        {"p_fence_keys_1": "7:2", "p_owner": "w"},
    ),
    "complete": (
        lambda t: t.complete([Outcome(HELD, SUCCEEDED, result='{"ok":1}')]),
        [
            "result=:p_result OUTPUT inserted.id, inserted.status, inserted.workflow_id",
            # The attempt's row, written once from the job row the first statement left.
            "INSERT INTO jobsup_job_attempt (job_id, attempt, owner, started_at, finished_at, outcome, error, "
            "traceback, progress) SELECT changed.id, changed.attempts, :p_owner",
            "WHERE jobsup_job.id IN (:p_changed_1)) AS changed",
        ],
        {"status": "succeeded", "p_result": '{"ok":1}', "p_outcome": "succeeded"},
    ),
    "fail": (
        lambda t: t.fail(Outcome(HELD, FAILED, "boom", retry_in=90.5)),
        [
            "status=CASE WHEN (jobsup_job.cancel_requested_at IS NOT NULL) THEN :param_1 "
            "WHEN (:p_discard = 1 OR jobsup_job.attempts >= jobsup_job.max_attempts)",
            "OUTPUT inserted.id",
        ],
        {"p_error": "boom", "p_off_s_retry": 90, "p_off_ms_retry": 500, "p_discard": False},
    ),
    "release": (
        lambda t: t.release([HELD]),
        [
            "status=CASE WHEN (jobsup_job.cancel_requested_at IS NOT NULL)",
            "attempts=(jobsup_job.attempts - :attempts_1)",
            "SELECT changed.id, changed.attempts + :attempts_1 AS anon_1",  # its row keeps the number it ran as
        ],
        {"p_outcome": "released"},
    ),
    "cancel": (
        lambda t: t.cancel(7),
        [
            "WHERE jobsup_job.id = :p_job AND jobsup_job.status IN (:status_1_1, :status_1_2, :status_1_3)",
            "cancel_requested_at=CASE WHEN (jobsup_job.status = 'running')",  # a running job is asked
        ],
        {"p_job": 7},
    ),
    "expire": (
        lambda t: t.sweep.expire(now=T0),
        ["GROUP BY jobsup_job.lease_owner", "jobsup_job.lease_expires_at < coalesce(:p_now"],
        {"p_now": T0},
    ),
    "expire_owner": (
        lambda t: t.sweep.expire_owner("w", {7: (2, "lease_expired", "killed")}),
        ["jobsup_job.lease_owner = :p_owner ORDER BY jobsup_job.priority DESC"],
        {"p_owner": "w"},
    ),
    "retry": (
        lambda t: t.retry([7]),
        ["max_attempts=(jobsup_job.attempts + coalesce(jobsup_job.budget, jobsup_job.max_attempts))"],
        {"p_job": 7},
    ),
}


@pytest.mark.parametrize("name", sorted(TRANSITIONS))
def test_every_transition_compiles_for_sql_server(db: OfflineDatabase, name: str) -> None:
    action, fragments, bound = TRANSITIONS[name]
    action(transitions(db))
    sql = "\n".join(db.sql)
    assert sql, f"{name} ran no statement"
    for fragment in fragments:
        assert fragment in sql, f"{fragment!r} not in:\n{sql}"
    params = {key: value for statement in db.params for key, value in statement.items()}
    assert {key: params.get(key) for key in bound} == bound


def _lease_row(job_id: int) -> SimpleNamespace:
    links = {"workflow_id": None, "batch_id": None, "triggers": None}
    return SimpleNamespace(id=job_id, lease_owner="w", attempts=2, name="a", queue="default", started_at=T0, **links)


def test_the_sweep_releases_the_waiting_leases_then_charges_the_running_one(db: OfflineDatabase) -> None:
    db.answer([("w",)])  # an owner with lapsed leases
    db.answer([_lease_row(7), _lease_row(8)])  # running 7, 8 waiting behind it in its batch
    assert transitions(db).sweep.expire(now=T0) == 2
    writes = [sql for sql in db.sql if sql.startswith("UPDATE jobsup_job SET")]
    assert len(writes) == 2
    assert writes[0].startswith("UPDATE jobsup_job SET status=CASE WHEN (jobsup_job.cancel_requested_at IS NOT NULL)")
    assert "attempts=(jobsup_job.attempts - " in writes[0]  # the release first
    assert "CASE WHEN" in writes[1]  # the fail: retried or dead-lettered
    for sql in writes:  # the sweep's compare-and-set: only a lease that lapsed still
        assert "jobsup_job.lease_expires_at < coalesce(:p_now" in sql


def test_a_dead_owners_leases_are_released_or_charged(db: OfflineDatabase) -> None:
    db.answer([_lease_row(7), _lease_row(8)])
    transitions(db).sweep.expire_owner("w", {7: (2, "lease_expired", "killed")})
    writes = [sql for sql in db.sql if sql.startswith("UPDATE jobsup_job SET")]
    assert len(writes) == 2 and "attempts - " in writes[0] and "CASE WHEN" in writes[1]
    assert not any("lease_expires_at <" in sql for sql in writes)  # known dead: no lapse needed


def test_firing_a_recurring_slot_compiles(db: OfflineDatabase) -> None:
    schedule = RecurringSchedule(
        name="nightly", job="a", cron="0 3 * * *", timezone="UTC", payload={"x": 1}, queue="default",
        priority=0, enabled=True, next_run_at=T0, last_fired_at=None,
    )  # fmt: skip
    assert transitions(db).fire(RecurringStore(db), schedule, now=T0) == "fired"  # type: ignore[arg-type]
    sql = "\n".join(db.sql)
    assert "UPDATE jobsup_recurring_job SET next_run_at=" in sql and "jobsup_recurring_job.next_run_at = " in sql
    assert "INSERT INTO jobsup_job (name, queue, priority, payload" in sql
    params = {key: value for statement in db.params for key, value in statement.items()}
    assert params["j_recurring_name"] == "nightly" and params["j_scheduled_slot"] == T0


def test_the_claim_is_one_statement_that_notes_the_attempts_start(db: OfflineDatabase) -> None:
    claimed = transitions(db).claim("default", "w", limit=1, lease=60.0)
    assert [job.id for job in claimed] == [7]
    assert len(db.sql) == 1  # the attempt's row is written when it ends
    assert db.sql[0].startswith("UPDATE jobsup_job SET status=:status, attempts=(jobsup_job.attempts + :attempts_1)")
    assert "started_at=coalesce(:p_now, sysutcdatetime()), progress=:progress" in db.sql[0]


def test_operator_reads_compile(db: OfflineDatabase) -> None:
    reads = Reads(db)  # type: ignore[arg-type]
    reads.job_get(7)
    reads.job_list(status="dead_lettered", queue="mail", limit=5)
    reads.job_counts(["pending", "running"], now=T0)
    reads.job_finished("succeeded", older_than=3600.0, limit=10, now=T0)
    reads.job_finished("succeeded", older_than=60.0, limit=10, now=T0, name="report", since=T0)  # a type's own sweep
    reads.job_finished("succeeded", older_than=3600.0, limit=10, now=T0, excluding=["report", "audit"])
    sql = "\n".join(db.sql)
    assert re.search(r"jobsup_job\.name = :\w+", sql) and re.search(r"jobsup_job\.name NOT IN \(:\w+, :\w+\)", sql)
    assert "SELECT TOP 5" in sql and "jobsup_job.status = 'dead_lettered'" in sql
    assert "GROUP BY jobsup_job.queue, jobsup_job.status" in sql


def test_a_given_now_replaces_the_server_clock() -> None:
    params = SQLServerDialect().clock_params(T0, lease=90.5)
    assert params == {"p_now": T0, "p_off_s_lease": 90, "p_off_ms_lease": 500}


class _StandInDriverError(Exception):
    pass


@pytest.fixture
def stand_in_pyodbc(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A driver module that records what SQLAlchemy's dialect sends on a new connection,
    then refuses the rest (the server's answers to its set-up queries are not ours to fake)."""
    sent: list[str] = []

    class Cursor:
        def execute(self, sql: str, *args: Any) -> None:
            sent.append(sql)
            if not sql.startswith("SET "):
                raise _StandInDriverError("no SQL Server here")

        def close(self) -> None: ...
        def nextset(self) -> bool:
            return False

    class Connection:
        autocommit = False

        def cursor(self) -> Cursor:
            return Cursor()

        def add_output_converter(self, *args: Any) -> None: ...
        def getinfo(self, *args: Any) -> None:
            raise _StandInDriverError("no SQL Server here")

        def rollback(self) -> None: ...
        def close(self) -> None: ...

    module = types.ModuleType("pyodbc")
    module.__dict__.update(paramstyle="qmark", version="5.2.0", Cursor=Cursor, SQL_DBMS_VER=18)
    module.connect = lambda *args, **kwargs: Connection()
    for name in ("Error", "InterfaceError", "DatabaseError", "OperationalError", "IntegrityError", "ProgrammingError"):
        setattr(module, name, _StandInDriverError)
    for name in ("DataError", "InternalError", "NotSupportedError", "Warning"):
        setattr(module, name, _StandInDriverError)
    monkeypatch.setitem(sys.modules, "pyodbc", module)
    yield sent


def test_every_connection_runs_read_committed_because_readpast_fails_under_snapshot(
    stand_in_pyodbc: list[str],
) -> None:
    engine = SQLServerDialect().create_engine(make_url("mssql+pyodbc://jobsup:secret@dsn"))
    with pytest.raises((DBAPIError, _StandInDriverError)):
        engine.connect()
    assert stand_in_pyodbc[0] == "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"


def test_offline_ddl_has_filtered_indexes_and_no_deprecated_types() -> None:
    out = io.StringIO()
    migrate.upgrade_sql("mssql", out)
    ddl = out.getvalue()
    assert "id BIGINT NOT NULL IDENTITY" in ddl
    assert "WHERE status = 'pending'" in ddl
    assert "WHERE unique_key IS NOT NULL AND status IN ('pending', 'running')" in ddl
    assert "NTEXT" not in ddl and "payload NVARCHAR(max)" in ddl
    assert "run_at DATETIME2(6)" in ddl
    assert "CREATE TABLE jobsup_job_definition" in ddl and "ALTER TABLE jobsup_job ADD budget INTEGER" in ddl


def test_the_statements_of_workflows_and_batches_compile_for_sql_server(db: OfflineDatabase) -> None:
    from offline import MSSQL

    t = transitions(db)
    updates = (t.sql.unblock, t.sql.promote, t.sql.cancel_blocked, t.sql.reopen)
    for statement in (t.sql.dependents_of, *(update.statement for update in updates)):
        assert str(statement.compile(dialect=MSSQL))
    assert "NOT (EXISTS (SELECT" in str(t.batches.finishable.compile(dialect=MSSQL))
    # The fan-in's look inside a settle skips and locks; the look after it waits.
    skipping = str(t.dialect.lock_rows(t.batches.unfinished_child, skip_locked=True).compile(dialect=MSSQL))
    assert "SELECT TOP " in skipping and "WITH (UPDLOCK, READPAST, ROWLOCK)" in skipping
    waiting = str(t.dialect.lock_rows(t.batches.unfinished_child, skip_locked=False).compile(dialect=MSSQL))
    assert "READPAST" not in waiting


def test_a_workflow_enqueues_and_cancels_on_sql_server(db: OfflineDatabase) -> None:
    t = transitions(db)
    first = build(JobType("a"), None, {}, links={"step": "first", "on_failure": "cancel"})
    second = build(JobType("a"), None, {}, links={"step": "second", "waiting_on": 1, "on_failure": "cancel"})
    t.workflows.enqueue("wf", "key-1", [(first, []), (second, [0])])
    sql = "\n".join(db.sql)
    assert "INSERT INTO jobsup_workflow" in sql and "INSERT INTO jobsup_job_dependency" in sql
    assert "THEN 'waiting' ELSE 'pending' END" in sql
    t.workflows.cancel(3)
    assert "UPDATE jobsup_workflow SET cancelled_at" in "\n".join(db.sql)


def test_the_dashboard_reads_compile_with_one_grouping_column_per_bucket(db: OfflineDatabase) -> None:
    reads = OverviewReads(db)  # type: ignore[arg-type]
    reads.queue_counts()
    reads.finished_since([T0, T0, T0])
    reads.job_page(before=100, lowest=50, limit=51, queue="mail")
    db.answer([(1, 100)])
    assert reads.id_range() == (1, 100)
    sql = "\n".join(db.sql)
    assert "datediff_big(millisecond, jobsup_job.run_at, jobsup_job.finished_at)" in sql
    # SQL Server refuses a GROUP BY that repeats an expression with parameters (pyodbc binds
    # each copy as its own): the buckets are grouped by a subquery's column instead.
    assert "GROUP BY finished.grouped, finished.bucket" in sql
    assert "TOP 51" in sql


@pytest.mark.parametrize("url", ["mssql+pyodbc://u:secret@dsn", "mssql://u:secret@dsn", "mssql+pymssql://u@host/db"])
def test_offline_ddl_needs_no_driver_while_connecting_names_it(tmp_path: Path, url: str) -> None:
    # A reviewer's machine without the [mssql] extra or unixODBC: only SQLAlchemy's SQL
    # Server dialect writes the DDL, so only connecting needs pyodbc.
    env = without_modules(tmp_path / "hidden", "pyodbc")
    offline = run_jobsup("db", "upgrade", "--sql", "--database-url", url, cwd=tmp_path, env=env)
    assert offline.returncode == 0, offline.stderr
    claim_index = "CREATE INDEX jobsup_job_claim ON jobsup_job (queue, priority DESC, run_at, id)"
    assert f"{claim_index} WHERE status = 'pending';" in offline.stdout
    online = run_jobsup("db", "upgrade", "--database-url", "mssql+pyodbc://u:secret@dsn", cwd=tmp_path, env=env)
    assert online.returncode == 2
    assert online.stderr.startswith("jobsup: mssql needs the pyodbc driver, which did not import")
    assert "pip install 'jobsup[mssql]'" in online.stderr
    assert len(online.stderr.strip().splitlines()) == 1 and "secret" not in online.stderr
