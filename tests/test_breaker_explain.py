"""The claim with the circuit-breaker part still seeks the claim index with no sort, and the
part's subqueries on jobsup_breaker run once per claim, not once per job row."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import event, text
from test_explain import FINISHED, NOW, PENDING, fill

from jobsup.store import claim as claim_parts
from jobsup.store.claim import claim_params
from jobsup.store.database import Database

from helpers import plan_nodes

OPEN_BREAKERS = """
INSERT INTO jobsup_breaker (name, state, failures, opened_at, reopen_at, probe_job_id, changed_at)
VALUES ('other-open', 'open', 5, {stamp}, {stamp}, NULL, {stamp}),
       ('other-probing', 'half_open', 5, {stamp}, {stamp}, 7, {stamp})
"""


def test_the_breaker_part_is_in_every_claim() -> None:
    assert "breaker_closed" in [part.name for part in claim_parts._PARTS]


def test_sqlite_claim_with_the_breaker_part_seeks_the_index_and_runs_it_once(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    total = FINISHED + PENDING
    numbers = f"(WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {total}) SELECT n FROM s)"
    stamp = "'2020-01-01 00:00:00.000000'"
    fill(db, numbers, stamp)
    with db.transaction() as conn:
        conn.execute(text(OPEN_BREAKERS.format(stamp=stamp)))
        conn.execute(text("ANALYZE"))
    params = claim_params(db.dialect, queue="default", owner="w", limit=10, lease=60.0, now=NOW)
    stmt = db.dialect.candidates_statement.params(params)  # type: ignore[attr-defined]
    sql = str(stmt.compile(db.engine, compile_kwargs={"literal_binds": True}))
    assert "jobsup_breaker" in sql
    with db.read() as conn:
        plan = " | ".join(row[3] for row in conn.execute(text("EXPLAIN QUERY PLAN " + sql)))
    assert "USING INDEX jobsup_job_claim" in plan or "USING COVERING INDEX jobsup_job_claim" in plan, plan
    assert "TEMP B-TREE" not in plan, plan
    assert "LIST SUBQUERY" in plan and "CORRELATED" not in plan, plan  # built once, probed per row
    assert len(db.dialect.claim_candidates(db, params)) == 10  # type: ignore[attr-defined]


@pytest.mark.postgres
def test_postgres_claim_with_the_breaker_part_seeks_the_index_and_runs_it_once(postgres_url: str) -> None:
    db = Database(postgres_url)
    fill(db, f"generate_series(1, {FINISHED + PENDING}) AS n", "'2020-01-01'::timestamptz")
    with db.transaction() as conn:
        conn.execute(text(OPEN_BREAKERS.format(stamp="now()")))
    with db.read() as conn:
        conn.execute(text("VACUUM ANALYZE jobsup_job"))
        conn.execute(text("ANALYZE jobsup_breaker"))
    stmt = db.dialect.claim_statement  # type: ignore[attr-defined]
    params = claim_params(db.dialect, queue="default", owner="w", limit=10, lease=60.0, now=None)

    def explain(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> Any:
        return "EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters

    with db.transaction() as conn:  # EXPLAIN ANALYZE claims: rolled back below
        event.listen(conn, "before_cursor_execute", explain, retval=True)
        raw = conn.execute(stmt, params).scalar_one()
        event.remove(conn, "before_cursor_execute", explain)
        conn.rollback()
    plan = (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]
    shown = json.dumps(plan, indent=1)
    [candidates] = [n for n in plan_nodes(plan) if n.get("Subplan Name") == "CTE candidates"]
    nodes = plan_nodes(candidates)
    assert any(n.get("Index Name") == "jobsup_job_claim" for n in nodes), shown
    assert not any(n["Node Type"] in ("Sort", "Incremental Sort") for n in nodes), shown
    breaker_scans = [n for n in plan_nodes(plan) if n.get("Relation Name") == "jobsup_breaker"]
    assert len(breaker_scans) == 2, shown
    # Hashed subplans: each read at most once per claim (the probe list not at all while no
    # candidate belongs to a held-back type), not once per job row.
    assert all(n["Actual Loops"] <= 1 for n in breaker_scans), shown
    assert "hashed SubPlan" in shown, shown
    assert len(db.dialect.claim(db, params, None)) == 10
