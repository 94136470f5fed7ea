"""The events of no job transition on every real database: breakers opening and closing,
queues paused and resumed, SLA breaches, batches and workflows finishing. Each is in the
outbox once its change committed (in that transaction), with the catalogue's fields and
its object as the row's subject; a hook sees it after the commit; a change that did not
happen writes nothing; and the relay orders each object's events without stalling."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import bindparam, exists, func, select

import jobsup
from jobsup.errors import DatabaseError
from jobsup.events import hooks
from jobsup.store.database import Database
from jobsup.store.outbox import Outbox
from jobsup.store.outbox import write as publish
from jobsup.store.schema import job, outbox, queue_state, workflow
from jobsup.supervisor.maintenance import MarkSlaBreaches

from helpers import claim, claim_one, fail, run_together, succeed, wait_until

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
OWN = ("breaker.", "queue.", "sla.", "batch.", "workflow.")


@jobsup.job("ev-flaky", queue="ev-flaky", max_attempts=50, breaker={"failures": 2, "reset": "60s"})
def flaky(ctx: jobsup.JobContext, payload: Any) -> None:
    raise RuntimeError("down")


@jobsup.job("ev-sla", sla={"start_within": "5m"})
def late(ctx: jobsup.JobContext, payload: Any) -> None:
    pass


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def announced(client: jobsup.Client) -> list[dict[str, Any]]:
    """The outbox's events of this module's kinds, in id order, with the row's own columns."""
    with client.database.read() as conn:
        rows = conn.execute(select(outbox).order_by(outbox.c.id)).all()
    found = []
    for row in rows:
        if row.type.startswith(OWN):
            payload = json.loads(row.payload)
            assert payload["type"] == row.type and payload["v"] == 1 and len(payload["id"]) == 32
            found.append({**payload, "_job_id": row.job_id, "_subject": row.subject})
    return found


def strip(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k not in ("v", "id", "at")} for e in events]


@pytest.fixture
def heard() -> Iterator[list[dict[str, Any]]]:
    got: list[dict[str, Any]] = []
    yield got
    hooks.clear()


def open_breaker(client: jobsup.Client) -> list[int]:
    ids = [client.enqueue("ev-flaky", run_at=T0) for _ in range(3)]
    for _ in range(2):
        fail(client, claim_one(client, queue="ev-flaky", now=at(1)), now=at(1))
    return ids


# -- breakers -----------------------------------------------------------------------------


def test_a_breaker_opening_and_its_probe_closing_it_are_announced(client: jobsup.Client, events_on: None) -> None:
    client.enqueue("ev-flaky", run_at=T0)
    fail(client, claim_one(client, queue="ev-flaky", now=at(1)), now=at(1))
    succeed(client, [claim_one(client, queue="ev-flaky", now=at(1))], now=at(1))  # a reset count: no close
    assert announced(client) == []
    open_breaker(client)
    opened = announced(client)
    failed = [e for e in opened if e["type"] == "breaker.opened"]
    assert len(opened) == 1 and failed, opened
    assert strip(opened)[0] == {
        "type": "breaker.opened",
        "name": "ev-flaky",
        "failed_job": failed[0]["failed_job"],
        "reset": 60.0,
        "_job_id": None,
        "_subject": "breaker:ev-flaky",
    }
    client.store.breakers.half_open(now=at(62))
    probe = claim_one(client, queue="ev-flaky", now=at(63))
    succeed(client, [probe], now=at(63))
    closed = announced(client)[1:]
    assert strip(closed) == [
        {
            "type": "breaker.closed",
            "name": "ev-flaky",
            "probe_job": probe.id,
            "_job_id": None,
            "_subject": "breaker:ev-flaky",
        }
    ]


