"""In-process hooks (`@jobsup.on`) and the webhook publisher, with a real local HTTP server."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from sqlalchemy import select

import jobsup
from jobsup.errors import BadInput
from jobsup.events import hooks
from jobsup.events.publishers import publisher_for
from jobsup.store.outbox import Outbox
from jobsup.store.rows import CANCELLED, FAILED, Outcome
from jobsup.store.schema import job
from jobsup.supervisor.relay import Relay

from helpers import claim_one, wait_until


def _dead_letter(client: jobsup.Client) -> int:
    job_id = client.enqueue("work", {}, max_attempts=1)
    client.store.transitions.fail(Outcome(claim_one(client).held, FAILED, "RuntimeError: no", 0.0))
    return job_id


def test_a_hook_runs_after_the_commit_with_the_event(client: jobsup.Client, seen: list[Any]) -> None:
    got: ClassVar[list[dict[str, Any]]] = []
    jobsup.on("job.dead_lettered")(got.append)
    job_id = _dead_letter(client)
    wait_until(lambda: got, timeout=10, what="the hook")
    assert got[0]["job"] == job_id and got[0]["type"] == "job.dead_lettered" and got[0]["error_type"] == "RuntimeError"


def test_a_hook_of_a_failure_gets_the_exception_the_job_raised(client: jobsup.Client, seen: list[Any]) -> None:
    got: list[dict[str, Any]] = []
    plain: list[dict[str, Any]] = []
    jobsup.on("job.dead_lettered", with_exception=True)(got.append)
    jobsup.on("job.failed", with_exception=True)(got.append)
    jobsup.on("job.failed")(plain.append)  # not asked: plain data, as it always was
    try:
        {}["missing"]
    except KeyError as raised:
        exc = raised
    client.enqueue("work", {}, max_attempts=1)
    client.store.transitions.fail(Outcome(claim_one(client).held, FAILED, "KeyError: 'missing'", 0.0, exc=exc))
    wait_until(lambda: len(got) == 2, timeout=10, what="both hooks")
    assert {event["type"] for event in got} == {"job.failed", "job.dead_lettered"}
    assert all(event["exception"] is exc and exc.__traceback__ is not None for event in got)
    wait_until(lambda: plain, timeout=10, what="the plain hook")
    assert "exception" not in plain[0] and json.dumps(plain[0])
    got.clear()
    _dead_letter(client)  # a failure whose exception this process does not have (a lost worker's, say)
    wait_until(lambda: len(got) == 2, timeout=10, what="both hooks again")
    assert all("exception" not in event for event in got)


def test_a_hook_that_raises_or_hangs_is_counted_and_does_not_change_the_job(
    client: jobsup.Client, seen: list[tuple[str, dict[str, Any]]]
) -> None:
    release = threading.Event()

    def raises(event: dict[str, Any]) -> None:
        raise ValueError("hook broke")

    def hangs(event: dict[str, Any]) -> None:
        release.wait(60)

    after: list[int] = []
    jobsup.on("job.dead_lettered")(raises)
    jobsup.on("job.dead_lettered", timeout=0.5)(hangs)
    jobsup.on("job.dead_lettered")(lambda event: after.append(event["job"]))
    try:
        job_id = _dead_letter(client)
        kinds = lambda: {kind for kind, _ in seen}  # noqa: E731
        wait_until(lambda: {"hook.failed", "hook.timed_out"} <= kinds(), timeout=10, what=lambda: str(kinds()))
        wait_until(lambda: after, timeout=10, what="the hook after them")
    finally:
        release.set()
    job = client.get(job_id)
    assert job is not None and job.status == "dead_lettered" and job.attempts == 1
    failed = next(fields for kind, fields in seen if kind == "hook.failed")
    assert failed["event"] == "job.dead_lettered" and isinstance(failed["exc"], ValueError)


def test_a_hook_that_hangs_on_every_event_leaves_the_pool_bounded_and_serving(
    monkeypatch: pytest.MonkeyPatch, seen: list[tuple[str, dict[str, Any]]]
) -> None:
    monkeypatch.setattr(hooks, "MAX_STUCK", 2)
    monkeypatch.setattr(hooks, "MAX_QUEUED", 3)
    pool = hooks._Pool(os.getpid())  # a pool of its own: the process's may serve other tests
    pool.start()
    release, served = threading.Event(), []
    hang = hooks.Registered(lambda event: release.wait(), timeout=3)  # none times out while filling
    later = hooks.Registered(lambda event: served.append(event["id"]), timeout=5)
    try:
        for n in range(30):
            pool.submit(hang, {"type": "job.failed", "id": f"hang-{n}"})
            if n < 4:  # each thread busy before the next arrives (the queue holds only 3)
                wait_until(lambda: len(pool.running) == n + 1, timeout=10, what=f"{n + 1} hooks running")  # noqa: B023
        # 4 threads and 2 replacements hang; 3 calls waited, of which the replacements took 2.
        settled = lambda: len(pool.running) == 6 and all(r.timed_out for r in pool.running.values())  # noqa: E731
        wait_until(settled, timeout=10, what=lambda: str(pool.running))
        assert pool.stuck == 2 and pool.work.qsize() == 1
        dropped = [fields for kind, fields in seen if kind == "hook.dropped"]
        assert len(dropped) == 23 and [f.get("quiet") for f in dropped[:2]] == [None, True]
        pool.submit(later, {"type": "job.failed", "id": "later"})
    finally:
        release.set()
    # The threads that were not replaced serve again once their hooks return.
    wait_until(lambda: served == ["later"], timeout=10, what=lambda: str(served))
    wait_until(lambda: pool.stuck == 0, timeout=10, what=lambda: str(pool.stuck))


def test_an_unknown_event_name_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(BadInput, match=r"no event type .job.dead.; the event types are .*job\.dead_lettered"):
        jobsup.on("job.dead")


class Receiver(BaseHTTPRequestHandler):
    """Answers 500 to its first `failures` requests, then 204; records what it got."""

    secret = "s3cret-for-the-hook-tests-0123456789"
    failures = 1
    got: ClassVar[list[dict[str, Any]]] = []
    answers: ClassVar[list[int]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        status = 500 if len(self.answers) < self.failures else 204
        self.answers.append(status)
        expected = (
            "sha256="
            + hmac.new(
                self.secret.encode(), self.headers["X-Jobsup-Timestamp"].encode() + b"." + body, hashlib.sha256
            ).hexdigest()
        )
        verified = hmac.compare_digest(expected, self.headers["X-Jobsup-Signature"])
        if status == 204:
            self.got.append({"event": json.loads(body), "verified": verified, "id": self.headers["X-Jobsup-Event-Id"]})
        self.send_response(status)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.usefixtures("events_on")
def test_a_webhook_is_signed_and_a_500_is_retried_and_counted(
    client: jobsup.Client, seen: list[tuple[str, dict[str, Any]]]
) -> None:
    Receiver.got, Receiver.answers = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        job_id = client.enqueue("work", {})
        url = f"http://127.0.0.1:{server.server_port}/hook"
        relay = Relay(Outbox(client.database), publisher_for(url, secret=Receiver.secret), "relay-test")
        assert relay.run_once() == 0  # the 500
        assert relay.backoff > 0
        assert relay.run_once() == 1
    finally:
        server.shutdown()
        server.server_close()
    assert Receiver.answers == [500, 204]
    (got,) = Receiver.got
    assert got["verified"] and got["event"]["job"] == job_id and got["id"] == got["event"]["id"]
    failed = [fields for kind, fields in seen if kind == "events.publish_failed"]
    assert len(failed) == 1 and "answered 500" in failed[0]["error"] and failed[0]["publisher"] == "webhook"


def test_a_hook_never_hears_an_enqueue_whose_savepoint_was_rolled_back(client: jobsup.Client, seen: list[Any]) -> None:
    heard: list[int] = []
    jobsup.on("job.enqueued")(lambda event: heard.append(event["job"]))
    with client.database.engine.connect() as conn, conn.begin():
        kept = client.enqueue("work", {}, connection=conn)
        outer = conn.begin_nested()
        inner = conn.begin_nested()
        client.enqueue("work", {}, connection=conn)  # inside both savepoints
        inner.commit()
        outer.rollback()  # takes the inner savepoint's work with it
        again = conn.begin_nested()
        after = client.enqueue("work", {}, connection=conn)
        again.commit()
    wait_until(lambda: len(heard) >= 2, timeout=10, what=lambda: str(heard))
    with client.database.read() as conn:
        assert sorted(conn.execute(select(job.c.id)).scalars()) == [kept, after]
    # The hooks of one commit run on a pool: any order, but only the committed jobs.
    assert sorted(heard) == [kept, after]


def test_a_hook_on_job_cancelled_alone_hears_a_running_job_its_cancel_ended(
    client: jobsup.Client, seen: list[Any]
) -> None:
    """The end of a running job an operator cancelled is written by its worker's failed
    attempt (outcome cancelled): the events of `fail` must be built for a hook that listens
    to job.cancelled only (they were not: the fail transition was not among those that
    announce a cancel)."""
    got: list[dict[str, Any]] = []
    jobsup.on("job.cancelled")(got.append)
    job_id = client.enqueue("work", {})
    running = claim_one(client)
    client.cancel(job_id)  # running: a request, the worker ends it
    assert client.store.transitions.fail(Outcome(running.held, CANCELLED, "cancelled while it ran", 0.0)) == "cancelled"
    wait_until(lambda: got, timeout=10, what="the hook")
    assert [(e["type"], e["job"], e["outcome"]) for e in got] == [("job.cancelled", job_id, "cancelled")]
