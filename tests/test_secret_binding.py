"""Sealed values are bound to what they are for (security review 2026-12-03, findings 3 and
15), against the real databases: a row whose job type was changed does not open; a sealed
object given back as a value is refused; a schedule added again does not open the old one's
ciphertexts; version 1 envelopes still open and `jobsup keys rotate` re-seals them; a field
marked sensitive after its rows were written is masked on read and sealed by rotation."""

from __future__ import annotations

import base64
import json
import os
import threading
from typing import Annotated, Any

import pytest
from sqlalchemy import select, update

import jobsup
from jobsup.jobtypes import JobType
from jobsup.params import params_of
from jobsup.secrets import ENV, SealedParameterError
from jobsup.store.schema import job, recurring_job
from jobsup.worker.execute import execute

from helpers import claim_one, run_jobsup

SECRET = "Zm9v+YmFy/c2VjcmV0=="
K1 = "k1:" + base64.urlsafe_b64encode(bytes(range(32))).decode()
K2 = "k2:" + base64.urlsafe_b64encode(bytes(range(32, 64))).decode()

ran: list[Any] = []


@jobsup.job("bound-charge", params={"account": str, "token": Annotated[str, jobsup.Sensitive]})
def bound_charge(ctx: jobsup.JobContext, params: dict[str, Any]) -> None:
    ran.append(params)


@jobsup.job("bound-echo")  # untyped: hands back whatever it is given
def bound_echo(ctx: jobsup.JobContext, payload: Any) -> Any:
    ran.append(payload)
    return payload


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, K1)


def stored(client: jobsup.Client, job_id: int) -> tuple[Any, str | None]:
    with client.database.read() as conn:
        row = conn.execute(select(job.c.payload, job.c.key_id).where(job.c.id == job_id)).one()
    return json.loads(row.payload), row.key_id


def run_next(client: jobsup.Client, now: Any = None) -> Any:
    ran.clear()
    return execute(claim_one(client, now=now), threading.Event())


