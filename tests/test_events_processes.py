"""The outbox relay in real `jobsup start` supervisors, against the real RabbitMQ: a broker
out of reach for 10 s loses nothing and a job's events still arrive in order, and two
supervisors relaying at once deliver every event at least once, duplicates by event id.

The outage is a TCP proxy the test owns between the relay and the broker, stopped for 10 s
(new connections refused, open ones cut); the system broker is never restarted, and the
test's consumer reads the broker directly."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

import jobsup

from broker import Exchange, Proxy, by_job
from helpers import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.rabbitmq, pytest.mark.usefixtures("events_on")]
LIFE = ["job.enqueued", "job.started", "job.succeeded"]
OUTAGE = 10.0  # seconds the broker is out of reach: what the test simulates, not a wait for something


def test_the_broker_out_of_reach_for_10s_loses_nothing_and_keeps_each_jobs_order(
    url: str, start: Any, exchange: Exchange, tmp_path: Path
) -> None:
    proxy = Proxy()
    proxy.start()
    client = jobsup.Client(url)
    ids = client.enqueue_many([{"name": "work", "payload": {"seconds": 0.02}} for _ in range(300)])
    supervisor = start("--queue", "default=2", env={"JOBSUP_EVENTS_PUBLISHER": exchange.url(proxy.broker)})
    wait_until(lambda: len(exchange.drain()) >= 350, timeout=60, what="the first events")
    proxy.stop()
    cut = time.monotonic()
    # Jobs enqueued during the outage run to the end while their events wait in the outbox.
    # (Counting the first batch's progress instead raced: under load the relay lagged until
    # every first-batch job had finished before the cut.)
    during = client.enqueue_many([{"name": "work", "payload": {"seconds": 0.02}} for _ in range(50)])
    wait_until(lambda: _succeeded(client, during) == len(during), timeout=60, what="the jobs enqueued in the outage")
    time.sleep(max(0.0, OUTAGE - (time.monotonic() - cut)))
    ids += during
    proxy.start()
    expected = len(LIFE) * len(ids)
    wait_until(
        lambda: (
            len(by_job(exchange.drain())) == len(ids) and sum(map(len, by_job(exchange.received).values())) == expected
        ),
        timeout=120,
        what=lambda: f"{expected} events (got {len(exchange.received)})",
    )
    assert all(types == LIFE for types in by_job(exchange.received).values())
    log = supervisor.output()
    assert re.search(r"events.publish_failed publisher=amqp error='cannot (reach|publish to) the broker", log), log
    assert "events.publish_recovered" in log
    proxy.stop()
    client.close()


def test_two_supervisors_relaying_at_once_deliver_every_event_at_least_once(
    url: str, start: Any, exchange: Exchange
) -> None:
    client = jobsup.Client(url)
    ids = client.enqueue_many([{"name": "work", "payload": {}} for _ in range(400)])
    for _ in range(2):
        start("--queue", "default=2", env={"JOBSUP_EVENTS_PUBLISHER": exchange.url()})
    expected = len(LIFE) * len(ids)
    wait_until(
        lambda: len({event["id"] for event in exchange.drain()}) >= expected,
        timeout=120,
        what=lambda: f"{expected} distinct events (got {len(exchange.received)})",
    )
    received = exchange.received
    first: dict[str, dict[str, Any]] = {}
    for event in received:
        assert event["_amqp"]["message_id"] == event["id"]
        assert first.setdefault(event["id"], event) == event  # a duplicate is the same event, by id
    assert len(first) == expected
    assert by_job(received) == {job_id: LIFE for job_id in ids}
    client.close()


def _succeeded(client: jobsup.Client, ids: list[int]) -> int:
    wanted = set(ids)
    return sum(1 for job in client.list_jobs(status="succeeded", limit=10_000) if job.id in wanted)