def test_an_operator_reset_is_announced_with_the_actor_and_only_when_it_closes(
    client: jobsup.Client, events_on: None, heard: list[dict[str, Any]]
) -> None:
    def hook(event: dict[str, Any]) -> None:  # reads the breaker from its own connection: committed by now
        heard.append({**event, "_state": client.store.breakers.states().get(event["name"])})

    jobsup.on("breaker.closed")(hook)
    open_breaker(client)
    assert client.breakers.reset("ev-flaky", actor="alice") is True
    assert client.breakers.reset("ev-flaky", actor="alice") is False  # closed, no count: nothing to announce
    fail(client, claim_one(client, queue="ev-flaky", now=at(2)), now=at(2))
    assert client.breakers.reset("ev-flaky", actor="bob") is True  # closed with a count: zeroed, not a close
    closes = [e for e in announced(client) if e["type"] == "breaker.closed"]
    assert [(e["actor"], e["was"], e["_subject"]) for e in closes] == [("alice", "open", "breaker:ev-flaky")]
    wait_until(lambda: heard, timeout=10, what="the hook")
    assert [(e["id"], e["_state"]) for e in heard] == [(closes[0]["id"], "closed")]


# -- queues -------------------------------------------------------------------------------


def test_a_pause_and_a_resume_are_announced_once_each(
    client: jobsup.Client, events_on: None, heard: list[dict[str, Any]]
) -> None:
    def hook(event: dict[str, Any]) -> None:
        with client.database.read() as conn:
            paused = conn.execute(select(queue_state.c.paused).where(queue_state.c.queue == event["queue"])).scalar()
        heard.append({**event, "_paused": bool(paused)})

    jobsup.on("queue.paused")(hook)
    jobsup.on("queue.resumed")(hook)

    def heard_after(change: Any, n: int) -> None:  # the hook has run before the next change
        before = len(heard)  # read first: the hook may run before change() returns
        assert change() is (n > before)
        wait_until(lambda: len(heard) == n, timeout=10, what=lambda: f"{n} hook calls, not {heard}")

    client.enqueue("a", queue="mail")
    heard_after(lambda: client.queues.pause("mail", reason="smtp is down", actor="alice"), 1)
    heard_after(lambda: client.queues.pause("mail", reason="still down", actor="bob"), 1)  # paused already
    heard_after(lambda: client.queues.resume("mail", actor="carol"), 2)
    heard_after(lambda: client.queues.resume("mail", actor="carol"), 2)
    heard_after(lambda: client.queues.pause("mail", actor="dave"), 3)  # a row that exists, paused again
    queue = {"queue": "mail", "_job_id": None, "_subject": "queue:mail"}
    assert strip(announced(client)) == [
        {"type": "queue.paused", **queue, "actor": "alice", "reason": "smtp is down"},
        {"type": "queue.resumed", **queue, "actor": "carol"},
        {"type": "queue.paused", **queue, "actor": "dave"},
    ]
    assert [(e["type"], e["actor"], e["_paused"]) for e in heard] == [
        ("queue.paused", "alice", True),
        ("queue.resumed", "carol", False),
        ("queue.paused", "dave", True),
    ]


@pytest.mark.parametrize("row", ["new", "resumed"])
def test_of_pauses_at_once_one_pauses_the_queue_and_announces_it(
    client: jobsup.Client, url: str, events_on: None, row: str
) -> None:
    client.enqueue("a", queue="mail")
    if row == "resumed":  # the compare-and-set on an existing row, else the race to insert it
        client.queues.pause("mail", actor="setup")
        client.queues.resume("mail", actor="setup")
    others = [jobsup.Client(url) for _ in range(6)]
    ready, results = threading.Barrier(len(others)), []

    def pause(other: jobsup.Client, n: int) -> None:
        ready.wait(10)
        results.append(other.queues.pause("mail", actor=f"op{n}"))

    run_together([threading.Thread(target=pause, args=(other, n)) for n, other in enumerate(others)])
    for other in others:
        other.close()
    assert sorted(results) == [False] * (len(others) - 1) + [True]
    assert [e["type"] for e in announced(client)].count("queue.paused") == 1 + (row == "resumed")


# -- SLAs ---------------------------------------------------------------------------------


def test_an_sla_breach_is_announced_once_per_job_as_the_jobs_event(client: jobsup.Client, events_on: None) -> None:
    late_id = client.enqueue("ev-sla", run_at=T0)
    client.enqueue("ev-sla", run_at=at(200))
    step = MarkSlaBreaches(client.store)
    assert step.run_once(now=at(301)) == 1
    assert step.run_once(now=at(400)) == 0  # the compare-and-set changed nothing: nothing announced
    assert strip(announced(client)) == [
        {
            "type": "sla.breached",
            "job": late_id,
            "name": "ev-sla",
            "queue": "default",
            "kind": "start",
            "_job_id": late_id,
            "_subject": None,
        }
    ]


