"""A caller's open transaction that enqueued a job of a concurrency key holds the key's row
until it commits. It may delay that key's hand-over; it must never cost another job its
lease, nor stall the supervisor (concurrency review, defect 6: the settle waited for the key
holding its job's row, the worker's one-statement renewal of all its leases waited on that
row, and the worker ended itself, its bystanders charged `lease_expired`). Real `jobsup
start` supervisors on the servers with row locks."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine

import jobsup

from harness import history, started_by, status_of
from helpers import wait_until

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("server", ["postgres_url", "mariadb_url"])
def test_a_caller_holding_a_key_delays_its_hand_over_and_costs_no_lease(
    request: pytest.FixtureRequest, server: str, record: Path, tmp_path: Path
) -> None:
    from harness import Supervisor

    url = str(request.getfixturevalue(server))
    client = jobsup.Client(url)
    bystanders = [client.enqueue("work", {"seconds": 14}, max_attempts=1) for _ in range(2)]
    keyed = client.enqueue("keyed-one", {"seconds": 0.5}, concurrency_key="held")
    supervisor = Supervisor(
        url, record, tmp_path / "supervisor.log", "--queue", "default=1:3", lease="8s", heartbeat="2s"
    )
    try:
        started_by(record, keyed)
        engine = create_engine(client.database.url)
        with engine.begin() as conn:
            later = client.enqueue("keyed-one", {}, concurrency_key="held", connection=conn)
            time.sleep(12)  # the scenario, not a wait for something: the caller keeps it open past a lease
        engine.dispose()
        for job_id in (keyed, later, *bystanders):
            wait_until(lambda job_id=job_id: status_of(client, job_id) == "succeeded", timeout=60, what=f"job {job_id}")
        assert history(client, keyed) == [(1, "succeeded")]
        for job_id in bystanders:
            assert history(client, job_id) == [(1, "succeeded")]
        assert "worker.ending" not in supervisor.output()
    finally:
        supervisor.stop()
        client.close()
