"""Workflows, triggers and batches on every real database, driven through the transitions
as a worker would drive them (claim, succeed, fail): statuses, fan-in, policies, atomicity."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

import jobsup
import jobsup.client.batches
from jobsup.store.rows import CANCELLED
from jobsup.store.schema import batch, job, job_dependency, workflow

from helpers import claim, claim_one, fail, succeed, wait_until


def statuses(client: jobsup.Client, workflow_id: int) -> dict[str, str]:
    info = client.workflows.get(workflow_id)
    assert info is not None
    return {step.name: step.status for step in info.steps}


def run_all(client: jobsup.Client, result: Any = None, *, queue: str = "default") -> list[int]:
    """Claim and succeed everything due, round after round; the ids in the order they ran."""
    ran = []
    while claimed := claim(client, "w1", limit=100, queue=queue):
        succeed(client, claimed, result=None if result is None else f'"{result}"')
        ran.extend(c.id for c in claimed)
    return ran


def count(client: jobsup.Client, table: Any) -> int:
    with client.database.read() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def diamond(on_failure: str = "cancel") -> jobsup.Workflow:
    wf = jobsup.Workflow("nightly-etl")
    extract = wf.add("a", {"day": "2026-12-01"}, step="extract")
    clean = wf.add("b", deps=[extract], step="clean")
    load_a = wf.add("x", deps=[clean], step="load-a")
    load_b = wf.add("x", deps=[clean], step="load-b")
    wf.add("report", deps=[load_a, load_b], on_failure=on_failure)
    return wf


# -- workflows ----------------------------------------------------------------------------------


def test_a_diamond_runs_each_step_after_its_dependencies_and_passes_results(client: jobsup.Client) -> None:
    workflow_id = client.workflows.enqueue(diamond())
    assert statuses(client, workflow_id) == {
        "extract": "pending",
        "clean": "waiting",
        "load-a": "waiting",
        "load-b": "waiting",
        "report": "waiting",
    }
    order = []
    while claimed := claim(client, "w1", limit=100):
        for c in claimed:
            step = client.get(c.id).step  # type: ignore[union-attr]
            order.append(step)
            succeed(client, [c], result=f'"{step} done"')
    assert order[0] == "extract" and order[1] == "clean" and order[-1] == "report"
    assert set(order[2:4]) == {"load-a", "load-b"}
    info = client.workflows.get(workflow_id)
    assert info is not None and info.status == "succeeded"
    report = next(step for step in info.steps if step.name == "report")
    assert report.depends_on == ("load-a", "load-b")
    assert client.store.reads.job_upstream(report.job_id) == {"load-a": "load-a done", "load-b": "load-b done"}


def test_a_failed_step_cancels_its_dependents_transitively_with_the_reason(client: jobsup.Client) -> None:
    workflow_id = client.workflows.enqueue(diamond())
    succeed(client, [claim_one(client)])  # extract
    first = claim_one(client)  # clean
    assert fail(client, first, kind="discarded", error="E: bad rows") == "dead_lettered"
    assert statuses(client, workflow_id) == {
        "extract": "succeeded",
        "clean": "dead_lettered",
        "load-a": "cancelled",
        "load-b": "cancelled",
        "report": "cancelled",
    }
    info = client.workflows.get(workflow_id)
    assert info is not None and info.status == "failed"
    report = client.get(next(s.job_id for s in info.steps if s.name == "report"))
    assert report is not None and "did not succeed" in (report.last_error or "")
    assert claim(client, "w1", limit=10) == []


def test_a_run_policy_runs_the_step_when_a_dependency_failed(client: jobsup.Client) -> None:
    workflow_id = client.workflows.enqueue(diamond(on_failure="run"))
    succeed(client, [claim_one(client)])  # extract
    succeed(client, [claim_one(client)])  # clean
    loads = claim(client, "w1", limit=10)
    assert len(loads) == 2
    fail(client, loads[0], kind="discarded")
    assert statuses(client, workflow_id)["report"] == "waiting"  # load-b is still running
    succeed(client, [loads[1]])
    report = claim_one(client)
    assert client.get(report.id).step == "report"  # type: ignore[union-attr]
    succeed(client, [report])
    assert client.workflows.get(workflow_id).status == "failed"  # type: ignore[union-attr]


def test_a_retry_with_attempts_left_keeps_dependents_waiting(client: jobsup.Client) -> None:
    workflow_id = client.workflows.enqueue(diamond())
    first = claim_one(client)
    assert fail(client, first, retry_in=0) == "pending"
    assert statuses(client, workflow_id)["clean"] == "waiting"
    succeed(client, [claim_one(client)])
    assert statuses(client, workflow_id)["clean"] == "pending"


def test_a_workflow_in_a_rolled_back_transaction_leaves_nothing(client: jobsup.Client) -> None:
    engine = client.database.engine
    with engine.connect() as conn:
        transaction = conn.begin()
        client.workflows.enqueue(diamond(), connection=conn)
        transaction.rollback()
    assert (count(client, job), count(client, workflow), count(client, job_dependency)) == (0, 0, 0)
    with engine.connect() as conn, conn.begin():
        workflow_id = client.workflows.enqueue(diamond(), connection=conn)
    assert len(statuses(client, workflow_id)) == 5


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda wf: (wf.add("a", step="one", deps=["two"]), wf.add("a", step="two", deps=["one"])), "cycle"),
        (lambda wf: wf.add("a", deps=["nowhere"]), "no step of workflow"),
        (lambda wf: wf.add("a", deps=[jobsup.Workflow("other").add("a")]), "of workflow 'other'"),
        (lambda wf: wf.add("a", on_failure="ignore"), "on_failure"),
        (lambda wf: (wf.add("a"), wf.add("a")), "already has a step named"),
        (lambda wf: wf.add("a", unique_key="k"), "unique_key"),
    ],
)
def test_bad_workflows_are_refused_and_nothing_is_written(client: jobsup.Client, build: Any, message: str) -> None:
    wf = jobsup.Workflow("bad")
    with pytest.raises(jobsup.BadInput, match=message):
        build(wf)
        client.workflows.enqueue(wf)
    assert (count(client, job), count(client, workflow)) == (0, 0)


def test_a_step_of_an_unknown_job_is_refused(client: jobsup.Client) -> None:
    wf = jobsup.Workflow("unknown")
    wf.add("a")
    wf.add("no-such-job", deps=["a"])
    with pytest.raises(jobsup.UnknownJob, match="no-such-job"):
        client.workflows.enqueue(wf)
    assert count(client, job) == 0


def test_a_dead_letter_retry_of_a_step_makes_its_waiting_dependents_wait_for_it_again(
    client: jobsup.Client,
) -> None:
    wf = jobsup.Workflow("retried")
    first, second = wf.add("a", step="first"), wf.add("a", step="second")
    wf.add("report", deps=[first, second])  # a single Step or name is taken as well as a list
    workflow_id = client.workflows.enqueue(wf)
    one, two = claim(client, "w1", limit=2)
    fail(client, one, kind="discarded")
    assert client.dead_letters.retry(one.id)
    assert statuses(client, workflow_id) == {"first": "pending", "second": "running", "report": "waiting"}
    succeed(client, [two])
    assert statuses(client, workflow_id)["report"] == "waiting"  # first runs again: not counted twice
    succeed(client, [claim_one(client)])
    report = claim_one(client)
    assert client.get(report.id).step == "report"  # type: ignore[union-attr]


def test_a_single_dependency_need_not_be_a_list(client: jobsup.Client) -> None:
    wf = jobsup.Workflow("single")
    wf.add("b", deps=wf.add("a", step="first"))
    wf.add("x", deps="first")
    assert statuses(client, client.workflows.enqueue(wf)) == {"first": "pending", "b": "waiting", "x": "waiting"}


def test_a_workflow_key_enqueues_it_once(client: jobsup.Client) -> None:
    first = client.workflows.enqueue(diamond(), key="etl-2026-12-01")
    assert client.workflows.enqueue(diamond(), key="etl-2026-12-01") == first
    assert count(client, job) == 5


def test_cancel_ends_every_unfinished_step_and_retry_reruns_failed_and_cancelled(client: jobsup.Client) -> None:
    workflow_id = client.workflows.enqueue(diamond())
    succeed(client, [claim_one(client)])  # extract
    running = claim_one(client)  # clean
    assert client.workflows.cancel(workflow_id) == 4  # three waiting steps ended, the running one asked
    with pytest.raises(jobsup.BadInput, match="still running"):
        client.workflows.retry(workflow_id)  # the step asked to stop may still run: not reopened beside itself
    assert fail(client, running, kind=CANCELLED) == "cancelled"  # its worker stopped it
    assert client.workflows.get(workflow_id).status == "cancelled"  # type: ignore[union-attr]
    retried = client.workflows.retry(workflow_id)
    assert len(retried) == 4
    assert statuses(client, workflow_id) == {
        "extract": "succeeded",
        "clean": "pending",
        "load-a": "waiting",
        "load-b": "waiting",
        "report": "waiting",
    }
    again = claim_one(client)  # clean, reopened: the request was its first attempt's, not this one's
    assert again.id == running.id
    assert client.store.transitions.renew([again.lease], lease=60.0).cancel_requested == set()
    succeed(client, [again])
    run_all(client)
    assert client.workflows.get(workflow_id).status == "succeeded"  # type: ignore[union-attr]


def test_retry_of_a_running_workflow_is_refused(client: jobsup.Client) -> None:
    workflow_id = client.workflows.enqueue(diamond())
    with pytest.raises(jobsup.BadInput, match="still running"):
        client.workflows.retry(workflow_id)


def test_a_long_chain_enqueues_with_only_its_first_step_pending(client: jobsup.Client) -> None:
    wf = jobsup.Workflow("long")
    previous = wf.add("a", step="s0")
    for index in range(1, 2000):
        previous = wf.add("a", step=f"s{index}", deps=[previous])
    workflow_id = client.workflows.enqueue(wf)
    info = client.workflows.get(workflow_id)
    assert info is not None and info.counts["waiting"] == 1999 and info.counts["pending"] == 1


# -- triggers -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("on", "ending", "fires"),
    [
        ("succeeded", "succeed", True),
        ("succeeded", "dead", False),
        ("failed", "dead", True),
        ("failed", "cancel", True),
        ("dead_lettered", "dead", True),
        ("dead_lettered", "cancel", False),
        ("cancelled", "cancel", True),
        ("any", "succeed", True),
    ],
)
def test_a_trigger_fires_once_when_its_job_ends_as_it_says(
    client: jobsup.Client, on: str, ending: str, fires: bool
) -> None:
    job_id = client.enqueue("a", then=[jobsup.Trigger("noop", on=on, payload={"why": on})])
    if ending == "cancel":
        client.cancel(job_id)
    else:
        claimed = claim_one(client)
        succeed(client, [claimed]) if ending == "succeed" else fail(client, claimed, kind="discarded")
    followers = [j for j in client.list_jobs() if j.name == "noop"]
    assert [(j.payload, j.parent_id) for j in followers] == ([({"why": on}, job_id)] if fires else [])


def test_a_retried_attempt_does_not_fire_a_trigger(client: jobsup.Client) -> None:
    client.enqueue("a", max_attempts=2, then=jobsup.Trigger("noop", on="any"))
    fail(client, claim_one(client), retry_in=0)
    assert [j.name for j in client.list_jobs()] == ["a"]


def test_a_job_types_triggers_fire_for_every_job_of_it(client: jobsup.Client) -> None:
    @jobsup.job("triggers-on-type", then=[jobsup.Trigger("noop", on="succeeded")])
    def typed(ctx: jobsup.JobContext, payload: Any) -> None: ...

    first, second = client.enqueue("triggers-on-type"), client.enqueue("triggers-on-type")
    succeed(client, claim(client, "w1", limit=2))
    assert sorted(j.parent_id for j in client.list_jobs() if j.name == "noop") == [first, second]  # type: ignore[type-var]


def test_a_trigger_of_an_unknown_job_is_refused(client: jobsup.Client) -> None:
    with pytest.raises(jobsup.UnknownJob, match="nobody-defines-this"):
        client.enqueue("a", then=[jobsup.Trigger("nobody-defines-this")])
    with pytest.raises(jobsup.BadInput, match="on="):
        jobsup.Trigger("noop", on="whenever")
    assert count(client, job) == 0


# -- batches --------------------------------------------------------------------------------------


def callbacks(client: jobsup.Client) -> list[jobsup.Job]:
    return [j for j in client.list_jobs(limit=1000) if j.name in ("report", "cleanup")]


def test_a_batch_fires_its_callbacks_once_when_the_last_child_ends(client: jobsup.Client) -> None:
    children = [{"name": "a", "payload": i} for i in range(5)]
    batch_id = client.batches.enqueue(children, on_complete=("report", {"to": "ops"}), on_failure="cleanup")
    info = client.batches.get(batch_id)
    assert info is not None and (info.status, info.total, info.counts["pending"]) == ("running", 5, 5)
    claimed = claim(client, "w1", limit=5)
    succeed(client, claimed[:3])
    fail(client, claimed[3], kind="discarded")
    assert callbacks(client) == []
    succeed(client, claimed[4:])
    fired = callbacks(client)
    assert sorted(j.name for j in fired) == ["cleanup", "report"]
    report = next(j for j in fired if j.name == "report")
    assert report.payload["to"] == "ops"
    assert report.payload["batch"]["id"] == batch_id
    assert {k: v for k, v in report.payload["batch"]["counts"].items() if v} == {"succeeded": 4, "dead_lettered": 1}
    info = client.batches.get(batch_id)
    assert info is not None and info.status == "failed" and info.finished_at is not None
    assert client.store.transitions.batches.finish_if_done(batch_id) is False  # fired once, never again
    assert client.store.transitions.batches.sweep() == 0
    assert len(callbacks(client)) == 2


def test_an_open_batch_takes_children_until_closed_then_fires(client: jobsup.Client) -> None:
    batch = client.batches.open(on_success="report")
    batch.add([{"name": "a"}])
    succeed(client, [claim_one(client)])
    assert callbacks(client) == []  # open: more may come
    batch.add([{"name": "a"}, {"name": "a"}])
    assert batch.close() is True and batch.close() is False
    with pytest.raises(jobsup.BadInput, match="closed"):
        batch.add([{"name": "a"}])
    succeed(client, claim(client, "w1", limit=10))
    assert [j.name for j in callbacks(client)] == ["report"]
    assert client.batches.get(batch.id).total == 3  # type: ignore[union-attr]


def test_closing_a_batch_whose_children_all_ended_fires_it(client: jobsup.Client) -> None:
    batch = client.batches.open(on_complete="report")
    batch.add([{"name": "a"}])
    succeed(client, [claim_one(client)])
    batch.close()
    assert [j.name for j in callbacks(client)] == ["report"]


def test_a_batch_closed_in_the_callers_transaction_fires_when_its_children_have_ended(
    client: jobsup.Client,
) -> None:
    batch = client.batches.open(on_complete="report")
    batch.add([{"name": "a"}])
    succeed(client, [claim_one(client)])
    with client.database.engine.connect() as conn, conn.begin():
        assert client.store.transitions.batches.close(batch.id, connection=conn)
    assert [j.name for j in callbacks(client)] == ["report"]


def test_cancelling_a_batch_cancels_its_children_and_fires_on_failure(client: jobsup.Client) -> None:
    batch_id = client.batches.enqueue([{"name": "a"}] * 3, on_success="report", on_failure="cleanup")
    succeed(client, [claim_one(client)])
    assert client.batches.cancel(batch_id) == 2
    info = client.batches.get(batch_id)
    assert info is not None and info.status == "cancelled"
    assert [j.name for j in callbacks(client)] == ["cleanup"]


def test_the_sweep_fires_a_batch_whose_last_settle_did_not(client: jobsup.Client) -> None:
    batch_id = client.batches.enqueue([{"name": "a"}], on_complete="report")
    # The state a settle leaves when its process dies between its commit and its look.
    with client.database.transaction() as conn:
        conn.execute(job.update().values(status="succeeded", finished_at=func.now()))
    assert callbacks(client) == []
    assert client.store.transitions.batches.sweep() == 1
    assert [j.name for j in callbacks(client)] == ["report"]
    assert client.store.transitions.batches.sweep() == 0
    assert client.batches.get(batch_id).status == "succeeded"  # type: ignore[union-attr]


def test_bad_batches_are_refused_and_nothing_is_written(client: jobsup.Client, monkeypatch: Any) -> None:
    with pytest.raises(jobsup.UnknownJob, match="nobody-defines-this"):
        client.batches.enqueue([{"name": "a"}], on_complete="nobody-defines-this")
    with pytest.raises(jobsup.BadInput, match="payload is a mapping"):
        client.batches.enqueue([{"name": "a"}], on_complete=("report", [1, 2]))
    with pytest.raises(jobsup.BadInput, match=r"children\[1\]"):
        client.batches.enqueue([{"name": "a"}, {"payload": 1}], on_complete="report")
    monkeypatch.setattr(jobsup.client.batches, "MAX_BATCH", 3)
    with pytest.raises(jobsup.BadInput, match="at most 3 children"):
        client.batches.enqueue([{"name": "a"}] * 4, on_complete="report")
    with pytest.raises(jobsup.BadInput, match=r"children\[0\]: a batch's child cannot have a unique_key"):
        client.batches.enqueue([{"name": "a", "unique_key": "k"}], on_complete="report")
    assert (count(client, job), count(client, batch)) == (0, 0)


# -- retention ------------------------------------------------------------------------------------

DAY = 86400.0
AGES = {"succeeded": DAY, "dead_lettered": 7 * DAY, "cancelled": DAY}


def test_retention_deletes_a_workflow_only_once_every_step_is_past_its_age(client: jobsup.Client) -> None:
    wf = jobsup.Workflow("short")
    first = wf.add("a", step="first")
    wf.add("a", step="second", deps=[first])
    workflow_id = client.workflows.enqueue(wf)
    plain = client.enqueue("a")
    succeed(client, claim(client, "w1", limit=10))  # first, plain
    retention = client.store.retention
    later = datetime.now(UTC) + timedelta(days=2)
    assert sum(retention.purge(s, older_than=a, now=later) for s, a in AGES.items()) == 1  # plain, not the step
    assert client.get(plain) is None
    assert retention.purge_workflows_and_batches(AGES, now=later) == 0  # second is pending
    second = claim_one(client)
    fail(client, second, kind="discarded")
    assert retention.purge_workflows_and_batches(AGES, now=later) == 0  # dead letters are kept 7 days
    assert len(statuses(client, workflow_id)) == 2
    assert retention.purge_workflows_and_batches(AGES, now=later + timedelta(days=6)) == 2
    assert client.workflows.get(workflow_id) is None
    assert (count(client, job), count(client, workflow), count(client, job_dependency)) == (0, 0, 0)


def test_retention_deletes_a_finished_batch_with_its_children(client: jobsup.Client) -> None:
    batch_id = client.batches.enqueue([{"name": "a"}] * 3, on_complete="report")
    open_batch = client.batches.open(on_complete="report")
    open_batch.add([{"name": "b"}])
    succeed(client, claim(client, "w1", limit=10))  # the children, not yet the callback
    later = datetime.now(UTC) + timedelta(days=2)
    assert client.store.retention.purge_workflows_and_batches(AGES, batch=2, now=later) == 3
    assert client.batches.get(batch_id) is None
    assert client.batches.get(open_batch.id) is not None  # open: never finished, kept
    assert {j.name for j in client.list_jobs()} == {"report", "b"}


@pytest.mark.postgres
def test_the_last_two_children_ending_at_once_fire_the_batch_without_the_sweep(postgres_url: str) -> None:
    # Child B's end is held open in another transaction, as on another host whose own check
    # saw A still running: A's settle skips B, looks again after its commit, waits for B's
    # transaction to end, and fires. Without that second look only the sweep would.
    client = jobsup.Client(postgres_url)
    batch_id = client.batches.enqueue([{"name": "a"}, {"name": "a"}], on_complete="report")
    first, second = claim(client, "w1", limit=2)
    other_host = client.database.engine.connect()
    other = other_host.begin()
    other_host.execute(job.update().where(job.c.id == second.id).values(status="succeeded", finished_at=func.now()))
    settled = threading.Thread(target=succeed, args=(client, [first]))
    settled.start()
    wait_until(lambda: client.get(first.id).status == "succeeded", timeout=10, what="A to commit")  # type: ignore[union-attr]
    assert callbacks(client) == []  # A's second look waits for B's transaction
    other.commit()
    other_host.close()
    settled.join(10)
    assert [j.name for j in callbacks(client)] == ["report"]
    assert client.batches.get(batch_id).status == "succeeded"  # type: ignore[union-attr]
    client.close()