# -- batches and workflows ----------------------------------------------------------------


def test_a_batch_finishing_is_announced_once_with_its_counts(
    client: jobsup.Client, events_on: None, heard: list[dict[str, Any]]
) -> None:
    jobsup.on("batch.finished")(heard.append)
    batch_id = client.batches.enqueue([{"name": "a"}] * 3, on_complete="report", name="nightly")
    claimed = claim(client, "w1", limit=3)
    succeed(client, claimed[:2])
    assert announced(client) == []
    fail(client, claimed[2], kind="discarded")
    assert client.store.transitions.batches.finish_if_done(batch_id) is False  # fired once, never again
    assert strip(announced(client)) == [
        {
            "type": "batch.finished",
            "batch": batch_id,
            "name": "nightly",
            "outcome": "failed",
            "counts": {"succeeded": 2, "dead_lettered": 1},
            "_job_id": None,
            "_subject": f"batch:{batch_id}",
        }
    ]
    wait_until(lambda: heard, timeout=10, what="the hook")
    assert heard[0]["batch"] == batch_id


def test_a_batch_closed_in_a_transaction_that_rolls_back_announces_nothing(
    client: jobsup.Client, events_on: None
) -> None:
    batch = client.batches.open(on_complete="report")
    batch.add([{"name": "a"}])
    succeed(client, [claim_one(client)])
    with client.database.engine.connect() as conn, conn.begin() as tx:
        assert client.store.transitions.batches.close(batch.id, connection=conn)
        tx.rollback()
    assert announced(client) == []
    assert batch.close() is True
    assert [e["outcome"] for e in announced(client)] == ["succeeded"]


def diamond() -> jobsup.Workflow:
    wf = jobsup.Workflow("ev-etl")
    extract = wf.add("a", step="extract")
    load_a = wf.add("x", deps=[extract], step="load-a")
    load_b = wf.add("x", deps=[extract], step="load-b")
    wf.add("report", deps=[load_a, load_b])
    return wf


def test_a_workflow_finishing_is_announced_once_when_its_last_step_ends(
    client: jobsup.Client, events_on: None, heard: list[dict[str, Any]]
) -> None:
    jobsup.on("workflow.finished")(heard.append)
    workflow_id = client.workflows.enqueue(diamond())
    succeed(client, claim(client, "w1", limit=10))  # extract
    both = claim(client, "w1", limit=10)
    assert len(both) == 2
    succeed(client, both[:1])
    assert announced(client) == []  # load-b still running
    succeed(client, both[1:])
    assert announced(client) == []  # the report waits
    succeed(client, claim(client, "w1", limit=10))
    assert client.store.transitions.workflows.finish_if_done(workflow_id) is False
    assert strip(announced(client)) == [
        {
            "type": "workflow.finished",
            "workflow": workflow_id,
            "name": "ev-etl",
            "outcome": "succeeded",
            "counts": {"succeeded": 4},
            "_job_id": None,
            "_subject": f"workflow:{workflow_id}",
        }
    ]
    wait_until(lambda: heard, timeout=10, what="the hook")
    assert heard[0]["workflow"] == workflow_id


def test_a_failed_step_that_cancels_the_rest_finishes_the_workflow_failed(
    client: jobsup.Client, events_on: None
) -> None:
    workflow_id = client.workflows.enqueue(diamond())
    fail(client, claim_one(client), kind="discarded")  # extract: its dependents are cancelled, level by level
    events = announced(client)
    assert [(e["workflow"], e["outcome"], e["counts"]) for e in events] == [
        (workflow_id, "failed", {"dead_lettered": 1, "cancelled": 3})
    ]


