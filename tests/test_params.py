"""Typed job parameters (issue 11, part 1): the schema a definition publishes, payloads
checked at enqueue (also by a process that does not import the workers' code), defaults
stored, and the typed object the worker hands the function."""

from __future__ import annotations

import dataclasses
import enum
import json
import subprocess
import sys
import threading
from typing import Annotated, Any, Literal, NotRequired, TypedDict

import pytest
from sqlalchemy import func, select

import jobsup
from jobsup.jobtypes import JobType
from jobsup.params import params_of
from jobsup.store.rows import SUCCEEDED, Outcome
from jobsup.store.schema import job
from jobsup.worker.execute import execute

from helpers import claim_one, run_jobsup


class Tier(enum.Enum):
    FREE = "free"
    PAID = "paid"


@dataclasses.dataclass
class Address:
    city: str
    zip: str | None = None


@dataclasses.dataclass
class SendEmail:
    to: str
    subject: str = dataclasses.field(default="hello", metadata={"description": "the subject line"})
    retries: int | None = 3
    tier: Tier = Tier.FREE
    mode: Literal["text", "html"] = "text"
    tags: list[str] = dataclasses.field(default_factory=list)
    address: Address | None = None


class Report(TypedDict):
    month: int
    format: NotRequired[str]


seen: list[Any] = []


@jobsup.job("typed-email", params=SendEmail)
def typed_email(ctx: jobsup.JobContext, params: SendEmail) -> None:
    seen.append(params)


@jobsup.job("typed-report", params=Report)
def typed_report(ctx: jobsup.JobContext, params: Report) -> None:
    seen.append(params)


@jobsup.job("typed-dict-spec", params={"to": str, "retries": int | None})
def typed_dict_spec(ctx: jobsup.JobContext, params: dict[str, Any]) -> None:
    seen.append(params)


def stored_payload(client: jobsup.Client, job_id: int) -> Any:
    with client.database.read() as conn:
        return json.loads(conn.execute(select(job.c.payload).where(job.c.id == job_id)).scalar_one())


def count_jobs(client: jobsup.Client) -> int:
    with client.database.read() as conn:
        return int(conn.execute(select(func.count()).select_from(job)).scalar_one())


def run_next(client: jobsup.Client) -> Any:
    seen.clear()
    ran = execute(claim_one(client), threading.Event())
    assert ran.kind == "succeeded", ran
    return seen[-1]


def test_a_dataclass_becomes_a_json_schema_with_defaults_enums_and_descriptions() -> None:
    schema = params_of(SendEmail, job="x").schema
    assert schema["required"] == ["to"] and schema["additionalProperties"] is False
    properties = schema["properties"]
    assert properties["to"] == {"type": "string"}
    assert properties["subject"] == {"type": "string", "description": "the subject line", "default": "hello"}
    assert properties["retries"] == {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": 3}
    assert properties["tier"]["enum"] == ["free", "paid"] and properties["tier"]["default"] == "free"
    assert properties["mode"] == {"enum": ["text", "html"], "default": "text"}
    assert properties["tags"] == {"type": "array", "items": {"type": "string"}, "default": []}
    assert params_of(Report, job="x").schema["required"] == ["month"]


def test_pydantic_models_are_parameters_too() -> None:
    pydantic = pytest.importorskip("pydantic", reason="pydantic is in the test extra; CI installs it")

    class Invoice(pydantic.BaseModel):
        customer: str
        cents: int = pydantic.Field(default=0, description="amount")
        token: Annotated[str, jobsup.Sensitive] = ""

    typed = params_of(Invoice, job="x")
    assert typed.schema["properties"]["cents"] == {"type": "integer", "description": "amount", "default": 0}
    assert typed.sensitive == {"token"}
    assert typed.make({"customer": "c", "cents": 5, "token": ""}) == Invoice(customer="c", cents=5)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"when": complex}, "parameter 'when' has type <class 'complex'>"),
        ({"pair": tuple[int, int]}, "'pair' is a tuple, which JSON cannot keep; use list"),
        ({"by_id": dict[int, str]}, "'by_id' has keys of <class 'int'>"),
        ({"nested": list[Annotated[str, jobsup.Sensitive]]}, "only top-level parameters can be"),
    ],
)
def test_a_type_jobsup_cannot_carry_is_refused_at_import_naming_job_and_field(spec: Any, words: str) -> None:
    with pytest.raises(jobsup.BadInput) as caught:
        jobsup.job("refused-type", params=spec)
    assert "job 'refused-type'" in str(caught.value) and words in str(caught.value)
    assert jobsup.registry.lookup("refused-type") is None


