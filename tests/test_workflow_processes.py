"""Workflows, batches and triggers run by real `jobsup start` supervisors: results passed
downstream, a workflow factory started by name, and the fan-in of batches and triggers
exactly once while four supervisors compete on one database, and across a kill -9 between
a child's settle and its batch's callback."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import jobsup

from harness import Supervisor, records, status_of
from helpers import wait_until

pytestmark = pytest.mark.slow


def ran(record: Path, job_id: int) -> list[dict[str, Any]]:
    return [r for r in records(record, job_id) if r["what"] == "ran"]


def finished(client: jobsup.Client, workflow_id: int) -> jobsup.WorkflowInfo | None:
    info = client.workflows.get(workflow_id)
    return info if info is not None and info.status != "running" else None


def test_a_workflow_runs_on_a_supervisor_and_each_step_sees_its_upstream(
    client: jobsup.Client, start: Any, record: Path
) -> None:
    wf = jobsup.Workflow("diamond")
    extract = wf.add("step", {"result": {"rows": 3}}, step="extract")
    left = wf.add("step", {"result": "left"}, step="left", deps=[extract])
    right = wf.add("step", {"fail": True}, step="right", deps=[extract], max_attempts=1)
    wf.add("step", step="report", deps=[left, right], on_failure="run")
    wf.add("step", step="after-right", deps=[right])
    workflow_id = client.workflows.enqueue(wf)
    start("--queue", "default=2")
    info = wait_until(lambda: finished(client, workflow_id), timeout=60, what="the workflow to finish")
    by_name = {s.name: s for s in info.steps}
    assert {name: s.status for name, s in by_name.items()} == {
        "extract": "succeeded",
        "left": "succeeded",
        "right": "dead_lettered",
        "report": "succeeded",
        "after-right": "cancelled",
    }
    assert info.status == "failed"
    assert [r["upstream"] for r in ran(record, by_name["left"].job_id)] == [{"extract": {"rows": 3}}]
    assert [r["upstream"] for r in ran(record, by_name["report"].job_id)] == [{"left": "left", "right": None}]
    assert ran(record, by_name["after-right"].job_id) == []


def test_a_workflow_factory_starts_its_workflow_once_per_job(client: jobsup.Client, start: Any, record: Path) -> None:
    starter = client.enqueue("etl-factory", {"day": "2026-12-01"})
    start()
    wait_until(lambda: status_of(client, starter) == "succeeded", timeout=60, what="the factory job")
    result = client.get(starter).result  # type: ignore[union-attr]
    info = wait_until(lambda: finished(client, result["workflow_id"]), timeout=60, what="the workflow")
    assert info.status == "succeeded" and [s.name for s in info.steps] == ["extract", "report"]
    assert len(client.workflows.list()) == 1
    assert client.get(info.steps[1].job_id).result == "report for 2026-12-01"  # type: ignore[union-attr]


def callback_runs(client: jobsup.Client, record: Path) -> dict[int, list[dict[str, Any]]]:
    """Each batch's callback runs, by batch id."""
    runs: dict[int, list[dict[str, Any]]] = {}
    for job in client.list_jobs(limit=10_000):
        if job.name == "callback" and isinstance(job.payload, dict) and "batch" in job.payload:
            runs.setdefault(job.payload["batch"]["id"], []).extend(ran(record, job.id))
    return runs


@pytest.mark.many_connections
def test_batches_and_triggers_fire_exactly_once_under_four_competing_supervisors(
    client: jobsup.Client, start: Any, record: Path, url: str
) -> None:
    small = [
        client.batches.enqueue([{"name": "step"}] * 10, on_complete="callback", on_success="callback")
        for _ in range(20)
    ]
    large = client.batches.enqueue([{"name": "step"}] * 2000, on_complete="callback")
    parents = client.enqueue_many(
        [{"name": "step", "then": [jobsup.Trigger("callback", on="succeeded")]} for _ in range(200)]
    )
    for _ in range(4):  # the sweep (maintenance) all but off: the settles alone must fire
        start("--queue", "default=2:4", "--claim-batch", "8", maintenance_interval="300s")

    def all_fired() -> dict[int, list[dict[str, Any]]] | None:
        runs = callback_runs(client, record)
        return runs if len(runs) == 21 and all(len(r) >= (2 if b in small else 1) for b, r in runs.items()) else None

    runs = wait_until(
        all_fired, timeout=240, what=lambda: f"21 batches to fire, saw {len(callback_runs(client, record))}"
    )
    wait_until(lambda: not client.list_jobs(status="pending") and not client.list_jobs(status="running"), timeout=60)
    runs = callback_runs(client, record)
    for batch_id in small:
        assert len(runs[batch_id]) == 2, f"batch {batch_id}: on_complete and on_success once each"
        assert runs[batch_id][0]["payload"]["batch"]["counts"]["succeeded"] == 10
    assert len(runs[large]) == 1
    assert runs[large][0]["payload"]["batch"]["counts"]["succeeded"] == 2000
    followers = Counter(j.parent_id for j in client.list_jobs(limit=10_000) if j.name == "callback" and j.parent_id)
    assert set(followers) == set(parents) and set(followers.values()) == {1}
    assert all(len(ran(record, job_id)) == 1 for job_id in followers)
    ran_by = {r["pid"] for job_id in parents for r in ran(record, job_id)}
    assert len(ran_by) > 2, "the supervisors did not compete"


@pytest.mark.postgres
def test_a_kill_between_a_childs_settle_and_its_callback_loses_nothing(
    postgres_url: str, record: Path, tmp_path: Path
) -> None:
    # PostgreSQL only: SQLite fires the callback in the settle's own transaction, so it has
    # no such window.
    client = jobsup.Client(postgres_url)
    batch_id = client.batches.enqueue([{"name": "step"}], on_complete="callback")
    (child,) = [j.id for j in client.list_jobs() if j.name == "step"]
    # The worker hangs in its look after the settle committed; the test kills it there.
    supervisor = Supervisor(
        postgres_url, record, tmp_path / "supervisor.log", "--queue", "default=1", faults="worker:batches@0s+600s:hang"
    )
    try:
        wait_until(lambda: status_of(client, child) == "succeeded", timeout=60, what="the child to settle")
        assert callback_runs(client, record) == {}
        (worker,) = supervisor.wait_for_workers(1)
        assert worker == ran(record, child)[0]["pid"], "the worker that settled the child is not the one hanging"
        os.kill(worker, signal.SIGKILL)
        runs = wait_until(
            lambda: callback_runs(client, record).get(batch_id), timeout=60, what="the sweep to fire the batch"
        )
        assert len(runs) == 1
        assert len(ran(record, child)) == 1, "the child ran again"
    finally:
        supervisor.stop()
        client.close()