def test_the_sweep_finishes_and_announces_a_workflow_whose_last_settle_did_not(
    client: jobsup.Client, events_on: None
) -> None:
    workflow_id = client.workflows.enqueue(diamond())
    # The state a settle leaves when its process dies between its commit and its look.
    with client.database.transaction() as conn:
        conn.execute(job.update().values(status="succeeded"))
    assert announced(client) == []
    assert client.store.transitions.workflows.sweep() == 1
    assert client.store.transitions.workflows.sweep() == 0
    assert [(e["workflow"], e["outcome"]) for e in announced(client)] == [(workflow_id, "succeeded")]
    with client.database.read() as conn:
        assert conn.execute(select(workflow.c.finished_at)).scalar() is not None


# -- the relay's order ----------------------------------------------------------------------


def test_the_relay_orders_each_objects_events_and_events_of_no_job_never_stall(
    client: jobsup.Client, events_on: None
) -> None:
    job_id = client.enqueue("a", queue="mail")
    client.queues.pause("mail", actor="alice")
    client.queues.resume("mail", actor="alice")
    client.queues.pause("other", actor="alice", allow_unknown=True)
    relays = Outbox(client.database)
    first = relays.claim("r1", limit=100, lease=60)
    # The job's event, the first of mail's, and other's: mail's resume waits for its pause.
    assert [(p.type, p.job_id, p.subject) for p in first] == [
        ("job.enqueued", job_id, None),
        ("queue.paused", None, "queue:mail"),
        ("queue.paused", None, "queue:other"),
    ]
    assert relays.claim("r2", limit=100, lease=60) == []
    relays.delivered([p.id for p in first if p.subject == "queue:mail"])
    assert [(p.type, p.subject) for p in relays.claim("r2", limit=100, lease=60)] == [("queue.resumed", "queue:mail")]
    with client.database.read() as conn:  # a row has a job or a subject, never both
        both = select(func.count()).where(outbox.c.job_id.isnot(None), outbox.c.subject.isnot(None))
        assert conn.execute(both).scalar() == 0


def test_steps_cancelled_by_a_failed_dependency_and_reopened_by_a_retry_are_announced(
    client: jobsup.Client, events_on: None
) -> None:
    workflow_id = client.workflows.enqueue(diamond())
    fail(client, claim_one(client), kind="discarded")  # extract: its three dependents are cancelled
    with client.database.read() as conn:
        cancelled = sorted(conn.execute(select(job.c.id).where(job.c.status == "cancelled")).scalars())
        events = [(row.job_id, row.type) for row in conn.execute(select(outbox).order_by(outbox.c.id))]
    assert len(cancelled) == 3
    assert [job_id for job_id, kind in events if kind == "job.cancelled"] == cancelled
    assert (None, "workflow.finished") in events
    before = len(events)

    redone = client.workflows.retry(workflow_id)
    with client.database.read() as conn:
        rows = conn.execute(select(outbox).order_by(outbox.c.id)).all()[before:]
    retrying = {row.job_id: json.loads(row.payload) for row in rows if row.type == "job.retrying"}
    assert sorted(retrying) == redone
    extract = min(redone)
    assert retrying[extract]["retry_at"] and all("retry_at" not in retrying[i] for i in redone if i != extract)
    succeed(client, [claim_one(client)])  # extract again, then the rest of the diamond
    succeed(client, claim(client, "w1", limit=10))
    succeed(client, claim(client, "w1", limit=10))
    finished = [json.loads(e.payload) for e in announced_rows(client) if e.type == "workflow.finished"]
    assert [(f["workflow"], f["outcome"]) for f in finished] == [(workflow_id, "failed"), (workflow_id, "succeeded")]


