"""Sensitive parameters sealed at rest (issue 11, part 3), in one process against the real
databases: the value is stored only sealed and shown only masked, the worker opens it, a
ciphertext moved to another job does not open, keys rotate. (`test_secret_processes.py`
checks the same through `jobsup start`, its logs and `/metrics`.)"""

from __future__ import annotations

import base64
import dataclasses
import json
import threading
from pathlib import Path
from typing import Annotated, Any

import pytest
from sqlalchemy import select, update

import jobsup
from jobsup.secrets import ENV
from jobsup.store.schema import job, recurring_job
from jobsup.worker.execute import execute

from helpers import claim_one, fail, run_jobsup

SECRET = "tok-Zq81vXw3-secret"
# Fixed test keys (xdist workers must collect the same parameters); a real one comes from
# `jobsup keys generate`.
K1 = "k1:" + base64.urlsafe_b64encode(bytes(range(32))).decode()
K2 = "k2:" + base64.urlsafe_b64encode(bytes(range(32, 64))).decode()
OTHER_K1 = "k1:" + base64.urlsafe_b64encode(bytes(range(64, 96))).decode()

opened: list[Any] = []


@jobsup.job("sealed-call", params={"to": str, "token": Annotated[str, jobsup.Sensitive]})
def sealed_call(ctx: jobsup.JobContext, params: dict[str, Any]) -> None:
    opened.append(params)
    if params["to"] == "fail":
        ctx.log.info("calling with %s", params["token"])
        raise RuntimeError(f"the partner refused token {params['token']}")


@jobsup.job("sealed-by-name", params={"api_key": str}, sensitive={"api_key"})
def sealed_by_name(ctx: jobsup.JobContext, params: dict[str, Any]) -> None:
    opened.append(params)


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, K1)


def raw(client: jobsup.Client, job_id: int) -> Any:
    with client.database.read() as conn:
        row = conn.execute(select(job.c.payload, job.c.key_id).where(job.c.id == job_id)).one()
    return json.loads(row.payload), row.key_id


def run_next(client: jobsup.Client) -> Any:
    opened.clear()
    return execute(claim_one(client), threading.Event())


def test_a_sensitive_value_is_stored_sealed_shown_masked_and_opened_by_the_worker(url: str) -> None:
    client = jobsup.Client(url)
    job_id = client.enqueue("sealed-call", {"to": "a@example.com", "token": SECRET})
    payload, key_id = raw(client, job_id)
    assert key_id == "k1" and payload["to"] == "a@example.com"
    assert set(payload["token"]) == {"$sealed"} and payload["token"]["$sealed"].startswith("v2:k1.")
    assert SECRET not in json.dumps(payload)
    assert client.get(job_id).payload == {"to": "a@example.com", "token": "***"}  # type: ignore[union-attr]
    assert client.list_jobs()[0].payload["token"] == "***"
    ran = run_next(client)
    assert ran.kind == "succeeded" and opened == [{"to": "a@example.com", "token": SECRET}]


def test_sensitive_by_name_and_every_enqueue_path_seals(url: str) -> None:
    client = jobsup.Client(url)
    ids = client.enqueue_many([{"name": "sealed-by-name", "payload": {"api_key": f"{SECRET}-{n}"}} for n in range(3)])
    for n, job_id in enumerate(ids):
        payload, key_id = raw(client, job_id)
        assert key_id == "k1" and SECRET not in json.dumps(payload)
        assert run_next(client).kind == "succeeded" and opened == [{"api_key": f"{SECRET}-{n}"}]


def test_without_a_key_a_sensitive_enqueue_is_refused_and_nothing_written(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV)
    client = jobsup.Client(url)
    with pytest.raises(jobsup.ConfigurationError, match=f"{ENV} is not set"):
        client.enqueue("sealed-call", {"to": "a", "token": SECRET})
    assert client.list_jobs() == []


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("k1", "entry 1 is not id:key"),
        ("k1:c2hvcnQ", "key 'k1' is not 16, 24 or 32 bytes"),
        ("bad id!" + K1[2:], "entry 1 is not id:key"),
        (f"{K1},{K1}", "names key 'k1' twice"),
    ],
)
def test_a_malformed_key_is_a_clear_error_and_nothing_written(
    url: str, monkeypatch: pytest.MonkeyPatch, value: str, words: str
) -> None:
    monkeypatch.setenv(ENV, value)
    client = jobsup.Client(url)
    with pytest.raises(jobsup.ConfigurationError, match=words):
        client.enqueue("sealed-call", {"to": "a", "token": SECRET})
    assert client.list_jobs() == []


