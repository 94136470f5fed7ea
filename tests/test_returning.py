"""The store through the emulated UPDATE ... RETURNING that MariaDB needs
(`jobsup.store.dialects.returning`), on SQLite and PostgreSQL: the same operations, run once
with the database's own statements and once through the emulation, on a fresh database each
time at fixed instants, return the same and leave the same rows."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text

import jobsup
from jobsup.store.database import Database
from jobsup.store.rows import Lease
from jobsup.store.schema import batch, breaker, job, job_attempt, metadata, workflow
from jobsup.supervisor.maintenance import MarkSlaBreaches

from helpers import claim, claim_one, fail, release, succeed
from returning_emulated import Checked, emulated_returning  # noqa: F401 - the fixture

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


@jobsup.job("returning-flaky", queue="returning-flaky", max_attempts=50, breaker={"failures": 2, "reset": "60s"})
def flaky(ctx: jobsup.JobContext, payload: Any) -> None:
    raise RuntimeError("down")


@jobsup.job("returning-sla", queue="returning-sla", sla={"start_within": "5m"})
def timed(ctx: jobsup.JobContext, payload: Any) -> None:
    pass


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ids(jobs: Any) -> list[int]:
    return sorted(j.id for j in jobs)


def scenario(client: jobsup.Client) -> list[tuple[str, Any]]:
    """One run of every kind of compare-and-set that reads back what it changed; what each
    step returned."""
    t, trace = client.store.transitions, []

    def note(what: str, value: Any) -> None:
        trace.append((what, sorted(value) if isinstance(value, set) else value))

    # Leases: claim, renew, complete (two jobs, one statement), fail, release, stale writes.
    for i in range(6):
        client.enqueue("a", i, run_at=T0, max_attempts=2 if i == 2 else 5)
    first = claim(client, "w1", limit=4, now=at(1))
    note("claimed", ids(first))
    stale = Lease(first[0].id, "w1", first[0].attempt + 1)
    note("renew", t.renew([c.lease for c in first] + [stale], lease=60.0, now=at(2)))
    note("complete", succeed(client, first[:2], result='"x"', now=at(3)))
    note("complete stale", succeed(client, first[1:2], now=at(3)))
    note("fail", fail(client, first[2], error="E: one", retry_in=0, now=at(4)))
    note("release", release(client, first[3:], now=at(5)))
    note("complete again", succeed(client, first[:1], now=at(6)))
    # The sweep: one lapsed lease goes back to pending, the other (its last attempt) dead.
    lapsed = claim(client, "gone", limit=2, now=at(10))
    note("lapsed", ids(lapsed))
    note("expire", t.sweep.expire(now=at(200)))
    # Dead letters and their retry; cancels of a pending and a running job.
    dead = claim_one(client, "w2", now=at(210))
    note("discard", fail(client, dead, kind="discarded", error="E: bad", now=at(211)))
    note("retry", t.retry([dead.id, first[0].id], now=at(212)))
    running = claim_one(client, "w3", now=at(213))
    note("cancel running", client.cancel(running.id))  # asked: it still runs
    note("cancel asked", t.renew([running.lease], lease=60.0).cancel_requested)
    note("settle cancelled", fail(client, running, kind="cancelled", now=at(214)))
    note("cancel again", client.cancel(running.id))
    # A batch: grown, closed, finished by its last child; another cancelled.
    open_batch = client.batches.open(on_complete="report")
    open_batch.add([{"name": "a", "queue": "batch"}] * 2)
    note("close", (open_batch.close(), open_batch.close()))
    note("batch children", succeed(client, claim(client, "w4", "batch", limit=5), now=at(220)))
    cancelled_batch = client.batches.enqueue([{"name": "a", "queue": "batch"}] * 2, on_failure="cleanup")
    note("cancel batch", client.batches.cancel(cancelled_batch))
    # A workflow: a failed step cancels its dependents, retried it runs to the end.
    flow = jobsup.Workflow("returning-flow")
    extract = flow.add("a", step="extract", queue="flow")
    load_a = flow.add("a", deps=[extract], step="load-a", queue="flow")
    load_b = flow.add("a", deps=[extract], step="load-b", queue="flow")
    flow.add("a", deps=[load_a, load_b], step="report", queue="flow")
    workflow_id = client.workflows.enqueue(flow)
    note("extract", succeed(client, [claim_one(client, "w5", "flow")]))
    loads = claim(client, "w5", "flow", limit=5)
    note("load-a", fail(client, loads[0], kind="discarded", error="E: load"))
    note("load-b", succeed(client, loads[1:]))
    note("workflow", client.workflows.get(workflow_id).status)  # type: ignore[union-attr]
    note("retry workflow", client.workflows.retry(workflow_id))
    while again := claim(client, "w5", "flow", limit=5):
        note("workflow step", succeed(client, again))
    note("workflow again", client.workflows.get(workflow_id).status)  # type: ignore[union-attr]
    second = client.workflows.enqueue(flow)
    note("cancel workflow", client.workflows.cancel(second))
    # A breaker: opened by failures, half-opened, closed by its probe, failed and reset.
    for _ in range(3):
        client.enqueue("returning-flaky", run_at=T0)
    for _ in range(2):
        note("flaky", fail(client, claim_one(client, "w6", "returning-flaky", now=at(300)), now=at(300)))
    note("held back", claim(client, "w6", "returning-flaky", now=at(301)))
    note("half open", client.store.breakers.half_open(now=at(400)))
    note("probe", succeed(client, [claim_one(client, "w6", "returning-flaky", now=at(401))], now=at(401)))
    note("flaky again", fail(client, claim_one(client, "w6", "returning-flaky", now=at(402)), now=at(402)))
    note("reset", (client.breakers.reset("returning-flaky"), client.breakers.reset("returning-flaky")))
    # SLA breaches, marked once.
    client.enqueue("returning-sla", run_at=T0)
    note("sla", [MarkSlaBreaches(client.store).run_once(now=at(s)) for s in (200, 301, 400)])
    return trace


def rows_of(client: jobsup.Client) -> dict[str, list[tuple[Any, ...]]]:
    """What the run left, instants that come from the clock told only as set or not."""
    shown = {
        "job": select(
            job.c.id,
            job.c.name,
            job.c.status,
            job.c.attempts,
            job.c.max_attempts,
            job.c.lease_owner,
            job.c.last_error,
            job.c.waiting_on,
            job.c.failed_deps,
            job.c.result,
            job.c.run_at.is_not(None),
            job.c.finished_at.is_not(None),
            job.c.sla_breached_at.is_not(None),
        ).order_by(job.c.id),
        "job_attempt": select(
            job_attempt.c.job_id,
            job_attempt.c.attempt,
            job_attempt.c.outcome,
            job_attempt.c.error,
            job_attempt.c.finished_at.is_not(None),
        ).order_by(job_attempt.c.job_id, job_attempt.c.attempt, job_attempt.c.started_at),
        "batch": select(
            batch.c.id,
            batch.c.total,
            batch.c.closed_at.is_not(None),
            batch.c.finished_at.is_not(None),
            batch.c.cancelled_at.is_not(None),
        ).order_by(batch.c.id),
        "workflow": select(
            workflow.c.id, workflow.c.finished_at.is_not(None), workflow.c.cancelled_at.is_not(None)
        ).order_by(workflow.c.id),
        "breaker": select(breaker.c.name, breaker.c.state, breaker.c.failures, breaker.c.probe_job_id),
    }
    with client.database.read() as conn:
        return {name: [tuple(row) for row in conn.execute(stmt)] for name, stmt in shown.items()}


def emptied(url: str, request: pytest.FixtureRequest, name: str) -> str:
    """`url`'s kind of database, migrated and empty, ids starting from 1 again."""
    if url.startswith("sqlite"):
        path = Path(request.getfixturevalue("tmp_path")) / f"{name}.db"
        shutil.copy(request.getfixturevalue("sqlite_template"), path)
        return f"sqlite:///{path}"
    db = Database(url)
    with db.transaction() as conn:
        conn.execute(text(f"TRUNCATE {', '.join(t.name for t in metadata.sorted_tables)} RESTART IDENTITY"))
    db.dispose()
    return url


