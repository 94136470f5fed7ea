"""The overview stays cheap on a big table: every statement it sends about jobs goes through
an index (SQLite's query plan shows no full scan of jobsup_job), so its cost follows the live
and recent rows, not the million finished ones retention keeps."""

from __future__ import annotations

import re
from typing import Any

import pytest
from sqlalchemy import event, text

import jobsup


@pytest.mark.parametrize(
    "read",
    [
        lambda client: client.queues.overview(),
        lambda client: client.jobs_page(name="no-such-job"),
        lambda client: client.jobs_page(queue="default", status="pending"),
        lambda client: client.jobs_page(queue="default", status="retrying"),
        lambda client: client.queues.recent_failures(limit=100),
        lambda client: client.queues.list(),
    ],
    ids=["overview", "jobs-by-name", "jobs-by-queue-and-status", "jobs-retrying", "recent-failures", "queues"],
)
def test_every_job_statement_of_the_overview_uses_an_index(sqlite_url: str, read: Any) -> None:
    client = jobsup.Client(sqlite_url)
    client.enqueue("work")
    read(client)  # the schema check and connection setup out of the way
    sent: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if "jobsup_job" in statement and statement.lstrip().upper().startswith("SELECT"):
            sent.append((statement, parameters))

    engine = client.database.engine
    event.listen(engine, "before_cursor_execute", capture)
    try:
        read(client)
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    assert len(sent) >= 2
    with engine.connect() as conn:
        for statement, parameters in sent:
            plan = [row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)]
            scans = [step for step in plan if re.match(r"SCAN jobsup_job(?: |$)", step) and "USING" not in step]
            assert scans == [], f"{statement}\n{plan}"
    with engine.connect() as conn:  # the check can see a full scan
        plan = [
            row[3] for row in conn.execute(text("EXPLAIN QUERY PLAN SELECT count(*) FROM jobsup_job WHERE name = 'x'"))
        ]
        assert any(re.match(r"SCAN jobsup_job(?: |$)", step) and "USING" not in step for step in plan)
    client.close()
