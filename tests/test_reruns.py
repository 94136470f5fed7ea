"""Rerun (issue 30, item 8): a new job made from a finished one, linked both ways, built from
the stored row so a sealed value stays sealed (and opens, for the new job only) and a masked
one is never written back; refused for a job not finished; from the client, the command line,
the API and the dashboard, each audited."""

from __future__ import annotations

import base64
import json
import threading
from typing import Annotated, Any

import pytest
from sqlalchemy import select

import jobsup
from jobsup.secrets import ENV, SealedParameterError, job_binding, required_keyring
from jobsup.store.schema import job
from jobsup.worker.execute import execute

from helpers import claim_one, fail, run_jobsup, succeed
from webhelpers import OPERATOR, csrf_of, log_in, web

TOKEN = "tok-Rerun-never-shown-42"
KEY = "k1:" + base64.urlsafe_b64encode(bytes(range(32))).decode()
ran: list[Any] = []


@jobsup.job("rerun-charge", params={"account": str, "token": Annotated[str, jobsup.Sensitive]}, queue="pay")
def rerun_charge(ctx: jobsup.JobContext, params: dict[str, Any]) -> None:
    ran.append(params)


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, KEY)


def stored_payload(client: jobsup.Client, job_id: int) -> str:
    with client.database.read() as conn:
        return str(conn.execute(select(job.c.payload).where(job.c.id == job_id)).scalar_one())


def test_a_rerun_copies_a_finished_job_and_links_both_ways(url: str) -> None:
    client = jobsup.Client(url)
    first = client.enqueue("rerun-plain", {"n": 1}, queue="q", priority=5, max_attempts=2, allow_unknown=True)
    succeed(client, [claim_one(client, queue="q")], result='"done"')
    again = client.rerun(first, actor="ops:ann")
    new, old = client.get(again), client.get(first)
    assert new is not None and old is not None
    assert (new.name, new.queue, new.priority, new.max_attempts, new.payload) == ("rerun-plain", "q", 5, 2, {"n": 1})
    assert (new.status, new.attempts, new.result, new.rerun_of, new.actor) == ("pending", 0, None, first, "ops:ann")
    assert old.reruns == (again,) and old.status == "succeeded" and old.result == "done"  # the original untouched
    [entry] = client.audit.list(action="job.rerun")
    assert (entry.actor, entry.target, entry.job_ids) == ("ops:ann", str(first), (again,))


def test_only_a_finished_job_is_rerun(url: str) -> None:
    client = jobsup.Client(url)
    waiting = client.enqueue("rerun-plain", {}, allow_unknown=True)
    with pytest.raises(jobsup.BadInput, match=f"job {waiting} is pending: a rerun copies a finished job"):
        client.rerun(waiting)
    with pytest.raises(jobsup.JobNotFound, match="no job with id 999999"):
        client.rerun(999999)
    refusals = [(e.target, e.outcome) for e in client.audit.list(action="job.rerun")]
    assert sorted(refusals) == sorted([(str(waiting), "refused"), ("999999", "not_found")])
    assert len(client.list_jobs()) == 1  # nothing made


@jobsup.job("rerun-keyed", concurrency={"key": "tenant", "limit": 2})
def rerun_keyed(ctx: jobsup.JobContext, params: Any) -> None: ...


def test_a_rerun_keeps_the_key_and_the_first_budget_of_attempts(url: str) -> None:
    client = jobsup.Client(url)
    first = client.enqueue("rerun-keyed", {"tenant": "t1"}, max_attempts=2)
    for _ in range(2):
        fail(client, claim_one(client), error="RuntimeError: no")
    assert client.dead_letters.retry(first)  # its max_attempts is now 4: its used 2 and a budget of 2
    fail(client, claim_one(client), error="RuntimeError: no")
    fail(client, claim_one(client), error="RuntimeError: no")
    old = client.get(first)
    assert old is not None and (old.status, old.max_attempts) == ("dead_lettered", 4)
    new = client.get(client.rerun(first))
    assert new is not None
    assert (new.max_attempts, new.concurrency_key) == (2, old.concurrency_key)  # counted under the same key


