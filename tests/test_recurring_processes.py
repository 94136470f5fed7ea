"""A real `jobsup start` with a schedule that must not overlap: while its job runs, a due
slot is skipped, counted in the database and in `jobsup_recurring_skipped_total`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

import jobsup
from jobsup.store.recurring import SchedulePolicy
from jobsup.store.schema import job, recurring_job

from harness import Supervisor, port_of, records, sample, scrape
from helpers import wait_until

pytestmark = pytest.mark.slow


def test_a_slot_due_while_the_last_run_is_running_is_skipped(url: str, tmp_path: Path) -> None:
    record = tmp_path / "record"
    record.mkdir()
    client = jobsup.Client(url)
    past = datetime.now(UTC) - timedelta(minutes=10)  # due at once
    client.store.recurring.recurring_upsert(
        name="slow-report",
        job_name="work",
        cron="* * * * *",
        timezone="UTC",
        payload='{"seconds": 60, "return_on_cancel": true}',
        queue="default",
        priority=0,
        how=SchedulePolicy(overlap="skip"),
        now=past,
    )
    supervisor = Supervisor(url, record, tmp_path / "supervisor.log", "--queue", "default=2")
    try:
        port = port_of(supervisor)

        def fired() -> list[int]:
            with client.database.read() as conn:
                return list(conn.execute(select(job.c.id).where(job.c.recurring_name == "slow-report")).scalars())

        [first] = wait_until(fired, timeout=60, what="the first slot to fire")
        wait_until(lambda: [e for e in records(record, first) if e["what"] == "start"], timeout=60, what="it to start")
        with client.database.statement() as conn:  # make the next slot due now, as a minute passing would
            conn.execute(update(recurring_job).where(recurring_job.c.name == "slow-report").values(next_run_at=past))

        def skipped() -> int:
            found = client.store.recurring.recurring_get("slow-report")
            return 0 if found is None else found.skipped

        wait_until(lambda: skipped() >= 1, timeout=60, what="the overlapping slot to be skipped")
        assert fired() == [first]  # a worker was free: only the overlap check held the slot back
        wait_until(
            lambda: (
                sample(scrape(port)[1], "jobsup_recurring_skipped_total", schedule="slow-report", reason="overlap") >= 1
            ),
            timeout=30,
            what="the skip to be counted",
        )
        assert client.cancel(first)
    finally:
        supervisor.stop()
        client.close()