@pytest.mark.parametrize("how", ["failed dependency", "cancel_workflow"])
def test_a_step_cancelled_again_after_a_retry_announces_its_second_cancellation(
    client: jobsup.Client, events_on: None, how: str
) -> None:
    """The shape the fault campaign once reported as out of order (enqueued, cancelled,
    retrying, and then nothing): cancelled by a failed dependency, reopened by
    retry_workflow, and cancelled again, each step's last event is its second
    job.cancelled, whether the second end comes from its dependency failing again or from
    cancel_workflow."""
    workflow_id = client.workflows.enqueue(diamond())
    fail(client, claim_one(client), kind="discarded")
    redone = client.workflows.retry(workflow_id)
    extract, steps = min(redone), sorted(redone)[1:]
    if how == "failed dependency":
        fail(client, claim_one(client), kind="discarded")
    else:
        assert client.workflows.cancel(workflow_id) == 4
    with client.database.read() as conn:
        statuses = dict(conn.execute(select(job.c.id, job.c.status).where(job.c.id.in_(redone))).all())
    assert all(statuses[step] == "cancelled" for step in steps), statuses
    kinds: dict[int, list[str]] = {}
    for row in announced_rows(client):
        if row.job_id is not None:
            kinds.setdefault(row.job_id, []).append(row.type)
    for step in steps:
        assert kinds[step] == ["job.enqueued", "job.cancelled", "job.retrying", "job.cancelled"], (step, kinds[step])
    assert kinds[extract][-1] == ("job.dead_lettered" if how == "failed dependency" else "job.cancelled")


def announced_rows(client: jobsup.Client) -> list[Any]:
    with client.database.read() as conn:
        return list(conn.execute(select(outbox).order_by(outbox.c.id)))


@pytest.mark.slow
def test_competing_relays_never_claim_an_event_while_an_earlier_one_of_its_job_is_left(url: str) -> None:
    """Writers add each job's events one transaction at a time while three relays claim,
    deliver and delete; right after each claim, a new statement looks for an earlier event of
    a claimed event's job still in the outbox. On MariaDB the claim's NOT EXISTS once read a
    snapshot older than what its locking read saw, so an event whose earlier one committed
    meanwhile, and was out with another relay, passed for its job's head: delivered ahead
    of it (the fault campaign's h:events, seed 51)."""
    db = Database(url)
    relays = Outbox(db)
    earlier = outbox.alias("earlier")
    left_before = (
        select(outbox.c.id)
        .where(outbox.c.id.in_(bindparam("p_ids", expanding=True)))
        .where(exists().where(earlier.c.job_id == outbox.c.job_id, earlier.c.id < outbox.c.id))
    )
    jobs, stop = itertools.count(1), threading.Event()
    written: list[int] = []  # the jobs whose three events are in
    wrong: list[int] = []  # claimed while an earlier event of its job was left
    delivered: list[int] = []
    failed: list[DatabaseError] = []  # a deadlock between relays: rolled back, tried again
    broken: list[BaseException] = []  # anything else ends its thread and fails the test

    def guarded(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                while not stop.is_set():
                    try:
                        work()
                    except DatabaseError as exc:
                        failed.append(exc)
            except BaseException as exc:
                broken.append(exc)

        return run

    def write() -> None:
        job_id = next(jobs)
        for step in range(3):
            with db.transaction() as conn:
                event = {"o_job": job_id, "o_subject": None, "o_type": f"e{step}", "o_payload": "{}", "o_at": T0}
                publish(conn, [event])
        written.append(job_id)

    def relay(owner: str) -> Callable[[], None]:
        def once() -> None:
            claimed = relays.claim(owner, limit=20, lease=60)
            if claimed:
                with db.read() as conn:
                    wrong.extend(conn.execute(left_before, {"p_ids": [p.id for p in claimed]}).scalars())
                relays.delivered([p.id for p in claimed])
                delivered.extend(p.id for p in claimed)

        return once

    workers = [threading.Thread(target=guarded(write)) for _ in range(3)]
    workers += [threading.Thread(target=guarded(relay(f"r{i}"))) for i in range(3)]
    try:
        for thread in workers:
            thread.start()
        # Until the relays have delivered enough (not until the writers wrote enough: on a
        # busy machine SQLite's one write lock let the writers run far ahead of the relays).
        wait_until(lambda: bool(wrong or broken) or len(delivered) >= 600, timeout=90)
    finally:
        stop.set()
        for thread in workers:
            thread.join(timeout=30)
        db.dispose()
    assert not any(thread.is_alive() for thread in workers)
    assert broken == []
    assert wrong == [], f"claimed ahead of an earlier event of its job: outbox ids {wrong[:10]}"
    assert len(delivered) >= 600, "the relays hardly competed"
    assert len(failed) < 20, failed[:3]
