"""SQL Server, checked offline: no SQL Server server can run where jobsup is developed, so
these tests compile its statements and DDL and check what they say. They do not execute
anything against SQL Server."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime

from sqlalchemy.dialects.mssql import pyodbc

from jobsup import migrate
from jobsup.dialects.mssql import SQLServerDialect
from jobsup.rows import Lease
from jobsup.schema import job
from jobsup.store import _close_attempts, _fenced

DIALECT = pyodbc.dialect()  # the dialect class only; the driver is not imported


def compiled(stmt: object) -> str:
    return str(stmt.compile(dialect=DIALECT, compile_kwargs={"render_postcompile": True}))  # type: ignore[attr-defined]


def test_claim_carries_its_lock_hints_and_writes_attempts_in_the_same_statement() -> None:
    sql = compiled(SQLServerDialect().claim_statement(queue="default", owner="w", limit=10, lease=60.0))
    assert "WITH (UPDLOCK, READPAST, ROWLOCK)" in sql
    assert "SELECT TOP (:limit)" in sql and "ORDER BY priority DESC, run_at, id" in sql
    assert "WHERE status = 'pending' AND queue = :queue" in sql  # the literal lets the filtered index match
    assert "INTO jobsup_job_attempt (job_id, attempt, owner, started_at)" in sql
    assert "OUTPUT inserted.id, inserted.name" in sql


def test_engine_runs_read_committed_because_readpast_fails_under_snapshot() -> None:
    assert SQLServerDialect.engine_options["isolation_level"] == "READ COMMITTED"


def test_fenced_settle_compiles_to_output_and_dateadd_clock() -> None:
    dialect = SQLServerDialect()
    at = dialect.now(None)
    from sqlalchemy import update

    stmt = (
        update(job)
        .where(_fenced([Lease(1, "w", 2)]))
        .values(status="pending", run_at=dialect.now(None, 90.5), updated_at=at)
        .returning(job.c.id)
    )
    sql = compiled(stmt)
    assert "OUTPUT inserted.id" in sql
    assert re.search(r"dateadd\(millisecond, :\w+, dateadd\(second, :\w+, sysutcdatetime\(\)\)\)", sql)
    assert "jobsup_job.status = 'running'" in sql
    assert "jobsup_job.lease_owner = :lease_owner_1" in sql
    assert "UPDATE jobsup_job_attempt" in compiled(_close_attempts("failed", "x", at)([1]))


def test_a_given_now_replaces_the_server_clock() -> None:
    instant = datetime(2030, 1, 1, tzinfo=UTC)
    stmt = SQLServerDialect().claim_statement(queue="q", owner="w", limit=1, lease=1.0, now=instant)
    params = stmt.compile(dialect=DIALECT).params
    assert params["now"] == instant


def test_offline_ddl_has_filtered_indexes_and_no_deprecated_types() -> None:
    out = io.StringIO()
    migrate.upgrade_sql("mssql", out)
    ddl = out.getvalue()
    assert "id BIGINT NOT NULL IDENTITY" in ddl
    assert "WHERE status = 'pending'" in ddl
    assert "WHERE unique_key IS NOT NULL AND status IN ('pending', 'running')" in ddl
    assert "NTEXT" not in ddl and "payload NVARCHAR(max)" in ddl
    assert "run_at DATETIME2(6)" in ddl
