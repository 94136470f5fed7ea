"""SQL Server, checked offline: no SQL Server server can run where jobsup is developed, so
these tests compile its statements and DDL and check what they say. They do not execute
anything against SQL Server."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime

import pytest
from sqlalchemy.dialects.mssql import pyodbc

from jobsup.store import Store, migrate
from jobsup.store.dialects.mssql import SQLServerDialect

DIALECT = pyodbc.dialect()  # the dialect class only; the driver is not imported


def compiled(stmt: object) -> str:
    return str(stmt.compile(dialect=DIALECT, compile_kwargs={"render_postcompile": True}))  # type: ignore[attr-defined]


def expanded(stmt: object, params: dict[str, object]) -> str:
    """The statement as SQL Server receives it, expanding IN lists and inlined literals."""
    return str(stmt.compile(dialect=DIALECT).construct_expanded_state(params).statement)  # type: ignore[attr-defined]


@pytest.fixture
def store() -> Store:
    """The store's statements for SQL Server, without a connection (none can be made here)."""
    offline = Store.__new__(Store)
    offline.dialect = SQLServerDialect()  # type: ignore[assignment]
    return offline


def test_claim_carries_its_lock_hints_and_writes_attempts_in_the_same_statement() -> None:
    sql = compiled(SQLServerDialect().claim_statement)
    assert "WITH (UPDLOCK, READPAST, ROWLOCK)" in sql
    assert "SELECT TOP (:p_limit)" in sql and "ORDER BY priority DESC, run_at, id" in sql
    assert "WHERE status = 'pending' AND queue = :p_queue" in sql  # the literal lets the filtered index match
    assert "INTO jobsup_job_attempt (job_id, attempt, owner, started_at)" in sql
    assert "OUTPUT inserted.id, inserted.name" in sql


def test_engine_runs_read_committed_because_readpast_fails_under_snapshot() -> None:
    assert SQLServerDialect.engine_options["isolation_level"] == "READ COMMITTED"


def test_fenced_settle_compiles_to_output_and_dateadd_clock(store: Store) -> None:
    from jobsup.store.rows import Lease

    params = {
        **store.dialect.clock_params(None, retry=90.5),
        **store._fence_params([Lease(7, "w", 2)]),
        "p_discard": False,
        "p_error": "boom",
        "p_outcome": "failed",
    }
    first, close = store._fail_any
    sql = expanded(first, params)
    assert "OUTPUT inserted.id, inserted.status" in sql
    assert re.search(r"dateadd\(millisecond, :p_off_ms_retry, dateadd\(second, :p_off_s_retry, coalesce", sql)
    assert "jobsup_job.lease_owner = :p_owner" in sql
    assert "concat(jobsup_job.id, ':', jobsup_job.attempts) IN" in sql  # no row-value IN on SQL Server
    assert "UPDATE jobsup_job_attempt" in expanded(close, {**params, "p_changed": [7]})
    assert params["p_fence_keys"] == ["7:2"] and params["p_fence_ids"] == [7]


def test_a_given_now_replaces_the_server_clock() -> None:
    instant = datetime(2030, 1, 1, tzinfo=UTC)
    params = SQLServerDialect().clock_params(instant, lease=90.5)
    assert params == {"p_now": instant, "p_off_s_lease": 90, "p_off_ms_lease": 500}


def test_offline_ddl_has_filtered_indexes_and_no_deprecated_types() -> None:
    out = io.StringIO()
    migrate.upgrade_sql("mssql", out)
    ddl = out.getvalue()
    assert "id BIGINT NOT NULL IDENTITY" in ddl
    assert "WHERE status = 'pending'" in ddl
    assert "WHERE unique_key IS NOT NULL AND status IN ('pending', 'running')" in ddl
    assert "NTEXT" not in ddl and "payload NVARCHAR(max)" in ddl
    assert "run_at DATETIME2(6)" in ddl
