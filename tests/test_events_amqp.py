"""Events through the outbox to the real RabbitMQ, in process: every event of many jobs
arrives once the relay ran, in order per job, and none of a rolled-back enqueue."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine

import jobsup
from jobsup.errors import ConfigurationError
from jobsup.events.publishers import publisher_for
from jobsup.observe import events as observed
from jobsup.settings import Settings
from jobsup.store.outbox import Outbox
from jobsup.supervisor.relay import Relay

from broker import Exchange, by_job
from helpers import claim, succeed, wait_until

pytestmark = [pytest.mark.rabbitmq, pytest.mark.usefixtures("events_on")]
JOBS = 2000  # 6,000 events; the relay waits for each confirm, about 150 a second beside the suite


@pytest.fixture
def relay(client: jobsup.Client, exchange: Exchange) -> Iterator[Relay]:
    started = Relay(Outbox(client.database), publisher_for(exchange.url()), "relay-test")
    started.start()
    yield started
    started.stop()


@pytest.mark.slow
def test_every_event_of_2000_jobs_arrives_and_none_of_a_rolled_back_enqueue(
    client: jobsup.Client, url: str, exchange: Exchange, relay: Relay
) -> None:
    engine = create_engine(url)
    with engine.connect() as conn:
        transaction = conn.begin()
        # Another job type: SQLite hands the rolled-back id to the next job.
        client.enqueue("compete", {"n": -1}, connection=conn)
        transaction.rollback()
    engine.dispose()
    ids = client.enqueue_many([{"name": "work", "payload": {"n": i}} for i in range(JOBS)])
    while claimed := claim(client, limit=250):
        succeed(client, claimed)
    expected = 3 * JOBS
    received = wait_until(
        lambda: len(exchange.drain()) >= expected and exchange.received,
        timeout=180,
        what=lambda: f"{expected} events (got {len(exchange.received)})",
    )
    assert len({event["id"] for event in received}) == len(received) == expected  # a single relay: no duplicates
    order = by_job(received)
    assert set(order) == set(ids) and not [event for event in received if event["name"] == "compete"]
    assert all(types == ["job.enqueued", "job.started", "job.succeeded"] for types in order.values())
    sample = next(event for event in received if event["type"] == "job.succeeded")
    assert sample["v"] == 1 and sample["name"] == "work" and sample["queue"] == "default" and sample["attempt"] == 1
    assert sample["_amqp"] == {"routing_key": "jobsup.job.succeeded", "message_id": sample["id"], "delivery_mode": 2}
    # Delivered rows are deleted, after the broker's confirm: the last batch's delete may
    # still be on its way when its messages have arrived.
    box = Outbox(client.database)
    wait_until(lambda: box.depth()[0] == 0, timeout=30, what=lambda: f"an empty outbox (depth {box.depth()[0]})")


def test_a_dead_letter_says_how_its_attempts_ended_without_payload_values(
    client: jobsup.Client, exchange: Exchange, relay: Relay
) -> None:
    job_id = client.enqueue("work", {"password": "hunter2"}, max_attempts=2)
    for _ in range(2):
        (job,) = wait_until(lambda: claim(client), timeout=10, what="the job due again")
        client.store.transitions.fail(_failure(job, "ValueError: hunter2 is wrong"))
    received = wait_until(lambda: len(exchange.drain()) >= 7 and exchange.received, timeout=30, what="7 events")
    assert by_job(received)[job_id] == [
        "job.enqueued",
        *("job.started", "job.failed", "job.retrying"),
        *("job.started", "job.failed", "job.dead_lettered"),
    ]
    dead = received[-1]
    assert dead["outcome"] == "failed" and dead["error_type"] == "ValueError" and dead["attempt"] == 2
    assert "hunter2" not in str(received)


def _failure(job: object, error: str) -> object:
    from jobsup.store.rows import FAILED, Outcome

    return Outcome(job.held, FAILED, error, 0.0)  # type: ignore[attr-defined]


def test_a_broker_refusing_the_credentials_is_one_clear_line_and_the_relay_keeps_trying(
    client: jobsup.Client, exchange: Exchange
) -> None:
    client.enqueue("work", {})
    seen: list[tuple[str, dict[str, object]]] = []
    subscriber = observed.subscribe(lambda kind, fields: seen.append((kind, dict(fields))))
    try:
        wrong = publisher_for(exchange.url("amqp://guest:not-the-password@127.0.0.1:5672/%2F"))
        relay = Relay(Outbox(client.database), wrong, "relay-test")
        assert relay.run_once() == 0 and relay.run_once() == 0  # tried again, nothing lost
    finally:
        observed.unsubscribe(subscriber)
    failures = [fields for kind, fields in seen if kind == "events.publish_failed"]
    assert len(failures) == 2 and [bool(f.get("quiet")) for f in failures] == [False, True]  # logged once
    error = str(failures[0]["error"])
    assert "refused the credentials" in error and "host 127.0.0.1, port 5672" in error
    assert "not-the-password" not in error and "guest:***@" in error
    assert Outbox(client.database).depth()[0] == 1


@pytest.mark.parametrize(
    "given",
    ["rabbit://host", "amqp://", "amqp://host:notaport/", "amqp://host/?routing_key=jobsup.{nope}", "http://h/x"],
)
def test_a_publisher_url_that_cannot_be_used_names_the_setting(given: str) -> None:
    with pytest.raises(ConfigurationError, match=r"events_(publisher|secret)"):
        Settings(events_publisher=given)
