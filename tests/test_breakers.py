"""Circuit breakers on every real database: consecutive failures open a job type's breaker
and its jobs stay pending, attempts untouched; maintenance half-opens it after the reset,
exactly one probe is claimed however many claim; the probe's success closes it, its
failure opens it again; an operator's reset is audited; bad policies are refused at import."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, select

import jobsup
from jobsup.errors import BadInput
from jobsup.store.schema import audit, job

from helpers import claim, claim_one, fail, release, run_jobsup, run_together, succeed

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


@jobsup.job("breaker-flaky", queue="flaky", max_attempts=50, breaker={"failures": 3, "reset": "60s"})
def flaky(ctx: jobsup.JobContext, payload: Any) -> None:
    raise RuntimeError("down")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def breaker_of(client: jobsup.Client, name: str = "breaker-flaky") -> dict[str, Any] | None:
    return next((row for row in client.breakers.list() if row["name"] == name), None)


def fail_times(client: jobsup.Client, n: int, now: datetime) -> None:
    for _ in range(n):
        job = claim_one(client, queue="flaky", now=now)
        fail(client, job, now=now)


def open_breaker(client: jobsup.Client) -> list[int]:
    ids = [client.enqueue("breaker-flaky", run_at=T0) for _ in range(4)]
    fail_times(client, 3, at(1))
    return ids


def test_consecutive_failures_open_it_and_its_jobs_stay_pending(client: jobsup.Client) -> None:
    client.enqueue("breaker-flaky", run_at=T0)
    fail_times(client, 2, at(1))
    assert breaker_of(client)["state"] == "closed"  # type: ignore[index]
    ids = [client.enqueue("breaker-flaky", run_at=T0) for _ in range(3)]
    fail_times(client, 1, at(1))
    row = breaker_of(client)
    assert row is not None and (row["state"], row["failures"]) == ("open", 3)
    attempts = {job_id: client.get(job_id).attempts for job_id in ids}  # type: ignore[union-attr]
    assert claim(client, queue="flaky", limit=10, now=at(30)) == []
    assert {job_id: client.get(job_id).attempts for job_id in ids} == attempts  # type: ignore[union-attr]
    assert {client.get(job_id).status for job_id in ids} == {"pending"}  # type: ignore[union-attr]


def test_a_success_resets_the_count(client: jobsup.Client) -> None:
    for _ in range(3):
        client.enqueue("breaker-flaky", run_at=T0)
    fail_times(client, 2, at(1))
    succeed(client, [claim_one(client, queue="flaky", now=at(1))], now=at(1))
    assert breaker_of(client)["failures"] == 0  # type: ignore[index]


def test_other_types_are_claimed_while_it_is_open(client: jobsup.Client) -> None:
    open_breaker(client)
    other = client.enqueue("plain-of-flaky-queue", queue="flaky", run_at=T0, allow_unknown=True)
    assert [c.id for c in claim(client, queue="flaky", limit=10, now=at(2))] == [other]


def test_maintenance_half_opens_it_after_the_reset_and_one_probe_is_claimed(client: jobsup.Client) -> None:
    open_breaker(client)
    assert client.store.breakers.half_open(now=at(30)) == []
    assert client.store.breakers.half_open(now=at(62)) == ["breaker-flaky"]
    row = breaker_of(client)
    assert row is not None and row["state"] == "half_open" and row["probe_job_id"] is not None
    others = [jobsup.Client(client.database.url) for _ in range(3)]  # other instances, claiming at once
    gate, claimed = threading.Barrier(len(others) + 1), []

    def claims(c: jobsup.Client, owner: str) -> None:
        gate.wait()
        claimed.extend(claim(c, owner, "flaky", limit=10, now=at(63)))

    threads = [threading.Thread(target=claims, args=(c, f"w{i}")) for i, c in enumerate([client, *others])]
    run_together(threads)
    for other in others:
        other.close()
    assert [c.id for c in claimed] == [row["probe_job_id"]]
    # A second tick does not name another probe while this one runs.
    assert client.store.breakers.half_open(now=at(64)) == []


def test_the_probes_success_closes_it(client: jobsup.Client) -> None:
    ids = open_breaker(client)
    client.store.breakers.half_open(now=at(62))
    probe = claim_one(client, queue="flaky", now=at(63))
    succeed(client, [probe], now=at(63))
    assert (breaker_of(client)["state"], breaker_of(client)["failures"]) == ("closed", 0)  # type: ignore[index]
    rest = claim(client, queue="flaky", limit=10, now=at(64))
    assert sorted(c.id for c in rest) == sorted(set(ids) - {probe.id})


def test_the_probes_failure_opens_it_again(client: jobsup.Client) -> None:
    open_breaker(client)
    client.store.breakers.half_open(now=at(62))
    fail(client, claim_one(client, queue="flaky", now=at(63)), now=at(63))
    row = breaker_of(client)
    assert row is not None and row["state"] == "open" and row["probe_job_id"] is None
    assert row["reopen_at"] == at(123)
    assert claim(client, queue="flaky", limit=10, now=at(64)) == []


def test_a_cancelled_probe_is_replaced(client: jobsup.Client) -> None:
    open_breaker(client)
    client.store.breakers.half_open(now=at(62))
    first = breaker_of(client)["probe_job_id"]  # type: ignore[index]
    client.cancel(first)
    assert client.store.breakers.half_open(now=at(63)) == ["breaker-flaky"]
    assert breaker_of(client)["probe_job_id"] not in (None, first)  # type: ignore[index]


def test_an_operator_reset_closes_it_and_is_audited(client: jobsup.Client) -> None:
    ids = open_breaker(client)
    assert client.breakers.reset("breaker-flaky", actor="alice") is True
    assert breaker_of(client)["state"] == "closed"  # type: ignore[index]
    assert len(claim(client, queue="flaky", limit=10, now=at(2))) == len(ids)  # the failed ones retried at once
    assert client.breakers.reset("breaker-flaky", actor="alice") is False
    with client.database.read() as conn:
        rows = conn.execute(select(audit.c.actor, audit.c.action, audit.c.outcome).order_by(audit.c.id)).all()
    assert [tuple(r) for r in rows if r.action == "breaker.reset"] == [
        ("alice", "breaker.reset", "ok"),
        ("alice", "breaker.reset", "unchanged"),
    ]


@pytest.mark.parametrize(
    "policy",
    [
        {"failures": 0, "reset": "60s"},
        {"failures": -1, "reset": "60s"},
        {"failures": 3, "reset": "soon"},
        {"failures": 3, "reset": 0},
        {"failures": 3},
        {"failures": 3, "reset": "1m", "ratio": 0.5},
        5,
    ],
)
def test_a_bad_policy_is_refused_naming_the_job(policy: object) -> None:
    with pytest.raises(BadInput, match="breaker-bad"):
        jobsup.job("breaker-bad", breaker=policy)(lambda ctx, payload: None)


@pytest.mark.postgres
def test_plain_jobs_still_settle_in_one_statement_and_breaker_types_count(postgres_url: str) -> None:
    client = jobsup.Client(postgres_url)
    plain_id = client.enqueue("plain-of-flaky-queue", queue="flaky", run_at=T0, allow_unknown=True)
    client.enqueue("breaker-flaky", run_at=T0)
    [first, second] = sorted(claim(client, queue="flaky", limit=2, now=at(1)), key=lambda c: c.id)
    plain = first if first.id == plain_id else second
    flaky_job = second if plain is first else first
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    for engine in (client.database.engine, client.database.single):
        event.listen(engine, "before_cursor_execute", seen)
    succeed(client, [plain], now=at(2))
    assert len(statements) == 1, statements
    statements.clear()
    fail(client, flaky_job, now=at(2))
    assert any("jobsup_breaker" in statement for statement in statements), statements
    assert breaker_of(client)["failures"] == 1  # type: ignore[index]
    client.close()


def test_the_policies_round_trip_through_a_definition() -> None:
    from jobsup.policies import Limits

    given = Limits.parse(
        "breaker-rt", breaker={"failures": 2, "reset": "5m"}, sla={"start_within": "1m", "finish_within": 3600}
    )
    assert given.describe() == {
        "breaker": {"failures": 2, "reset": 300.0},
        "sla": {"start_within": 60.0, "finish_within": 3600.0},
    }
    assert Limits.load(given.describe()) == given


def test_definitions_list_shows_the_breaker_state(client: jobsup.Client, url: str) -> None:
    from jobsup.jobtypes import JobType
    from jobsup.registry import lookup

    flaky_type = lookup("breaker-flaky")
    assert flaky_type is not None
    client.store.definitions.publish([flaky_type.type, JobType("breaker-none")], instance="test")
    open_breaker(client)
    listed = run_jobsup("--database-url", url, "definitions", "list")
    assert listed.returncode == 0, listed.stderr
    lines = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert "open" in lines["breaker-flaky"] and "-" in lines["breaker-none"]


def test_review_fixes_probe_due_and_from_any_queue_and_a_success_closes_without_a_policy(client: jobsup.Client) -> None:
    """A probe is the type's next due job in whichever queue, and maintenance closes the
    breaker after its probe succeeded even where the settling process knew no policy."""
    from jobsup.store.schema import breaker

    later = client.enqueue("flaky-breaker", priority=9, run_at=T0 + timedelta(days=7), allow_unknown=True)
    due = client.enqueue("flaky-breaker", queue="elsewhere", allow_unknown=True)
    with client.database.transaction() as conn:
        conn.execute(
            breaker.insert().values(
                name="flaky-breaker", state="open", failures=3, opened_at=T0, reopen_at=T0, changed_at=T0
            )
        )
    client.store.breakers.half_open(now=T0 + timedelta(seconds=1))
    assert client.store.breakers.states() == {"flaky-breaker": "half_open"}
    probe = {row["name"]: row["probe_job_id"] for row in client.store.breakers.rows()}["flaky-breaker"]
    assert probe == due and probe != later
    with client.database.transaction() as conn:  # it succeeded where no policy was known
        conn.execute(job.update().where(job.c.id == due).values(status="succeeded"))
    client.store.breakers.half_open(now=T0 + timedelta(seconds=2))
    assert client.store.breakers.states() == {"flaky-breaker": "closed"}


@jobsup.job("breaker-once", queue="breaker-once", max_attempts=10_000, breaker={"failures": 1, "reset": "1h"})
def fails_once(ctx: jobsup.JobContext, payload: Any) -> None:
    raise RuntimeError("down")


@pytest.mark.slow
def test_a_job_whose_failure_opens_its_breaker_is_not_claimed_while_it_is_open(client: jobsup.Client) -> None:
    """Its failure, retried at once, opens the breaker in the same commit that makes it
    pending; claimers busy on its queue the whole time must not take it while the breaker
    is open. On MariaDB a claim under way at that commit once did: its locking read saw the
    job pending, its breaker subquery the snapshot from before the commit."""
    job_id = client.enqueue("breaker-once")
    stop, taken = threading.Event(), []  # (claimer, breaker state when it looked)
    broken: list[BaseException] = []

    def claimer(owner: str) -> None:
        try:
            while not stop.is_set():
                for found in claim(client, owner, queue="breaker-once"):
                    state = breaker_of(client, "breaker-once")
                    taken.append((owner, None if state is None else state["state"]))
                    release(client, [found])
        except BaseException as exc:  # ends this claimer: the test must not pass without it
            broken.append(exc)

    claimers = [threading.Thread(target=claimer, args=(f"c{i}",)) for i in range(2)]
    for thread in claimers:
        thread.start()
    failures, deadline = 0, time.monotonic() + 60
    try:
        while failures < 120 and time.monotonic() < deadline and all(state != "open" for _, state in taken):
            found = next(iter(claim(client, "failer", queue="breaker-once")), None)
            if found is None:  # a claimer has it: it gives it back
                continue
            fail(client, found)  # retried at once; the breaker opens
            failures += 1
            # Whoever claims it from here saw the breaker open: nobody may, until the reset.
            assert client.breakers.reset("breaker-once", actor="test") is True
    finally:
        stop.set()
        for thread in claimers:
            thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in claimers) and broken == []
    assert [t for t in taken if t[1] == "open"] == [], f"job {job_id} was claimed while its breaker was open"
    assert failures >= 30 and taken, "the claimers did not compete for it"
