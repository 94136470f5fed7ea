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
    thread ended the worker for a job whose call had already returned. In a pool the same
    befell a job beside it that returned while the main thread was held (`returner`)."""
    from sqlalchemy import select

    from jobsup.store.schema import job

    from harness import Supervisor

    url = str(request.getfixturevalue(server))
    client = jobsup.Client(url)
    bystanders = [client.enqueue("work", {"seconds": 14}, max_attempts=1) for _ in range(2)]
    keyed = client.enqueue("keyed-one", {"seconds": 3, "fail": True}, concurrency_key="held", timeout="5s")
    returner = client.enqueue("work", {"seconds": 4}, max_attempts=1, timeout="6s")
    engine = create_engine(client.database.url)
    supervisor = Supervisor(
        url, record, tmp_path / "supervisor.log", "--queue", "default=1:4", lease="8s", heartbeat="2s"
    )
    try:
        for job_id in (keyed, returner, *bystanders):
            started_by(record, job_id)
        with engine.begin() as conn:
            later = client.enqueue("keyed-one", {}, concurrency_key="held", connection=conn)
            # The key was full when this took its row: the keyed job's failure, written after
            # this, waits for it (not a race this test could lose unseen).
            assert conn.execute(select(job.c.status).where(job.c.id == later)).scalar() == "waiting"
            time.sleep(12)  # the scenario, not a wait for something: the caller keeps it open past both timeouts
        for job_id in (later, returner, *bystanders):
            wait_until(lambda job_id=job_id: status_of(client, job_id) == "succeeded", timeout=60, what=f"job {job_id}")
        assert history(client, keyed) == [(1, "failed")]
        for job_id in (returner, *bystanders):
            assert history(client, job_id) == [(1, "succeeded")]
        assert "worker.ending" not in supervisor.output()
        assert "operation=settle" in supervisor.output() and "retry_in=0.5" in supervisor.output()  # it did wait
    finally:
        engine.dispose()
        supervisor.stop()
        client.close()


@jobsup.job("keyed-cron", concurrency=1)
def keyed_cron(ctx: jobsup.JobContext, payload: object) -> None:
    """A type whose jobs share its own key ("keyed-cron")."""


@pytest.mark.parametrize("server", ["postgres_url", "mariadb_url"])
def test_a_schedule_whose_key_is_held_holds_back_no_other_schedule(request: pytest.FixtureRequest, server: str) -> None:
    """A supervisor's cron tick gives up on a schedule whose job's key a caller holds, and
    fires the schedules due behind it in the same tick (it gave up its whole budget to the
    wait, and nothing else fired while the key stayed held)."""
    from datetime import UTC, datetime, timedelta

    from jobsup.store.store import Store
    from jobsup.supervisor.recurring import CronTick

    client = jobsup.Client(str(request.getfixturevalue(server)))
    supervisor_store = Store(client.database, holds_leases=True)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for name, job_name, cron in (("held", "keyed-cron", "* * * * *"), ("behind", "a", "0 * * * *")):
        supervisor_store.recurring.recurring_upsert(
            name=name, job_name=job_name, cron=cron, timezone="UTC", payload="null", queue="default", priority=0, now=t0
        )
    engine = create_engine(client.database.url)
    try:
        due = t0 + timedelta(hours=1, seconds=30)  # both due, the held one first
        with engine.begin() as conn:
            client.enqueue("keyed-cron", connection=conn)
            assert CronTick(supervisor_store).run_once(now=due) == 1
            assert [j.name for j in client.list_jobs()] == ["a"]
        assert CronTick(supervisor_store).run_once(now=due) == 1  # free again: it fires
        assert sorted(j.name for j in client.list_jobs()) == ["a", "keyed-cron", "keyed-cron"]
    finally:
        engine.dispose()
        client.close()