def test_a_sealed_value_stays_sealed_and_opens_for_the_new_job_only(url: str) -> None:
    client = jobsup.Client(url)
    first = client.enqueue("rerun-charge", {"account": "a", "token": TOKEN})
    fail(client, claim_one(client, queue="pay"), kind="discarded", error="Discard: no")
    assert client.get(first).status == "dead_lettered"  # type: ignore[union-attr]
    again = client.rerun(first)
    assert TOKEN not in stored_payload(client, again)  # sealed at rest, to its own id
    with pytest.raises(SealedParameterError):  # not the old job's ciphertext copied
        required_keyring().unseal(json.loads(stored_payload(client, again)), job_binding(first, "rerun-charge"))
    assert client.get(again).payload == {"account": "a", "token": "***"}  # type: ignore[union-attr]
    ran.clear()
    outcome = execute(claim_one(client, queue="pay"), threading.Event())
    assert outcome.kind == "succeeded" and ran == [{"account": "a", "token": TOKEN}]


def test_the_command_line_the_api_and_the_dashboard_rerun(url: str) -> None:
    client = jobsup.Client(url)
    first = client.enqueue("rerun-plain", {"n": 2}, allow_unknown=True)
    client.cancel(first)
    done = run_jobsup("--database-url", url, "jobs", "rerun", str(first), "--json")
    assert done.returncode == 0, done.stderr
    by_cli = json.loads(done.stdout)["id"]
    refused = run_jobsup("--database-url", url, "jobs", "rerun", str(by_cli))
    assert refused.returncode == 2 and "is pending: a rerun copies a finished job" in refused.stderr
    with web(url) as http:
        by_api = http.post(f"/api/v1/jobs/{first}/rerun", headers=OPERATOR).json()
        assert by_api["rerun_of"] == first
        assert http.post(f"/api/v1/jobs/{by_cli}/rerun", headers=OPERATOR).status_code == 400
        assert log_in(http).status_code == 303
        page = http.get(f"/jobs/{first}").text
        assert f'action="/actions/jobs/{first}/rerun"' in page and f'href="/jobs/{by_cli}"' in page
        answer = http.post(
            f"/actions/jobs/{first}/rerun", data={"csrf": csrf_of(http, f"/jobs/{first}"), "back": f"/jobs/{first}"}
        )
        assert answer.status_code == 200 and "is a rerun of job" in answer.text
    assert client.get(first).reruns == (by_cli, by_api["id"], by_api["id"] + 1)  # type: ignore[union-attr]
    assert next(e.actor for e in client.audit.list(action="job.rerun")) == "web:alice"


def test_a_sealed_job_is_not_rerun_where_no_key_opens_it(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    client = jobsup.Client(url)
    first = client.enqueue("rerun-charge", {"account": "a", "token": TOKEN})
    client.cancel(first)
    monkeypatch.delenv(ENV)
    with pytest.raises(jobsup.ConfigurationError, match="JOBSUP_ENCRYPTION_KEYS"):
        client.rerun(first)
    assert len(client.list_jobs()) == 1


def test_the_dashboard_refuses_a_reader_and_explains_a_missing_job(url: str) -> None:
    from webhelpers import PASSWORD

    client = jobsup.Client(url)
    first = client.enqueue("rerun-plain", {}, allow_unknown=True)
    client.cancel(first)
    with web(url) as http:
        assert log_in(http, "bob", PASSWORD).status_code == 303  # a reader
        token = csrf_of(http, f"/jobs/{first}")
        for action in (f"/actions/jobs/{first}/rerun", "/actions/dead/purge"):
            refused = http.post(action, data={"csrf": token, "older_than": "0s"})
            assert refused.status_code == 403 and "operator role" in refused.text, action
        assert log_in(http).status_code == 303  # an operator
        token = csrf_of(http, f"/jobs/{first}")
        missing = http.post("/actions/jobs/999999/rerun", data={"csrf": token})
        assert missing.status_code == 404 and "no job with id 999999" in missing.text
        assert "Traceback" not in missing.text
    assert client.get(first).reruns == ()  # type: ignore[union-attr]