def run(url: str) -> tuple[list[tuple[str, Any]], dict[str, list[tuple[Any, ...]]]]:
    client = jobsup.Client(url)
    try:
        return scenario(client), rows_of(client)
    finally:
        client.close()


@pytest.mark.slow
def test_the_store_behaves_the_same_through_the_emulation(url: str, request: pytest.FixtureRequest) -> None:
    native_trace, native_rows = run(emptied(url, request, "native"))
    request.getfixturevalue("emulated_returning")
    runs = Checked.runs
    emulated_trace, emulated_rows = run(emptied(url, request, "emulated"))
    assert Checked.runs - runs > 50  # the emulation did run, every compare-and-set of the scenario
    assert emulated_trace == native_trace
    assert emulated_rows == native_rows
    # And the scenario did what it says (the comparison is not between two runs that did nothing).
    told = dict(native_trace)
    assert told["complete"] == [1, 2] and told["complete stale"] == [] and told["renew"] == [1, 2, 3, 4]
    assert told["fail"] == "pending" and told["discard"] == "dead_lettered" and len(told["retry"]) == 1
    assert told["cancel running"] and len(told["cancel asked"]) == 1 and not told["cancel again"]
    assert told["settle cancelled"] == "cancelled"
    assert told["close"] == (True, False) and told["cancel batch"] == 2 and told["expire"] == 2
    assert (told["workflow"], told["workflow again"]) == ("failed", "succeeded")
    assert told["held back"] == [] and told["half open"] == ["returning-flaky"] and told["reset"] == (True, False)
    assert told["sla"] == [0, 1, 0]
    assert ("returning-flaky", "closed", 0, None) in native_rows["breaker"]
