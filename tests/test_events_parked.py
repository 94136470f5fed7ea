"""Events the destination refuses for good are parked, not retried forever, and an operator
lists, retries or discards them; a destination that is down parks nothing.

A real local HTTP server plays the webhook's receiver; the relay runs in the test's process,
one turn at a time, against the real database.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from sqlalchemy import select

import jobsup
from jobsup.errors import BadInput, ConfigurationError
from jobsup.events.publishers import publisher_for
from jobsup.settings import Settings
from jobsup.store.outbox import Outbox
from jobsup.store.schema import outbox
from jobsup.supervisor.relay import Relay

from helpers import run_jobsup, wait_until
from webhelpers import OPERATOR, READER, web

SECRET = "s3cret-for-the-parked-tests-0123456789"
HOOK_PATH = "/services/T0001/B0002/XyZsEcReTpAtHtOkEn"  # where Slack-style hooks carry their secret
API = "/api/v1"


@dataclass
class Receiver:
    """What the test's webhook answers: `status` for every event, except `refuse`'s event
    ids (422); records the events it took."""

    status: int = 204
    refuse: set[str] = field(default_factory=set)
    fail: set[str] = field(default_factory=set)  # answered 500, as if the receiver were down
    got: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            event = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status = 422 if event["id"] in state.refuse else 500 if event["id"] in state.fail else state.status
            if status == 204:
                state.got.append(event)
            self.send_response(status)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield state, f"http://127.0.0.1:{server.server_port}{HOOK_PATH}"
    server.shutdown()
    server.server_close()


def _relay(client: jobsup.Client, url: str) -> Relay:
    return Relay(Outbox(client.database), publisher_for(url, secret=SECRET, timeout=5), "relay-test")


def _first_event_of(client: jobsup.Client, job_id: int) -> str:
    claimed = Outbox(client.database).claim("peek", limit=100, lease=60)
    Outbox(client.database).release("peek", [p.id for p in claimed])
    (pending,) = [p for p in claimed if p.job_id == job_id]
    return str(json.loads(pending.payload)["id"])


@pytest.mark.usefixtures("events_on")
def test_a_refused_event_is_parked_and_holds_back_neither_others_nor_its_jobs_later_events(
    client: jobsup.Client, receiver: tuple[Receiver, str]
) -> None:
    state, url = receiver
    refused, other = client.enqueue("work", {}), client.enqueue("work", {})
    state.refuse.add(_first_event_of(client, refused))
    relay = _relay(client, url)
    assert relay.run_once() == 1  # the other job's event; the refused one parked, not retried
    assert relay.backoff == 0
    client.cancel(refused)  # a later event of the parked event's job goes out on its own
    assert relay.run_once() == 1
    assert [(e["job"], e["type"]) for e in state.got] == [(other, "job.enqueued"), (refused, "job.cancelled")]

    (parked,) = client.events.parked()
    assert parked["job_id"] == refused and parked["type"] == "job.enqueued" and parked["attempts"] == 1
    assert "answered 422" in parked["last_error"] and parked["parked_at"] is not None
    assert Outbox(client.database).depth()[0::2] == (0, 1)  # none waiting, one parked
    assert relay.run_once() == 0 and len(state.got) == 2  # nobody takes a parked event

    state.refuse.clear()  # the receiver is fixed: the operator retries it
    assert client.events.retry([parked["id"]], actor="alice") == [parked["id"]]
    assert relay.run_once() == 1
    assert state.got[-1]["type"] == "job.enqueued" and state.got[-1]["job"] == refused
    assert client.events.parked() == [] and Outbox(client.database).depth()[0::2] == (0, 0)
    (entry,) = client.audit.list(action="events.retry")
    assert entry.actor == "alice" and entry.outcome == "ok" and entry.detail == {"chosen": [parked["id"]], "count": 1}


@pytest.mark.usefixtures("events_on")
def test_a_destination_that_is_down_parks_nothing_and_counts_the_tries(
    client: jobsup.Client, receiver: tuple[Receiver, str]
) -> None:
    state, url = receiver
    for status in (503, 404, 401):  # a receiver down, or misconfigured: every event alike
        job_id = client.enqueue("work", {})
        state.status = status
        relay = _relay(client, url)
        assert relay.run_once() == 0 and relay.backoff > 0
        assert client.events.parked() == []
        state.status = 204
        assert relay.run_once() == 1 and state.got[-1]["job"] == job_id
    assert client.audit.list(action="events.") == []  # the relay's own tries are no operator's actions


@pytest.mark.usefixtures("events_on")
def test_the_head_events_failed_tries_are_counted_on_its_row(
    client: jobsup.Client, receiver: tuple[Receiver, str]
) -> None:
    state, url = receiver
    client.enqueue("work", {})
    state.status = 500
    relay = _relay(client, url)
    assert relay.run_once() == 0
    assert relay.run_once() == 0
    with client.database.read() as conn:
        row = conn.execute(select(outbox.c.attempts, outbox.c.last_error, outbox.c.parked_at)).one()
    assert row.attempts == 2 and "answered 500" in row.last_error and row.parked_at is None


@pytest.mark.usefixtures("events_on")
def test_the_operator_commands_list_retry_and_discard_parked_events(
    url: str, client: jobsup.Client, receiver: tuple[Receiver, str]
) -> None:
    state, hook = receiver
    jobs = [client.enqueue("work", {}) for _ in range(3)]
    state.refuse.update(_first_event_of(client, job_id) for job_id in jobs)
    assert _relay(client, hook).run_once() == 0
    ids = [row["id"] for row in client.events.parked()]
    assert len(ids) == 3

    listed = run_jobsup("events", "parked", "--database-url", url)
    assert listed.returncode == 0 and all(str(job_id) in listed.stdout for job_id in jobs), listed.stderr
    as_json = json.loads(run_jobsup("events", "parked", "--json", "--database-url", url).stdout)
    assert [row["id"] for row in as_json] == ids and as_json[0]["attempts"] == 1

    discarded = run_jobsup("events", "discard", str(ids[0]), "--actor", "bob", "--database-url", url)
    assert discarded.returncode == 0 and "discarded 1 events" in discarded.stdout, discarded.stderr
    missing = run_jobsup("events", "retry", str(ids[0]), str(ids[1]), "--database-url", url)
    assert missing.returncode == 1 and f"not parked: {ids[0]}" in missing.stderr
    assert "retried 1 events" in missing.stdout
    both = run_jobsup("events", "retry", "--database-url", url)
    assert both.returncode == 2 and "give event ids or --all" in both.stderr
    everything = run_jobsup("events", "discard", "--all", "--database-url", url)
    assert everything.returncode == 0 and "discarded 1 events" in everything.stdout
    assert client.events.parked() == []
    assert [e.action for e in client.audit.list(action="events.")] == [
        "events.discard",
        "events.retry",
        "events.discard",
    ]
    assert client.audit.list(action="events.discard")[-1].actor == "bob"


def test_event_ids_must_be_whole_numbers(client: jobsup.Client) -> None:
    for wrong in ([], [0], ["7"], [True]):
        with pytest.raises(BadInput, match="event ids must be positive whole numbers"):
            client.events.retry(wrong)  # type: ignore[arg-type]
    assert client.events.discard([12345]) == []


@pytest.mark.usefixtures("events_on")
def test_the_api_lists_retries_and_discards_parked_events_as_the_web_user(
    url: str, client: jobsup.Client, receiver: tuple[Receiver, str]
) -> None:
    state, hook = receiver
    jobs = [client.enqueue("work", {}) for _ in range(2)]
    state.refuse.update(_first_event_of(client, job_id) for job_id in jobs)
    assert _relay(client, hook).run_once() == 0
    with web(url) as http:
        listed = http.get(f"{API}/events/parked", headers=READER).json()
        assert [row["job_id"] for row in listed] == jobs and "answered 422" in listed[0]["last_error"]
        assert "XyZsEcReTpAtHtOkEn" not in json.dumps(listed) and "/services" not in json.dumps(listed)
        first = listed[0]["id"]
        retry = f"{API}/events/parked/retry"
        assert http.post(retry, json={"ids": [first]}, headers=READER).status_code == 403
        assert http.post(retry, json={"ids": []}, headers=OPERATOR).status_code == 400
        assert http.post(retry, json={"ids": [first]}, headers=OPERATOR).json() == {"count": 1}
        assert http.post(f"{API}/events/parked/discard", json={}, headers=OPERATOR).json() == {"count": 1}
        assert http.get(f"{API}/events/parked", headers=READER).json() == []
    actors = {entry.actor for entry in client.audit.list(action="events.")}
    assert len(actors) == 1 and actors.pop().startswith("web:token-")


class Slow:
    """A destination that takes `seconds` to confirm each event (a slow receiver, by design
    of the test: the relay must stop at half its lease, whatever the receiver does)."""

    kind = where = "slow"

    def __init__(self, seconds: float) -> None:
        self.seconds, self.sent = seconds, []

    def publish(self, pending: Any) -> None:
        time.sleep(self.seconds)
        self.sent.append(pending.id)

    def idle(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.usefixtures("events_on")
def test_a_slow_destination_keeps_no_batch_past_its_lease_and_each_event_is_deleted_once_sent(
    client: jobsup.Client,
) -> None:
    for _ in range(10):
        client.enqueue("work", {})
    slow = Slow(0.3)
    relay = Relay(Outbox(client.database), slow, "relay-slow", lease=2.0)
    sent = relay.run_once()
    assert 1 <= sent < 10 and sent == len(slow.sent)  # stopped at 1 s of its 2 s claim
    left = Outbox(client.database)
    assert left.depth()[0] == 10 - sent  # those sent are gone already
    assert len(left.claim("relay-other", limit=100, lease=60)) == 10 - sent  # the rest given back


@pytest.mark.usefixtures("events_on")
def test_an_event_sent_after_its_claim_lapsed_is_deleted_from_under_the_next_claim(client: jobsup.Client) -> None:
    client.enqueue("work", {})
    box = Outbox(client.database)
    (first,) = box.claim("relay-a", limit=10, lease=0.01)
    wait_until(lambda: box.claim("relay-b", limit=10, lease=60), timeout=10, what="relay-b taking the lapsed claim")
    box.delivered([first.id])  # relay-a confirmed it late: relay-b need not send it again
    assert box.depth()[0] == 0


@pytest.mark.usefixtures("events_on")
def test_a_receiver_answering_garbage_is_a_counted_failure_with_backoff(
    client: jobsup.Client, seen: list[tuple[str, dict[str, Any]]]
) -> None:
    listener = socket.create_server(("127.0.0.1", 0))

    def answer_garbage() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"not http at all\r\n\r\n")

    threading.Thread(target=answer_garbage, daemon=True).start()
    client.enqueue("work", {})
    try:
        relay = _relay(client, f"http://127.0.0.1:{listener.getsockname()[1]}/hook")
        assert relay.run_once() == 0 and relay.backoff > 0
    finally:
        listener.close()
    (failed,) = [fields for kind, fields in seen if kind == "events.publish_failed"]
    assert "gave no HTTP answer" in failed["error"] and client.events.parked() == []


@pytest.mark.usefixtures("events_on")
def test_a_webhook_path_is_masked_in_errors_and_the_log(client: jobsup.Client, receiver: tuple[Receiver, str]) -> None:
    state, hook = receiver
    state.status = 400
    client.enqueue("work", {})
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("jobsup").addHandler(handler)  # jobsup's logger does not propagate
    try:
        assert _relay(client, hook).run_once() == 0
    finally:
        logging.getLogger("jobsup").removeHandler(handler)
    (parked,) = client.events.parked()
    port = hook.split(":")[2].split("/")[0]
    assert parked["last_error"] == f"the webhook http://127.0.0.1:{port}/*** answered 400"
    assert any("events.parked" in line for line in seen), seen
    assert not any("XyZsEcReTpAtHtOkEn" in line or "B0002" in line for line in seen), seen


@pytest.mark.parametrize("secret", ["x", "a" * 31])
def test_a_short_events_secret_is_refused_naming_the_setting(secret: str) -> None:
    with pytest.raises(ConfigurationError, match=rf"^events_secret is {len(secret)} characters; give 32 or more"):
        Settings(events_publisher="https://hooks.example.com/x", events_secret=secret)
    assert publisher_for("https://hooks.example.com/x", secret="b" * 32).kind == "webhook"


def test_a_webhook_url_with_a_password_or_a_zero_timeout_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"carries a user or password.*events_secret") as raised:
        Settings(events_publisher="https://ops:hunter2@hooks.example.com/x", events_secret=SECRET)
    assert "hunter2" not in str(raised.value)
    with pytest.raises(ConfigurationError, match=r"events_timeout \(0s\) must be above zero"):
        Settings(events_timeout=0)


@pytest.mark.rabbitmq
@pytest.mark.usefixtures("events_on")
def test_an_event_whose_routing_key_amqp_cannot_carry_is_parked_and_the_others_delivered(
    client: jobsup.Client, exchange: Any
) -> None:
    long_queue = "q" * 200
    parked_job = client.enqueue("work", {}, queue=long_queue)
    other = client.enqueue("work", {})
    url = exchange.url().replace("?", "?routing_key=jobsup.{queue}.{queue}.{type}&", 1)
    relay = Relay(Outbox(client.database), publisher_for(url), "relay-test")
    try:
        assert relay.run_once() == 1 and relay.backoff == 0
    finally:
        relay.stop()
    wait_until(lambda: exchange.drain(), timeout=10, what="the other job's event")
    assert [e["job"] for e in exchange.drain()] == [other]
    (parked,) = client.events.parked()
    assert parked["job_id"] == parked_job and "routing key" in parked["last_error"]


@pytest.mark.usefixtures("events_on")
def test_one_event_failing_on_its_own_does_not_hold_up_the_others(
    client: jobsup.Client, receiver: tuple[Receiver, str]
) -> None:
    state, url = receiver
    stuck = client.enqueue("work", {})
    others = [client.enqueue("work", {}) for _ in range(5)]
    state.fail.add(_first_event_of(client, stuck))
    relay = _relay(client, url)
    assert relay.run_once() == 5 and relay.backoff == 0
    assert sorted(e["job"] for e in state.got) == others
    state.status = 503  # now the receiver is down for every event: a few tries, then backoff
    for _ in range(5):
        client.enqueue("work", {})
    assert relay.run_once() == 0 and relay.backoff > 0
    with client.database.read() as conn:
        tries = sorted(conn.execute(select(outbox.c.attempts)).scalars())
    assert tries == [0, 0, 0, 1, 1, 2]  # the stuck one twice, two others once, three untried