def test_sensitive_must_name_parameters() -> None:
    with pytest.raises(jobsup.BadInput, match=r"sensitive=\['tokn'\] names no parameter"):
        jobsup.job("refused-sensitive", params={"token": str}, sensitive={"tokn"})


def test_defaults_are_stored_and_the_worker_gets_the_typed_object(url: str) -> None:
    client = jobsup.Client(url)
    job_id = client.enqueue("typed-email", {"to": "a@example.com", "tier": "paid", "address": {"city": "Oslo"}})
    assert stored_payload(client, job_id) == {
        "to": "a@example.com",
        "subject": "hello",
        "retries": 3,
        "tier": "paid",
        "mode": "text",
        "tags": [],
        "address": {"city": "Oslo", "zip": None},
    }
    params = run_next(client)
    assert params == SendEmail("a@example.com", tier=Tier.PAID, address=Address("Oslo"))
    client.enqueue("typed-report", {"month": 3})
    assert run_next(client) == {"month": 3}
    client.enqueue("typed-dict-spec", {"to": "b"})
    assert run_next(client) == {"to": "b"}


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        ({}, "field 'to' is required (a string) and missing"),
        ({"to": 5}, "field 'to' must be a string, not an integer"),
        ({"to": "a", "retries": "3"}, "field 'retries' must be an integer or null, not a string"),
        ({"to": "a", "tier": "gold"}, "field 'tier' must be one of 'free', 'paid', not a string"),
        ({"to": "a", "tags": ["x", 1]}, "field 'tags[1]' must be a string, not an integer"),
        ({"to": "a", "address": {}}, "field 'address.city' is required"),
        ({"to": "a", "cc": "b"}, "field 'cc' is not a parameter of this job (its parameters: 'to', 'subject'"),
        (["a"], "the payload must be an object, not a list"),
    ],
)
def test_a_payload_that_does_not_fit_is_refused_naming_the_field_and_nothing_is_written(
    url: str, payload: Any, words: str
) -> None:
    client = jobsup.Client(url)
    with pytest.raises(jobsup.InvalidPayload) as caught:
        client.enqueue("typed-email", payload)
    assert "payload of job 'typed-email'" in str(caught.value) and words in str(caught.value)
    with pytest.raises(jobsup.InvalidPayload):
        client.enqueue_many(
            [{"name": "typed-email", "payload": {"to": "ok"}}, {"name": "typed-email", "payload": payload}]
        )
    assert count_jobs(client) == 0


# A process that does not import the workers' code: it knows the job type only from the
# definition row this test publishes.
ELSEWHERE = """
import json, sys
import jobsup
client = jobsup.Client(sys.argv[1])
try:
    client.enqueue("typed-elsewhere", json.loads(sys.argv[2]))
except jobsup.InvalidPayload as exc:
    print("refused:", exc)
else:
    print("stored:", json.dumps(client.list_jobs()[0].payload, sort_keys=True))
"""


