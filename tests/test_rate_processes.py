"""Rate limits across real competing instances (issue 12, parts 2 and 8): four `jobsup start`
supervisors with eight workers on one database never start more than a key's limit in any
window, by the starts the database recorded, and run each job once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_rate_limits import attempt_starts, most_in_a_window

import jobsup

from harness import records, status_of
from helpers import wait_until

pytestmark = pytest.mark.slow


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
