"""The retention sweeps' reads seek an index, oldest first, with no sort, among many finished
jobs: a type's own sweep seeks `jobsup_job_finished_name` (it never reads past the other
types' jobs), and the settings' sweep, which leaves out the types kept longer, reads
`jobsup_job_finished` from its floor on."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Select, text

from jobsup.store.database import Database
from jobsup.store.reads import finished_statement

from helpers import plan_nodes

KEPT, OTHERS, RARE = 50_000, 150_000, 200  # a type kept forever, the rest, and a type kept an hour
NOW = datetime(2030, 1, 1, tzinfo=UTC)
SINCE = datetime(2020, 3, 1, tzinfo=UTC)  # after the kept type's jobs: the floor of a sweep that read past them

# The kept type's jobs are the oldest; of the others, one in a hundred is past its age, the
# rest finished after NOW (as most finished jobs are younger than their retention age).
FILL = """
INSERT INTO jobsup_job (name, queue, priority, payload, status, run_at, attempts, max_attempts,
                        created_at, updated_at, finished_at)
SELECT CASE WHEN n <= {kept} THEN 'kept' WHEN n <= {kept} + {rare} THEN 'rare' ELSE 'noop' END,
       'default', 0, 'null', 'succeeded', {old}, 1, 5, {old}, {old},
       CASE WHEN n <= {kept} THEN {old} WHEN n % 100 = 0 THEN {past} ELSE {young} END
FROM {numbers}
"""


def fill(db: Database, numbers: str, stamp: str) -> None:
    """`stamp` makes a literal timestamp of a date, in the database's SQL."""
    sql = FILL.format(
        kept=KEPT,
        rare=RARE,
        numbers=numbers,
        old=stamp.format("2020-01-01"),
        past=stamp.format("2020-06-01"),
        young=stamp.format("2030-06-01"),
    )
    with db.transaction() as conn:
        conn.execute(text(sql))


def sweeps(db: Database) -> dict[str, str]:
    """The SQL of each sweep's read, its parameters inlined (as EXPLAIN takes it)."""
    own, settings = 3600.0, 7 * 86400.0
    statements = {
        "own": (finished_statement(db.dialect, "succeeded", own, 1000, name="rare"), own),
        "settings": (
            finished_statement(db.dialect, "succeeded", settings, 1000, excluding=["kept"], since=SINCE),
            settings,
        ),
    }
    return {which: literal(db, stmt, age) for which, (stmt, age) in statements.items()}


def literal(db: Database, stmt: Select[Any], age: float) -> str:
    params = db.dialect.clock_params(NOW, cutoff=-age)
    return str(stmt.params(params).compile(db.engine, compile_kwargs={"literal_binds": True}))


def test_sqlite_sweeps_seek_their_index_without_sorting(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    total = KEPT + OTHERS
    numbers = f"(WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {total}) SELECT n FROM s)"
    fill(db, numbers, "'{} 00:00:00.000000'")
    with db.transaction() as conn:
        conn.execute(text("ANALYZE"))
    expected = {"own": "jobsup_job_finished_name", "settings": "jobsup_job_finished"}
    for which, sql in sweeps(db).items():
        with db.read() as conn:
            plan = " | ".join(row[3] for row in conn.execute(text("EXPLAIN QUERY PLAN " + sql)))
        assert f"USING INDEX {expected[which]} (" in plan, (which, plan)
        assert "TEMP B-TREE" not in plan, (which, plan)


@pytest.mark.postgres
def test_postgres_sweeps_seek_their_index_without_sorting(postgres_url: str) -> None:
    db = Database(postgres_url)
    fill(db, f"generate_series(1, {KEPT + OTHERS}) AS n", "'{}'::timestamptz")
    with db.read() as conn:
        conn.execute(text("VACUUM ANALYZE jobsup_job"))
    expected = {"own": "jobsup_job_finished_name", "settings": "jobsup_job_finished"}
    for which, sql in sweeps(db).items():
        with db.read() as conn:
            raw = conn.execute(text("EXPLAIN (FORMAT JSON) " + sql)).scalar_one()
        plan = (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]
        nodes = plan_nodes(plan)
        scans = [n.get("Index Name") for n in nodes if n.get("Relation Name") == "jobsup_job"]
        assert scans == [expected[which]], (which, json.dumps(plan, indent=1))
        assert not any(n["Node Type"] in ("Sort", "Incremental Sort") for n in nodes), json.dumps(plan, indent=1)
        if which == "settings":  # it seeks its floor: past the kept type's 50,000 jobs, not through them
            assert "finished_at >=" in nodes[-1]["Index Cond"], json.dumps(plan, indent=1)


@pytest.mark.mariadb
def test_mariadb_sweeps_seek_their_index_without_sorting(mariadb_url: str) -> None:
    db = Database(mariadb_url)
    fill(db, f"(SELECT seq AS n FROM seq_1_to_{KEPT + OTHERS}) AS numbers", "'{}'")
    with db.read() as conn:
        conn.execute(text("ANALYZE TABLE jobsup_job"))
    expected = {"own": "jobsup_job_finished_name", "settings": "jobsup_job_finished"}
    for which, sql in sweeps(db).items():
        with db.read() as conn:
            rows = [dict(row._mapping) for row in conn.execute(text("EXPLAIN " + sql))]
        assert [row["key"] for row in rows] == [expected[which]], (which, rows)
        # A range: the type's jobs, or those from the floor on, past the kept type's 50,000 jobs.
        assert rows[0]["type"] == "range" and int(rows[0]["rows"]) < KEPT, (which, rows)
        assert "filesort" not in (rows[0]["Extra"] or ""), (which, rows)