def test_a_process_without_the_workers_code_checks_by_the_published_definition(url: str) -> None:
    schema = params_of(SendEmail, job="typed-elsewhere").schema
    jobsup.Client(url).store.definitions.publish([JobType("typed-elsewhere", params=schema)], instance="workers")

    def enqueue_elsewhere(payload: Any) -> str:
        done = subprocess.run(
            [sys.executable, "-c", ELSEWHERE, url, json.dumps(payload)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    refused = enqueue_elsewhere({"to": "a", "retries": "three"})
    assert refused.startswith("refused:") and "field 'retries' must be an integer or null" in refused
    assert count_jobs(jobsup.Client(url)) == 0
    stored = enqueue_elsewhere({"to": "a"})
    assert stored.startswith("stored:") and '"retries": 3' in stored and '"subject": "hello"' in stored


def test_the_definition_row_carries_the_schema(url: str) -> None:
    client = jobsup.Client(url)
    jobtype = jobsup.registry.lookup("typed-email").type  # type: ignore[union-attr]
    client.store.definitions.publish([jobtype], instance="test")
    published = {d.name: d for d in client.definitions()}["typed-email"]
    assert published.params == params_of(SendEmail, job="typed-email").schema
    assert client.store.definitions.publish([jobtype], instance="test") == []  # unchanged: not "changed"


@dataclasses.dataclass
class WithDerived:
    width: int
    area: int = dataclasses.field(init=False, default=0)

    def __post_init__(self) -> None:
        if self.width < 0:
            raise ValueError("width must not be negative")
        self.area = self.width * self.width


@jobsup.job("typed-derived", params=WithDerived)
def typed_derived(ctx: jobsup.JobContext, params: WithDerived) -> None:
    seen.append(params)


def test_a_field_the_class_sets_itself_is_no_parameter_and_its_checks_run_at_enqueue(url: str) -> None:
    assert "area" not in params_of(WithDerived, job="x").schema["properties"]
    client = jobsup.Client(url)
    with pytest.raises(jobsup.InvalidPayload, match="does not build its parameters: ValueError: width must not be"):
        client.enqueue("typed-derived", {"width": -1})
    client.enqueue("typed-derived", {"width": 3})
    assert run_next(client).area == 9


def test_a_typed_job_is_enqueued_with_its_own_parameters_object(url: str) -> None:
    client = jobsup.Client(url)
    job_id = client.enqueue("typed-email", SendEmail("c@example.com", tier=Tier.PAID, address=Address("Rome")))
    assert stored_payload(client, job_id)["tier"] == "paid"
    assert run_next(client) == SendEmail("c@example.com", tier=Tier.PAID, address=Address("Rome"))


def test_the_cli_converts_params_by_the_schema_and_shows_it(url: str) -> None:
    client = jobsup.Client(url)
    client.store.definitions.publish([jobsup.registry.lookup("typed-email").type], instance="workers")  # type: ignore[union-attr]
    params = ["to=a@example.com", "retries=null", 'tags=["x"]', "mode=html", "subject="]
    done = run_jobsup("--database-url", url, "enqueue", "typed-email", "--json", *[f"--param={p}" for p in params])
    assert done.returncode == 0, done.stderr
    stored = stored_payload(client, json.loads(done.stdout)["id"])
    assert (stored["retries"], stored["tags"], stored["mode"], stored["subject"]) == (None, ["x"], "html", "")
    bad = run_jobsup("--database-url", url, "enqueue", "typed-email", "--param", "to=a", "--param", "retries=lots")
    assert bad.returncode == 2 and "--param retries='lots': job 'typed-email' takes an integer or null" in bad.stderr
    shown = run_jobsup("--database-url", url, "definitions", "show", "typed-email")
    assert shown.returncode == 0, shown.stderr
    lines = {line.split()[0]: line for line in shown.stdout.splitlines()[1:] if line.strip()}
    assert "an integer or null" in lines["retries"] and "3" in lines["retries"]
    assert "the subject line" in lines["subject"] and "one of 'text', 'html'" in lines["mode"]


def test_keys_generate_prints_an_entry_that_parses() -> None:
    from jobsup.secrets import parse_keys

    done = run_jobsup("keys", "generate", "--id", "k7")
    assert done.returncode == 0 and parse_keys(done.stdout.strip()).newest == "k7"
    bad = run_jobsup("keys", "generate", "--id", "a.b c")
    assert bad.returncode == 2 and "key id 'a.b c' is not" in bad.stderr


def test_incompatible_counts_the_waiting_jobs_a_new_schema_does_not_fit(url: str) -> None:
    from jobsup.store.rows import NewJob

    client = jobsup.Client(url)
    old = params_of({"to": str, "count": int}, job="evolving-here").schema
    client.store.definitions.publish([JobType("evolving-here", params=old)], instance="old")
    rows = [NewJob("evolving-here", "default", f'{{"to":"a","count":{n}}}', 0, None, 5, None) for n in range(4)]
    client.store.transitions.enqueue([*rows, NewJob("evolving-here", "default", '{"to":"b"}', 0, None, 5, None)])
    finished = claim_one(client)
    client.store.transitions.complete([Outcome(finished.held, SUCCEEDED)])  # a finished job is not counted
    new = JobType("evolving-here", params=params_of({"to": str, "count": str | None}, job="evolving-here").schema)
    found = client.store.definitions.incompatible([new])
    assert found == {"evolving-here": (3, {"field 'count' must be a string or null, not an integer": 3})}
    assert client.store.definitions.incompatible([JobType("evolving-here", params=old)]) == {}  # unchanged
