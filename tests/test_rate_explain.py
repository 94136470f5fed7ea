"""A rate-limited claim's own statements (the window's lock and starts, the put-backs) are
index seeks on SQLite and PostgreSQL: every statement such a claim runs, captured, then
explained against tables of 200,000 jobs and 20,000 start times of other keys."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event, text
from test_explain import fill

import jobsup
from jobsup.store.database import Database

from helpers import claim, plan_nodes

NOW = datetime(2030, 1, 1, tzinfo=UTC)
OTHER_KEYS = """
INSERT INTO jobsup_rate_start (key, slot, started_at)
SELECT 'other-' || (n / 100), n % 100, {stamp} FROM {numbers}
"""


@jobsup.job("rate-explained", queue="rate-explain", rate="2/1m")
def explained(ctx: jobsup.JobContext, payload: Any) -> None: ...


def captured_claim(db: Database) -> list[tuple[str, Any]]:
    """The statements of a claim that starts two jobs and puts three back."""
    client = jobsup.Client(database=db)
    for _ in range(5):
        client.enqueue("rate-explained", run_at=NOW)
    seen: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        seen.append((statement, parameters))

    engines = {id(engine): engine for engine in (db.engine, db.single)}.values()  # one on SQLite
    for engine in engines:
        event.listen(engine, "before_cursor_execute", capture)
    assert len(claim(client, queue="rate-explain", limit=5, now=NOW)) == 2
    for engine in engines:
        event.remove(engine, "before_cursor_execute", capture)
    rate_statements = [s for s in seen if "jobsup_rate" in s[0] or "rate_turn" in s[0]]
    assert len(rate_statements) >= 5, seen  # lock, starts, turns, start writes, put-backs
    return [s for s in seen if not s[0].lstrip().upper().startswith(("SAVEPOINT", "RELEASE", "ROLLBACK"))]


def test_sqlite_rate_statements_seek(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    numbers = "(WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {count}) SELECT n FROM s)"
    stamp = "'2020-01-01 00:00:00.000000'"
    fill(db, numbers.format(count=201_000), stamp)
    with db.transaction() as conn:
        conn.execute(text(OTHER_KEYS.format(stamp=stamp, numbers=numbers.format(count=20_000))))
        conn.execute(text("ANALYZE"))
    for statement, parameters in captured_claim(db):
        if "jobsup_rate" not in statement and "rate_turn" not in statement:
            continue
        with db.read() as conn:
            plan = " | ".join(row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters))
        assert "SCAN jobsup_job" not in plan and "SCAN jobsup_rate" not in plan, (statement, plan)


@pytest.mark.postgres
def test_postgres_rate_statements_seek(postgres_url: str) -> None:
    db = Database(postgres_url)
    fill(db, "generate_series(1, 201000) AS n", "'2020-01-01'::timestamptz")
    with db.transaction() as conn:
        conn.execute(text(OTHER_KEYS.format(stamp="now()", numbers="generate_series(1, 20000) AS n")))
    with db.read() as conn:
        conn.execute(text("VACUUM ANALYZE jobsup_job"))
        conn.execute(text("ANALYZE jobsup_rate_start"))
    statements = captured_claim(db)
    with db.engine.connect() as conn:
        for statement, parameters in statements:
            if "jobsup_rate" not in statement and "rate_turn" not in statement:
                continue
            raw = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, parameters).scalar_one()
            plan = (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]
            scans = [n for n in plan_nodes(plan) if n["Node Type"] == "Seq Scan"]
            assert not [n for n in scans if n.get("Relation Name") in ("jobsup_job", "jobsup_rate_start")], (
                statement,
                json.dumps(plan, indent=1),
            )
        conn.rollback()
