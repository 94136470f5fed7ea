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


@pytest.mark.parametrize("server", ["postgres_url", "mariadb_url"])
def test_a_caller_holding_a_key_delays_a_trigger_of_it_and_costs_no_lease(
    request: pytest.FixtureRequest, server: str, record: Path, tmp_path: Path
) -> None:
    """The same, for a keyed job that a settle inserts: a trigger's (a batch callback's is
    inserted by the same code) admission waited for the key without a bound."""
    from harness import Supervisor

    url = str(request.getfixturevalue(server))
    client = jobsup.Client(url)
    bystanders = [client.enqueue("work", {"seconds": 14}, max_attempts=1) for _ in range(2)]
    engine = create_engine(client.database.url)
    supervisor = Supervisor(
        url, record, tmp_path / "supervisor.log", "--queue", "default=1:3", lease="8s", heartbeat="2s"
    )
    try:
        for job_id in bystanders:
            started_by(record, job_id)
        with engine.begin() as conn:
            held = client.enqueue("keyed-one", {}, connection=conn)  # the type's own key: "keyed-one"
            parent = client.enqueue("work", {"seconds": 0.5}, then=[jobsup.Trigger("keyed-one", on="succeeded")])
            started_by(record, parent)
            time.sleep(12)  # the scenario, not a wait for something: the caller keeps it open past a lease
        for job_id in (parent, held, *bystanders):
            wait_until(lambda job_id=job_id: status_of(client, job_id) == "succeeded", timeout=60, what=f"job {job_id}")
        triggered = [j for j in client.list_jobs() if j.name == "keyed-one" and j.id != held]
        assert len(triggered) == 1
        wait_until(lambda: status_of(client, triggered[0].id) == "succeeded", timeout=60, what="the triggered job")
        assert history(client, parent) == [(1, "succeeded")]
        for job_id in bystanders:
            assert history(client, job_id) == [(1, "succeeded")]
        assert "worker.ending" not in supervisor.output()
    finally:
        engine.dispose()
        supervisor.stop()
        client.close()


@pytest.mark.parametrize("server", ["postgres_url", "mariadb_url"])
def test_a_failure_whose_write_waits_for_a_held_key_is_not_timed_out(
    request: pytest.FixtureRequest, server: str, record: Path, tmp_path: Path
) -> None:
    """A failure is written by the main thread while the job is still in the worker's table;
    its write waiting for a key a caller holds outlived the job's timeout, and the lease
    thread ended the worker for a job whose call had already returned."""
    from harness import Supervisor

    url = str(request.getfixturevalue(server))
    client = jobsup.Client(url)
    bystanders = [client.enqueue("work", {"seconds": 14}, max_attempts=1) for _ in range(2)]
    keyed = client.enqueue("keyed-one", {"seconds": 1, "fail": True}, concurrency_key="held", timeout="3s")
    engine = create_engine(client.database.url)
    supervisor = Supervisor(
        url, record, tmp_path / "supervisor.log", "--queue", "default=1:3", lease="8s", heartbeat="2s"
    )
    try:
        for job_id in (keyed, *bystanders):
            started_by(record, job_id)
        with engine.begin() as conn:
            later = client.enqueue("keyed-one", {}, concurrency_key="held", connection=conn)
            time.sleep(12)  # the scenario, not a wait for something: the caller keeps it open past the timeout
        for job_id in (later, *bystanders):
            wait_until(lambda job_id=job_id: status_of(client, job_id) == "succeeded", timeout=60, what=f"job {job_id}")
        assert history(client, keyed) == [(1, "failed")]
        for job_id in bystanders:
            assert history(client, job_id) == [(1, "succeeded")]
        assert "worker.ending" not in supervisor.output()
    finally:
        engine.dispose()
        supervisor.stop()
        client.close()