def v1_envelope(binding: str, field: str, value: Any) -> dict[str, str]:
    """A value sealed as jobsup sealed it before the job type was bound (version 1)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    key = base64.urlsafe_b64decode(K1.split(":", 1)[1])
    nonce = os.urandom(12)
    box = AESGCM(key).encrypt(nonce, json.dumps(value).encode(), f"jobsup.v1|{binding}|{field}".encode())
    return {"$sealed": f"k1.{base64.urlsafe_b64encode(nonce + box).decode()}"}


def test_a_row_whose_job_type_was_changed_does_not_open(url: str) -> None:
    client = jobsup.Client(url)
    job_id = client.enqueue("bound-charge", {"account": "acme", "token": SECRET})
    with client.database.transaction() as conn:  # a database writer without the key
        conn.execute(update(job).where(job.c.id == job_id).values(name="bound-echo"))
    outcome = run_next(client)
    assert outcome.kind == "failed" and ran == [], outcome
    assert "SealedParameterError" in outcome.error and "job type was changed" in outcome.error
    assert SECRET not in str(outcome.result)


@pytest.mark.parametrize("where", ["enqueue", "add_recurring"])
def test_a_sealed_object_given_as_a_value_is_refused(url: str, where: str) -> None:
    client = jobsup.Client(url)
    first = client.enqueue("bound-charge", {"account": "acme", "token": SECRET})
    ciphertext = stored(client, first)[0]["token"]
    payload = {"account": "acme", "token": ciphertext}
    with pytest.raises(jobsup.InvalidPayload, match=r"field .token. is a sealed object.*pass the value itself"):
        if where == "enqueue":
            client.enqueue("bound-echo", payload)
        else:
            client.add_recurring("nightly", job="bound-echo", cron="* * * * *", payload=payload)
    assert [j.id for j in client.list_jobs()] == [first] and client.schedules.list() == []


def test_a_schedule_added_again_does_not_open_the_old_ones_ciphertexts(url: str) -> None:
    client = jobsup.Client(url)
    client.add_recurring("nightly", job="bound-charge", cron="0 3 * * *", payload={"account": "a", "token": SECRET})
    with client.database.read() as conn:
        old = conn.execute(select(recurring_job.c.payload)).scalar_one()
    client.schedules.remove("nightly")
    client.add_recurring("nightly", job="bound-charge", cron="0 3 * * *", payload={"account": "a", "token": "new"})
    with client.database.transaction() as conn:  # the old ciphertext written back by a database writer
        conn.execute(update(recurring_job).values(payload=old))
    schedule = client.store.recurring.recurring_get("nightly")
    assert schedule is not None
    with pytest.raises(SealedParameterError, match="recurring schedule 'nightly': field 'token' does not open"):
        client.store.transitions.fire(client.store.recurring, schedule, now=schedule.next_run_at)


def test_a_schedule_whose_job_type_was_changed_does_not_open(url: str) -> None:
    client = jobsup.Client(url)
    client.add_recurring("nightly", job="bound-charge", cron="0 3 * * *", payload={"account": "a", "token": SECRET})
    with client.database.transaction() as conn:
        conn.execute(update(recurring_job).values(job_name="bound-echo"))
    schedule = client.store.recurring.recurring_get("nightly")
    assert schedule is not None
    with pytest.raises(SealedParameterError, match="does not open"):
        client.store.transitions.fire(client.store.recurring, schedule, now=schedule.next_run_at)
    assert client.list_jobs() == []


def test_version_1_envelopes_still_open_and_keys_rotate_reseals_them(url: str) -> None:
    client = jobsup.Client(url)
    job_id = client.enqueue("bound-charge", {"account": "acme", "token": "placeholder"})
    legacy_job = {"account": "acme", "token": v1_envelope(f"job:{job_id}", "token", SECRET)}
    client.add_recurring("nightly", job="bound-charge", cron="0 3 * * *", payload={"account": "a", "token": "x"})
    legacy_schedule = {"account": "a", "token": v1_envelope("recurring:nightly", "token", SECRET)}
    with client.database.transaction() as conn:  # rows as a version before this one wrote them
        conn.execute(update(job).where(job.c.id == job_id).values(payload=json.dumps(legacy_job), key_id="k1"))
        conn.execute(update(recurring_job).values(payload=json.dumps(legacy_schedule), key_id="k1", seal_id=None))
    assert client.get(job_id).payload == {"account": "acme", "token": "***"}  # type: ignore[union-attr]
    done = run_jobsup("--database-url", url, "keys", "rotate", "--json", env={ENV: K1})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"key": "k1", "resealed": 2, "sealed": 0, "failed": {}, "left": 0}
    payload, key_id = stored(client, job_id)
    assert key_id == "k1" and payload["token"]["$sealed"].startswith("v2:k1.")
    assert run_next(client).kind == "succeeded" and ran == [{"account": "acme", "token": SECRET}]
    schedule = client.store.recurring.recurring_get("nightly")
    assert schedule is not None and schedule.seal_id and schedule.payload["token"]["$sealed"].startswith("v2:k1.")
    assert client.store.transitions.fire(client.store.recurring, schedule, now=schedule.next_run_at) == "fired"
    outcome = run_next(client, now=schedule.next_run_at)
    assert outcome.kind == "succeeded" and ran == [{"account": "a", "token": SECRET}]


def test_a_version_1_envelope_opens_in_the_worker_before_rotation(url: str) -> None:
    client = jobsup.Client(url)
    job_id = client.enqueue("bound-charge", {"account": "acme", "token": "placeholder"})
    legacy = {"account": "acme", "token": v1_envelope(f"job:{job_id}", "token", SECRET)}
    with client.database.transaction() as conn:
        conn.execute(update(job).where(job.c.id == job_id).values(payload=json.dumps(legacy), key_id="k1"))
    assert run_next(client).kind == "succeeded" and ran == [{"account": "acme", "token": SECRET}]


def test_a_field_marked_sensitive_later_is_masked_on_read_and_sealed_by_rotate(url: str) -> None:
    plain = params_of({"to": str, "token": str}, job="notify-later").schema
    secret = params_of({"to": str, "token": Annotated[str, jobsup.Sensitive]}, job="notify-later").schema
    before = jobsup.Client(url)
    before.store.definitions.publish([JobType("notify-later", params=plain)], instance="v1")
    job_id = before.enqueue("notify-later", {"to": "ops", "token": "xoxb-plain-secret-123"})
    before.add_recurring("daily", job="notify-later", cron="0 9 * * *", payload={"to": "ops", "token": "xoxb-1"})
    assert stored(before, job_id)[1] is None  # written in clear: the field was not sensitive yet
    before.store.definitions.publish([JobType("notify-later", params=secret)], instance="v2")
    after = jobsup.Client(url)
    assert after.get(job_id).payload == {"to": "ops", "token": "***"}  # type: ignore[union-attr]
    assert after.list_jobs()[0].payload == {"to": "ops", "token": "***"}
    assert after.schedules.list()[0].payload == {"to": "ops", "token": "***"}
    done = run_jobsup("--database-url", url, "keys", "rotate", "--json", env={ENV: f"{K2},{K1}"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"key": "k2", "resealed": 0, "sealed": 2, "failed": {}, "left": 0}
    payload, key_id = stored(after, job_id)
    assert key_id == "k2" and "xoxb" not in json.dumps(payload) and payload["to"] == "ops"
    with after.database.read() as conn:
        row = conn.execute(select(recurring_job.c.payload, recurring_job.c.key_id)).one()
    assert row.key_id == "k2" and "xoxb" not in row.payload
    again = run_jobsup("--database-url", url, "keys", "rotate", "--json", env={ENV: f"{K2},{K1}"})
    assert json.loads(again.stdout) == {"key": "k2", "resealed": 0, "sealed": 0, "failed": {}, "left": 0}
