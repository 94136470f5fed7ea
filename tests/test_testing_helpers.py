"""`jobsup.testing` (a user's suite that uses it: examples/testing, run by test_examples.py),
and what it promises, on each database: drained jobs settle as a worker's
do, with what they set off; inline runs an enqueue's jobs once it has committed."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import update

import jobsup
from jobsup.store.schema import job as job_table
from jobsup.testing import assert_enqueued, drain, inline, refute_enqueued, run_job


@jobsup.job("helpers-upstream")
def upstream(ctx: jobsup.JobContext, payload: Any) -> Any:
    return {"rows": 3}


@jobsup.job("helpers-report")
def report(ctx: jobsup.JobContext, payload: Any) -> Any:
    return {"seen": ctx.upstream["extract"]["rows"]}  # a workflow step reads what it depends on


@jobsup.job("helpers-forever")
def forever(ctx: jobsup.JobContext, payload: Any) -> None:
    ctx.client.enqueue("helpers-forever")


@jobsup.job("helpers-async")
async def awaited(ctx: jobsup.JobContext, payload: Any) -> Any:
    return {"doubled": payload["n"] * 2, "client": ctx.client is not None}


def test_drain_runs_a_workflow_through_its_steps(client: jobsup.Client) -> None:
    wf = jobsup.Workflow("helpers-etl")
    extract = wf.add("helpers-upstream", step="extract")
    wf.add("helpers-report", deps=[extract], step="report")
    workflow_id = client.workflows.enqueue(wf)
    assert drain(client) == {"succeeded": 2}
    info = client.workflows.get(workflow_id)
    assert info is not None and info.status == "succeeded"
    assert assert_enqueued(client, "helpers-report", status="succeeded").result == {"seen": 3}


def test_drain_leaves_jobs_not_yet_due_unless_asked(client: jobsup.Client) -> None:
    later = client.enqueue("helpers-upstream", delay="1h")
    assert drain(client) == {}
    assert client.get(later).status == "pending"  # type: ignore[union-attr]
    assert drain(client, with_scheduled=True) == {"succeeded": 1}


def test_a_job_that_enqueues_itself_stops_the_drain_with_a_reason(client: jobsup.Client) -> None:
    client.enqueue("helpers-forever")
    with pytest.raises(RuntimeError, match="drain ran 20 jobs and more keep coming"):
        drain(client, max_jobs=20)
    with pytest.raises(RuntimeError, match="drain ran 5 jobs"), inline(client, max_jobs=5):
        client.enqueue("helpers-forever")  # the event bus would only log it: raised as the block ends


def test_inline_runs_jobs_after_the_commit_and_never_a_rolled_back_one(client: jobsup.Client) -> None:
    with inline(client) as counts:
        at_once = client.enqueue("helpers-upstream")
        assert client.get(at_once).status == "succeeded"  # type: ignore[union-attr]
        with client.database.engine.begin() as conn:
            job_id = client.enqueue("helpers-upstream", connection=conn)
            assert client.get(job_id) is None  # not committed: not visible, not run
        assert client.get(job_id).status == "pending"  # type: ignore[union-attr]  # runs as the block ends
        with pytest.raises(ZeroDivisionError), client.database.engine.begin() as conn:
            rolled_back = client.enqueue("helpers-upstream", connection=conn)
            1 / 0  # noqa: B018
    assert client.get(job_id).status == "succeeded"  # type: ignore[union-attr]
    assert client.get(rolled_back) is None and counts == {"succeeded": 2}
    client.enqueue("helpers-upstream")  # after the block: not run
    refute_enqueued(client, "helpers-upstream", status="pending", id=job_id)
    assert_enqueued(client, "helpers-upstream", status="pending")


def test_assert_enqueued_matches_a_payload_subset_and_says_what_it_found(client: jobsup.Client) -> None:
    client.enqueue("helpers-upstream", {"to": {"name": "ann", "mail": "a@x"}, "n": 1}, priority=3)
    assert assert_enqueued(client, "helpers-upstream", {"to": {"name": "ann"}}, priority=3).payload["n"] == 1
    with pytest.raises(AssertionError, match=r"no 'helpers-upstream' job with payload holding \{'n': 2\}.*'n': 1"):
        assert_enqueued(client, "helpers-upstream", {"n": 2})
    with pytest.raises(AssertionError, match="1 'helpers-upstream' job"):
        refute_enqueued(client, "helpers-upstream", {"n": 1})
    with pytest.raises(jobsup.BadInput, match="a job has no field 'colour'"):
        assert_enqueued(client, "helpers-upstream", colour="red")


def test_run_job_calls_one_function_async_too(client: jobsup.Client) -> None:
    assert run_job("helpers-async", {"n": 21}, client=client) == {"doubled": 42, "client": True}
    with pytest.raises(jobsup.UnknownJob, match="import the module that defines it"):
        run_job("helpers-nobody")


def test_a_corrupt_row_is_discarded_as_a_worker_would(client: jobsup.Client) -> None:
    job_id = client.enqueue("helpers-upstream")
    with client.database.transaction() as conn:  # a payload no enqueue would write
        conn.execute(update(job_table).where(job_table.c.id == job_id).values(payload="{not json"))
    assert drain(client) == {"discarded": 1, "dead_lettered": 1}
