"""Rate limits across real competing instances (issue 12, parts 2 and 8): four `jobsup start`
supervisors with eight workers on one database never start more than a key's limit in any
window, by the starts the database recorded, and run each job once; a claim batch does not
let more start than the window counted."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from test_rate_limits import attempt_starts, most_in_a_window

import jobsup

from harness import records, status_of
from helpers import wait_until

pytestmark = pytest.mark.slow


@pytest.mark.many_connections
def test_four_supervisors_never_start_more_than_the_rate(url: str, start: Any, record: Path) -> None:
    client = jobsup.Client(url)
    ids = client.enqueue_many([{"name": "rated-work", "payload": {}} for _ in range(30)])
    for _ in range(4):
        start("--queue", "rated-work=2")
    wait_until(lambda: {status_of(client, job_id) for job_id in ids} == {"succeeded"}, timeout=120, what="all jobs")
    starts = attempt_starts(client, ids)
    assert sorted(job_id for job_id, _ in starts) == ids  # one attempt each: none put back was counted
    assert most_in_a_window([started for _, started in starts], 1.0) == 5  # full rate, never more
    assert all(len([r for r in records(record, job_id) if r["what"] == "start"]) == 1 for job_id in ids)
    client.close()


def test_a_claim_batch_does_not_start_more_than_the_rate(url: str, start: Any, record: Path) -> None:
    """The window counts a start at the claim; with a claim batch the jobs behind a slow one
    would start later than counted, beside the next period's (9 starts in a second for a
    5/s type, before). By the starts the jobs themselves recorded, less a margin for the
    moment between a claim and its job's start."""
    client = jobsup.Client(url)
    ids = [client.enqueue("rated-work", {"seconds": 0.9}, priority=10)]
    ids += client.enqueue_many([{"name": "rated-work", "payload": {}} for _ in range(14)])
    supervisor = start("--queue", "rated-work=1", "--claim-batch", "5", "--poll-interval", "50ms")
    wait_until(lambda: {status_of(client, job_id) for job_id in ids} == {"succeeded"}, timeout=60, what="all jobs")
    started = [datetime.fromtimestamp(r["at"], UTC) for job_id in ids for r in records(record, job_id)]
    assert len(started) == len(ids)
    assert most_in_a_window(started, 1.0 - 0.05) <= 5
    assert "worker.claim_batch_limited" in supervisor.output()
    client.close()
