"""The real claim statement seeks the claim index with no sort, even among many finished rows; on
PostgreSQL the settle's generic plan joins its arrays to the primary key."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event, text

from jobsup.store.claim import claim_params
from jobsup.store.database import Database
from jobsup.store.rows import Lease
from jobsup.store.statements import Statements

from helpers import plan_nodes

FINISHED, PENDING = 200_000, 1_000
NOW = datetime(2030, 1, 1, tzinfo=UTC)

FILL = """
INSERT INTO jobsup_job (name, queue, priority, payload, status, run_at, attempts, max_attempts,
                        created_at, updated_at, finished_at)
SELECT 'noop', 'default', 0, 'null', CASE WHEN n <= {finished} THEN 'succeeded' ELSE 'pending' END,
       {stamp}, 1, 5, {stamp}, {stamp}, {stamp}
FROM {numbers}
"""


def fill(db: Database, numbers: str, stamp: str) -> None:
    with db.transaction() as conn:
        conn.execute(text(FILL.format(finished=FINISHED, numbers=numbers, stamp=stamp)))


def filled_postgres(url: str) -> Database:
    db = Database(url)
    fill(db, f"generate_series(1, {FINISHED + PENDING}) AS n", "'2020-01-01'::timestamptz")
    with db.read() as conn:
        conn.execute(text("VACUUM ANALYZE jobsup_job"))
    return db


def test_sqlite_claim_uses_the_claim_index_without_sorting(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    total = FINISHED + PENDING
    numbers = f"(WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {total}) SELECT n FROM s)"
    fill(db, numbers, "'2020-01-01 00:00:00.000000'")
    with db.transaction() as conn:
        conn.execute(text("ANALYZE"))
    dialect = db.dialect
    params = claim_params(dialect, queue="default", owner="w", limit=10, lease=60.0, now=NOW)
    stmt = dialect.candidates_statement.params(params)  # type: ignore[attr-defined]
    sql = str(stmt.compile(db.engine, compile_kwargs={"literal_binds": True}))
    with db.read() as conn:
        plan = " | ".join(row[3] for row in conn.execute(text("EXPLAIN QUERY PLAN " + sql)))
    assert "USING INDEX jobsup_job_claim" in plan or "USING COVERING INDEX jobsup_job_claim" in plan, plan
    assert "TEMP B-TREE" not in plan, plan
    # The statement really claims from that table.
    assert len(dialect.claim_candidates(db, params)) == 10  # type: ignore[attr-defined]


@pytest.mark.postgres
def test_postgres_claim_uses_the_claim_index_without_sorting(postgres_url: str) -> None:
    db = filled_postgres(postgres_url)
    stmt = db.dialect.claim_statement  # type: ignore[attr-defined]
    params = claim_params(db.dialect, queue="default", owner="w", limit=10, lease=60.0, now=None)

    def explain(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> Any:
        return "EXPLAIN (FORMAT JSON) " + statement, parameters

    with db.statement() as conn:
        event.listen(conn, "before_cursor_execute", explain, retval=True)
        raw = conn.execute(stmt, params).scalar_one()
    plan = (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]
    # The candidates CTE is where rows are found: it must seek the claim index and never sort
    # (the statement's final ORDER BY only orders the at most `limit` rows claimed).
    candidates = [n for n in plan_nodes(plan) if n.get("Subplan Name") == "CTE candidates"]
    assert len(candidates) == 1, json.dumps(plan, indent=1)
    nodes = plan_nodes(candidates[0])
    assert any(n.get("Index Name") == "jobsup_job_claim" for n in nodes), json.dumps(plan, indent=1)
    assert not any(n["Node Type"] in ("Sort", "Incremental Sort") for n in nodes), json.dumps(plan, indent=1)
    # EXPLAIN did not run it: the real statement claims 10.
    assert len(db.dialect.claim(db, params, None)) == 10


@pytest.mark.postgres
def test_postgres_settle_joins_its_arrays_to_the_primary_key_in_a_generic_plan(postgres_url: str) -> None:
    from psycopg import sql as psql
    from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg

    db = filled_postgres(postgres_url)
    statements = Statements(db.dialect)
    params = {"p_now": None, "p_outcome": "succeeded", "p_error": None}
    params |= statements.fence_params([Lease(n, "w", 1) for n in (3, 1, 2)], ['"a"', None, "2"])
    # The settle as psycopg prepares it after its fifth run ($1, $2, ...), planned the way a
    # prepared statement's plan is kept for any number of leases: generic, parameters unknown.
    compiled = statements.complete.statement.compile(dialect=PGDialect_asyncpg())  # type: ignore[attr-defined]
    values = [params.get(name, compiled.params.get(name)) for name in compiled.positiontup or ()]
    arguments = psql.SQL(", ").join(psql.Literal(value) for value in values)
    with db.transaction() as conn:
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(psql.SQL("PREPARE settle AS {}").format(psql.SQL(str(compiled))))  # type: ignore[arg-type]
        cursor.execute(psql.SQL("EXPLAIN (FORMAT JSON) EXECUTE settle({})").format(arguments))
        raw = cursor.fetchone()[0]
        cursor.execute("DEALLOCATE settle")
    plan = (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]
    nodes = plan_nodes(plan)
    scans = [n for n in nodes if n.get("Relation Name") == "jobsup_job" and "Scan" in n["Node Type"]]
    assert [n.get("Index Name") for n in scans] == ["jobsup_job_pkey"], json.dumps(plan, indent=1)
    assert not any(n["Node Type"] in ("Seq Scan", "Hash Join") for n in nodes), json.dumps(plan, indent=1)


@pytest.mark.mariadb
def test_mariadb_claim_uses_the_claim_index_without_sorting(mariadb_url: str) -> None:
    db = Database(mariadb_url)
    # MariaDB's sequence engine: seq_1_to_N is a table of the numbers 1..N.
    fill(db, f"(SELECT seq AS n FROM seq_1_to_{FINISHED + PENDING}) AS numbers", "'2020-01-01'")
    with db.read() as conn:
        conn.execute(text("ANALYZE TABLE jobsup_job"))
    stmt = db.dialect.candidates_statement  # type: ignore[attr-defined]
    params = claim_params(db.dialect, queue="default", owner="w", limit=10, lease=60.0, now=None)
    sql = str(stmt.params(params).compile(db.engine, compile_kwargs={"literal_binds": True}))
    with db.read() as conn:
        rows = [dict(row._mapping) for row in conn.execute(text("EXPLAIN " + sql))]
    # The candidates are the locking SELECT (the claim's UPDATE is then by primary key): it
    # must seek the claim index (its leading status and queue) and never sort.
    job_rows = [row for row in rows if row["table"] == "jobsup_job"]
    assert [row["key"] for row in job_rows] == ["jobsup_job_claim"], rows
    # A seek on (status, queue) that reads the pending rows, not the finished ones.
    assert job_rows[0]["type"] in ("ref", "range"), rows
    assert int(job_rows[0]["rows"]) <= 2 * PENDING, rows
    assert not any("filesort" in (row["Extra"] or "") for row in rows), rows
    # EXPLAIN did not run it: the real claim takes 10.
    assert len(db.dialect.claim(db, params, None)) == 10


@pytest.mark.mariadb
def test_mariadb_finds_a_live_unique_key_by_its_index(mariadb_url: str) -> None:
    """An enqueue with a unique key looks for the live job holding it: on MariaDB through the
    generated column's unique index, not a scan of every live job (5,000 among 50,000)."""
    db = Database(mariadb_url)
    keyed = FILL.replace("created_at, updated_at, finished_at)", "created_at, updated_at, finished_at, unique_key)")
    keyed = keyed.replace("{stamp}, {stamp}, {stamp}\n", "{stamp}, {stamp}, {stamp}, CONCAT('key-', n)\n")
    with db.transaction() as conn:
        conn.execute(
            text(
                keyed.format(
                    finished=45_000, numbers="(SELECT seq AS n FROM seq_1_to_50000) AS numbers", stamp="'2020-01-01'"
                )
            )
        )
        conn.execute(text("ANALYZE TABLE jobsup_job"))
    stmt = Statements(db.dialect).live_with_key
    sql = str(stmt.params(p_key="key-45042").compile(db.engine, compile_kwargs={"literal_binds": True}))
    with db.read() as conn:
        rows = [dict(row._mapping) for row in conn.execute(text("EXPLAIN " + sql))]
        found = conn.execute(stmt, {"p_key": "key-45042"}).scalars().all()
    assert [row["key"] for row in rows] == ["jobsup_job_unique_key"], rows
    assert int(rows[0]["rows"]) == 1, rows
    assert len(found) == 1
