"""`jobsup workflows` and `jobsup batches`, the real command on every real database: list,
show, cancel and retry say what the client's calls say, and an unknown id is one line."""

from __future__ import annotations

import json

import jobsup

from helpers import claim, fail, run_jobsup


def cli(url: str, *args: str) -> tuple[int, str]:
    done = run_jobsup(*args, "--database-url", url)
    return done.returncode, done.stdout + done.stderr


def test_a_workflow_listed_shown_cancelled_and_retried(client: jobsup.Client, url: str) -> None:
    flow = jobsup.Workflow("nightly")
    extract = flow.add("a", step="extract")
    flow.add("a", step="load", deps=extract)
    workflow_id = client.workflows.enqueue(flow, allow_unknown=True)

    code, out = cli(url, "workflows", "list", "--json")
    assert code == 0
    assert [(w["id"], w["name"], w["status"]) for w in json.loads(out)] == [(workflow_id, "nightly", "running")]
    code, out = cli(url, "workflows", "show", str(workflow_id))
    assert code == 0 and "nightly" in out and "1 waiting, 1 pending" in out

    code, out = cli(url, "workflows", "cancel", str(workflow_id), "--actor", "ops")
    assert code == 0
    assert client.workflows.get(workflow_id).status == "cancelled"  # type: ignore[union-attr]
    code, out = cli(url, "workflows", "retry", str(workflow_id), "--actor", "ops")
    assert code == 0
    assert client.workflows.get(workflow_id).status == "running"  # type: ignore[union-attr]

    code, out = cli(url, "workflows", "show", "999")
    assert code == 1 and out.strip() == "jobsup: no workflow with id 999"


def test_a_batch_listed_shown_and_cancelled(client: jobsup.Client, url: str) -> None:
    batch_id = client.batches.enqueue([{"name": "a"}] * 3, name="mail-out", allow_unknown=True)
    fail(client, claim(client, "w1", limit=1)[0], kind="discarded")

    code, out = cli(url, "batches", "list", "--unfinished")
    assert code == 0 and "mail-out" in out and "2 pending, 1 dead_lettered" in out
    code, out = cli(url, "batches", "show", str(batch_id), "--json")
    assert code == 0 and json.loads(out)["counts"]["dead_lettered"] == 1

    code, out = cli(url, "batches", "cancel", str(batch_id))
    assert code == 0 and "cancelled 2 children" in out
    assert client.batches.get(batch_id).status == "cancelled"  # type: ignore[union-attr]
    code, out = cli(url, "batches", "list", "--unfinished")
    assert code == 0 and "mail-out" not in out