def test_a_ciphertext_moved_to_another_job_does_not_open(url: str) -> None:
    client = jobsup.Client(url)
    first = client.enqueue("sealed-call", {"to": "a", "token": SECRET})
    second = client.enqueue("sealed-call", {"to": "b", "token": "other"})
    stolen, _ = raw(client, first)
    with client.database.transaction() as conn:
        moved = {"to": "b", "token": stolen["token"]}
        conn.execute(update(job).where(job.c.id == second).values(payload=json.dumps(moved)))
    assert run_next(client).kind == "succeeded"  # the first job, untouched
    ran = run_next(client)
    assert ran.kind == "failed" and opened == []
    assert "SealedParameterError" in ran.error and "copied from another job" in ran.error  # type: ignore[operator]


def test_a_wrong_or_missing_key_fails_the_attempt_with_a_clear_error(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    client = jobsup.Client(url)
    client.enqueue("sealed-call", {"to": "a", "token": SECRET})
    client.enqueue("sealed-call", {"to": "a", "token": SECRET})
    monkeypatch.setenv(ENV, OTHER_K1)  # the same id, another key
    ran = run_next(client)
    assert ran.kind == "failed" and "does not open with key 'k1'" in ran.error  # type: ignore[operator]
    monkeypatch.setenv(ENV, K2)
    ran = run_next(client)
    assert ran.kind == "failed" and "sealed with key 'k1', which JOBSUP_ENCRYPTION_KEYS does not hold" in ran.error  # type: ignore[operator]


def test_an_error_and_a_log_line_naming_the_secret_are_scrubbed(url: str) -> None:
    client = jobsup.Client(url)
    client.enqueue("sealed-call", {"to": "fail", "token": SECRET})
    ran = run_next(client)
    assert ran.kind == "failed" and SECRET not in ran.error and "***" in ran.error  # type: ignore[operator]


def test_a_dead_letter_retry_keeps_the_ciphertext(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    client = jobsup.Client(url)
    job_id = client.enqueue("sealed-call", {"to": "a", "token": SECRET}, max_attempts=1)
    before = raw(client, job_id)
    monkeypatch.setenv(ENV, K2)  # this worker lacks k1: the only attempt fails
    claimed = claim_one(client)
    ran = execute(claimed, threading.Event())
    assert ran.kind == "failed"
    assert fail(client, claimed, error=str(ran.error)) == "dead_lettered"
    assert client.dead_letters.retry(job_id)
    assert raw(client, job_id) == before  # the ciphertext, not the mask, nor a re-seal
    monkeypatch.setenv(ENV, K1)
    assert run_next(client).kind == "succeeded" and opened == [{"to": "a", "token": SECRET}]


def test_rotation_reseals_under_the_newest_key_and_old_rows_still_open_meanwhile(url: str, tmp_path: Path) -> None:
    client = jobsup.Client(url)
    ids = [client.enqueue("sealed-call", {"to": f"n{n}", "token": f"{SECRET}{n}"}) for n in range(5)]
    client.add_recurring("nightly-sealed", job="sealed-call", cron="0 3 * * *", payload={"to": "r", "token": SECRET})
    both = f"{K2},{K1}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENV, both)
        assert run_next(client).kind == "succeeded"  # a k1 row opens while k2 is newest
        newer = client.enqueue("sealed-call", {"to": "new", "token": SECRET})
        assert raw(client, newer)[1] == "k2"
    done = run_jobsup("--database-url", url, "keys", "rotate", "--json", env={ENV: both})
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary == {"key": "k2", "resealed": 6, "sealed": 0, "failed": {}, "left": 0}  # five k1 jobs, one schedule
    for job_id in ids:
        assert raw(client, job_id)[1] == "k2"
    with client.database.read() as conn:
        assert conn.execute(select(recurring_job.c.key_id)).scalar_one() == "k2"
    assert client.schedules.list()[0].payload == {"to": "r", "token": "***"}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENV, K2)  # the old key is gone: every row still opens
        for n in range(1, 5):
            assert run_next(client).kind == "succeeded" and opened == [{"to": f"n{n}", "token": f"{SECRET}{n}"}]
    again = run_jobsup("--database-url", url, "keys", "rotate", "--json", "--actor", "ops:kim", env={ENV: both})
    assert json.loads(again.stdout)["resealed"] == 0
    rotations = [entry for entry in client.audit.list() if entry.action == "keys.rotate"]
    assert [(entry.actor, entry.target, entry.detail["resealed"]) for entry in rotations] == [
        ("ops:kim", "k2", 0),
        (rotations[1].actor, "k2", 6),
    ]
    assert rotations[1].actor.startswith("os:")


def test_an_operator_enqueue_from_the_cli_is_audited_and_converted_by_the_schema(url: str) -> None:
    client = jobsup.Client(url)
    client.store.definitions.publish([jobsup.registry.lookup("sealed-call").type], instance="workers")  # type: ignore[union-attr]
    done = run_jobsup(
        "--database-url", url, "enqueue", "sealed-call", "--param", "to=a@example.com", "--param", f"token={SECRET}",
        "--actor", "ops:kim", "--json", env={ENV: K1},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job_id = json.loads(done.stdout)["id"]
    assert client.get(job_id).actor == "ops:kim"  # type: ignore[union-attr]
    entry = client.audit.list()[0]
    assert (entry.actor, entry.action, entry.target, entry.job_ids) == (
        "ops:kim",
        "job.enqueue",
        "sealed-call",
        (job_id,),
    )
    assert run_next(client).kind == "succeeded" and opened == [{"to": "a@example.com", "token": SECRET}]
    bad = run_jobsup("--database-url", url, "enqueue", "sealed-call", "--param", "tok=x", env={ENV: K1})
    assert bad.returncode == 2 and "has no parameter 'tok'" in bad.stderr and "Traceback" not in bad.stderr


def test_a_trigger_payload_is_checked_at_enqueue_and_cannot_carry_a_secret(url: str) -> None:
    client = jobsup.Client(url)
    with pytest.raises(jobsup.InvalidPayload, match="field 'to' is required"):
        client.enqueue("sealed-by-name", {"api_key": "x"}, then=jobsup.Trigger("sealed-call", payload={}))
    with pytest.raises(jobsup.BadInput, match="cannot carry the sensitive parameters of 'sealed-call'"):
        client.enqueue(
            "sealed-by-name", {"api_key": "x"}, then=jobsup.Trigger("sealed-call", payload={"to": "a", "token": "t"})
        )
    assert client.list_jobs() == []


def test_a_payload_over_the_cap_once_sealed_is_refused_before_anything_is_written(url: str) -> None:
    client = jobsup.Client(url)
    token = "x" * 900_000  # under the cap in clear, over it sealed (base64 is longer)
    with client.database.transaction() as conn, pytest.raises(jobsup.InvalidPayload, match="over the cap"):
        client.enqueue("sealed-call", {"to": "a", "token": token}, connection=conn)
    assert client.list_jobs() == []


def test_a_schedule_value_sealed_stays_sealed_when_the_job_type_no_longer_says_sensitive(url: str) -> None:
    from jobsup.jobtypes import JobType
    from jobsup.secrets import parse_keys, schedule_binding

    client = jobsup.Client(url)
    client.store.definitions.publish([JobType("no-longer-typed")], instance="new-deploy")  # untyped now
    binding = schedule_binding("legacy", "no-longer-typed", "row-1")
    sealed = parse_keys(K1).seal({"to": "r", "token": SECRET}, frozenset({"token"}), binding)
    client.store.recurring.recurring_upsert(
        name="legacy", job_name="no-longer-typed", cron="* * * * *", timezone="UTC",
        payload=json.dumps(sealed), key_id="k1", seal_id="row-1", queue="default", priority=0,
    )  # fmt: skip
    schedule = client.store.recurring.recurring_get("legacy")
    assert schedule is not None
    assert client.store.transitions.fire(client.store.recurring, schedule, now=schedule.next_run_at) == "fired"
    fired = client.list_jobs()[0]
    payload, key_id = raw(client, fired.id)
    assert key_id == "k1" and SECRET not in json.dumps(payload) and fired.payload == {"to": "r", "token": "***"}


@jobsup.job("typed-dict-less", params={"to": str})  # a callback job that forgot `batch`
def typed_dict_less(ctx: jobsup.JobContext, params: dict[str, Any]) -> None:
    opened.append(params)


@jobsup.job("typed-callback", params={"batch": dict, "note": str | None})
def typed_callback(ctx: jobsup.JobContext, params: dict[str, Any]) -> None:
    opened.append(params)


def test_batch_callbacks_are_checked_against_their_parameters_at_enqueue(url: str) -> None:
    client = jobsup.Client(url)
    with pytest.raises(jobsup.InvalidPayload, match="field 'batch' is not a parameter"):
        client.batches.enqueue([], on_complete=("typed-dict-less", {"to": "a"}))
    with pytest.raises(jobsup.BadInput, match="batch callback's payload is stored in clear"):
        client.batches.enqueue([], on_complete=("sealed-call", {"to": "a", "token": SECRET}))
    with pytest.raises(jobsup.InvalidPayload, match="field 'note' must be a string or null, not an integer"):
        client.batches.enqueue([], on_complete=("typed-callback", {"note": 5}))
    assert client.list_jobs() == []
    client.batches.enqueue(
        [{"name": "sealed-by-name", "payload": {"api_key": "k"}}], on_complete=("typed-callback", {})
    )
    assert run_next(client).kind == "succeeded"


def test_reprs_hold_neither_the_clear_value_nor_the_key() -> None:
    from jobsup.jobtypes import JobType
    from jobsup.params import params_of
    from jobsup.secrets import parse_keys
    from jobsup.store.builder import build

    jobtype = JobType("r", params=params_of({"token": Annotated[str, jobsup.Sensitive]}, job="r").schema)
    new = build(jobtype, {"token": SECRET}, {})
    assert new.sealing is not None
    assert SECRET not in repr(new) and SECRET not in repr(new.sealing)
    assert K1.split(":")[1] not in repr(parse_keys(K1)) and "bytes" not in repr(parse_keys(K1))


@dataclasses.dataclass
class WithSensitiveDefault:
    token: Annotated[str, jobsup.Sensitive] = "hunter2"


def test_a_sensitive_default_is_refused_and_an_optional_sensitive_is_fine() -> None:
    from jobsup.params import params_of

    with pytest.raises(jobsup.BadInput, match="sensitive parameter 'token' has a default"):
        jobsup.job("refused-default", params=WithSensitiveDefault)
    assert params_of({"token": Annotated[str, jobsup.Sensitive] | None}, job="x").sensitive == {"token"}


@pytest.mark.parametrize("value", ["", "é" * 1000, 12345, None, ["a", {"b": "ü"}], "x" * 70_001])
def test_the_length_of_a_sealed_payload_is_known_before_sealing(value: Any) -> None:
    from jobsup.payload import encode_payload
    from jobsup.secrets import Sealing, parse_keys

    sealing = Sealing({"to": "a", "token": value}, frozenset({"token"}), parse_keys(K1))
    placeholder = encode_payload(sealing.placeholder())
    sealed = encode_payload(sealing.seal(987654321, "some-type"))
    assert sealing.keyring.sealed_length(sealing.payload, sealing.fields, placeholder) == len(sealed)


def test_a_sealed_enqueue_in_the_callers_transaction_commits_and_rolls_back_with_it(url: str) -> None:
    client = jobsup.Client(url)
    with client.database.transaction() as conn:
        kept = client.enqueue("sealed-call", {"to": "a", "token": SECRET}, connection=conn)
    payload, key_id = raw(client, kept)
    assert key_id == "k1" and SECRET not in json.dumps(payload)
    with pytest.raises(RuntimeError), client.database.transaction() as conn:
        client.enqueue("sealed-call", {"to": "b", "token": SECRET}, connection=conn)
        raise RuntimeError("the caller's transaction fails")
    assert [job.id for job in client.list_jobs()] == [kept]
    assert run_next(client).kind == "succeeded" and opened == [{"to": "a", "token": SECRET}]
