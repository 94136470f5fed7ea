"""Parameter defaults from templates (issue 29, item 9): `jobsup.template("{slot:%Y-%m-%d}")`
is rendered when each job is made (enqueue, a recurring fire, a process without the code),
from a fixed context only, and refused at import when it names anything else."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import select, update

import jobsup
from jobsup.jobtypes import JobType
from jobsup.params import params_of
from jobsup.store.schema import job, job_definition
from jobsup.templates import KEY, Moment, render
from jobsup.worker.execute import execute

from helpers import claim_one, in_new_york, run_jobsup


@dataclasses.dataclass
class Report:
    account: str
    day: str = jobsup.template("{slot:%Y-%m-%d}")
    label: str = jobsup.template("{name} on {queue} at {now:%H}h")
    note: str | None = None


seen: list[Any] = []


@jobsup.job("templated-report", params=Report, queue="reports")
def templated_report(ctx: jobsup.JobContext, params: Report) -> None:
    seen.append(params)


def stored_payload(client: jobsup.Client, job_id: int) -> Any:
    with client.database.read() as conn:
        return json.loads(conn.execute(select(job.c.payload).where(job.c.id == job_id)).scalar_one())


def run_next(client: jobsup.Client, queue: str = "reports") -> Any:
    seen.clear()
    ran = execute(claim_one(client, queue=queue), threading.Event())
    assert ran.kind == "succeeded", ran
    return seen[-1]


def test_the_schema_publishes_the_template_and_the_field_is_not_required() -> None:
    schema = params_of(Report, job="templated-report").schema
    assert schema["properties"]["day"] == {"type": "string", KEY: "{slot:%Y-%m-%d}"}
    assert "default" not in schema["properties"]["day"]
    assert schema["required"] == ["account"]


def test_render_fills_only_the_fixed_fields() -> None:
    moment = Moment(datetime(2026, 12, 5, 7, 30, tzinfo=UTC), datetime(2026, 12, 6, tzinfo=UTC), "r", "q")
    assert render("{slot:%Y-%m-%d}/{name}/{queue}/{now}", moment) == "2026-12-06/r/q/2026-12-05T07:30:00+00:00"
    assert render("{{literal}} {name:>3}", moment) == "{literal}   r"


def test_a_job_gets_its_template_rendered_at_enqueue_and_stored(url: str) -> None:
    client = jobsup.Client(url)
    run_at = datetime(2030, 1, 2, 3, 4, tzinfo=UTC)
    before = datetime.now(UTC)
    due_id = client.enqueue("templated-report", {"account": "a"}, run_at=run_at)
    now_id = client.enqueue("templated-report", {"account": "b"}, queue="other")
    given_id = client.enqueue("templated-report", {"account": "c", "day": "yesterday"})
    assert stored_payload(client, due_id)["day"] == "2030-01-02"  # slot: the job's run_at
    now_payload = stored_payload(client, now_id)
    assert now_payload["day"] in {before.strftime("%Y-%m-%d"), datetime.now(UTC).strftime("%Y-%m-%d")}
    assert now_payload["label"] in {f"templated-report on other at {t:%H}h" for t in (before, datetime.now(UTC))}
    assert stored_payload(client, given_id)["day"] == "yesterday"  # a given value wins
    assert run_next(client, "other") == Report("b", now_payload["day"], now_payload["label"])


def test_enqueueing_the_parameters_object_renders_the_fields_it_left_to_the_template(url: str) -> None:
    client = jobsup.Client(url)
    job_id = client.enqueue("templated-report", Report("d"), run_at=datetime(2031, 5, 6, tzinfo=UTC))
    assert stored_payload(client, job_id)["day"] == "2031-05-06"


def test_each_recurring_fire_renders_its_own_slot_in_the_schedules_time_zone(url: str) -> None:
    client = jobsup.Client(url)
    client.add_recurring(
        "nightly-report", job="templated-report", cron="30 0 * * *", payload={"account": "a"}, timezone="Asia/Tokyo"
    )
    schedule = client.store.recurring.recurring_get("nightly-report")
    assert schedule is not None and schedule.next_run_at is not None
    assert "day" not in schedule.payload  # kept a template: rendered at each fire, not once
    first = schedule.next_run_at
    client.store.transitions.fire(client.store.recurring, schedule, now=first)
    schedule = client.store.recurring.recurring_get("nightly-report")
    assert schedule is not None and schedule.next_run_at is not None
    client.store.transitions.fire(client.store.recurring, schedule, now=schedule.next_run_at)
    days = sorted(j.payload["day"] for j in client.list_jobs(queue="reports"))
    # 00:30 in Tokyo is 15:30 UTC the day before: the day printed is Tokyo's.
    tokyo = first.astimezone(ZoneInfo("Asia/Tokyo"))
    assert days == [f"{tokyo:%Y-%m-%d}", f"{tokyo + timedelta(days=1):%Y-%m-%d}"]
    assert first.astimezone(UTC).strftime("%Y-%m-%d") != days[0]


# A process that does not import the workers' code: it knows the job type only from the
# definition row the test publishes, and renders the template from it.
ELSEWHERE = """
import json, sys
from datetime import UTC, datetime
import jobsup
client = jobsup.Client(sys.argv[1])
try:
    job_id = client.enqueue("templated-elsewhere", {"account": "x"}, run_at=datetime(2032, 7, 8, tzinfo=UTC))
except jobsup.InvalidPayload as exc:
    print("refused:", exc)
else:
    print("stored:", json.dumps(client.get(job_id).payload, sort_keys=True))
"""


def enqueue_elsewhere(url: str) -> str:
    done = subprocess.run([sys.executable, "-c", ELSEWHERE, url], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_process_without_the_code_renders_the_published_template(url: str) -> None:
    client = jobsup.Client(url)
    schema = params_of(Report, job="templated-elsewhere").schema
    client.store.definitions.publish([JobType("templated-elsewhere", params=schema)], instance="workers")
    stored = enqueue_elsewhere(url)
    assert stored.startswith("stored:") and '"day": "2032-07-08"' in stored, stored


def test_a_definition_row_cannot_make_a_template_reach_past_its_fields(url: str) -> None:
    client = jobsup.Client(url)
    schema = params_of(Report, job="templated-elsewhere").schema
    client.store.definitions.publish([JobType("templated-elsewhere", params=schema)], instance="workers")
    tampered = json.loads(json.dumps(schema))
    tampered["properties"]["day"][KEY] = "{now.__class__.__mro__}"
    with client.database.transaction() as conn:
        named = job_definition.c.name == "templated-elsewhere"
        conn.execute(update(job_definition).where(named).values(params=json.dumps(tampered)))
    refused = enqueue_elsewhere(url)
    assert refused.startswith("refused:") and "field 'day' has a template default that cannot be used" in refused
    assert "__mro__" in refused and "not one of {now}, {slot}, {name}, {queue}" in refused


def test_a_job_waiting_from_before_the_template_gets_it_when_it_runs(url: str) -> None:
    client = jobsup.Client(url)
    run_at = datetime(2020, 2, 3, tzinfo=UTC)
    job_id = client.enqueue("templated-report", {"account": "old"}, run_at=run_at)
    with client.database.transaction() as conn:  # as an older deploy, without the field, stored it
        conn.execute(update(job).where(job.c.id == job_id).values(payload=json.dumps({"account": "old"})))
    params = run_next(client)
    assert isinstance(params.day, str) and params.day == "2020-02-03"  # as of when it was due


@pytest.mark.postgres
def test_a_waiting_job_s_template_sees_its_due_time_in_utc_whatever_the_session_s_zone(postgres_url: str) -> None:
    # The due time is an instant whatever the session's zone: midnight UTC is the evening
    # before in New York, and the day printed must be UTC's.
    client = jobsup.Client(in_new_york(postgres_url))
    job_id = client.enqueue("templated-report", {"account": "old"}, run_at=datetime(2020, 2, 3, tzinfo=UTC))
    with client.database.transaction() as conn:  # as an older deploy, without the field, stored it
        conn.execute(update(job).where(job.c.id == job_id).values(payload=json.dumps({"account": "old"})))
    params = run_next(client)
    assert params.day == "2020-02-03"
    client.close()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{today}", "names {today}, which is not one of {now}, {slot}, {name}, {queue}"),
        ("{now.__class__}", "names {now.__class__}"),
        ("{slot[0]}", "names {slot[0]}"),
        ("{name!r}", "a field takes a format spec only"),
        ("{slot:{name}}", "a field takes a format spec only"),
        ("{name:%Y}", "cannot be rendered"),
        ("{slot", "cannot be read"),
        ("{name:>2000000000}", "a field is at most 64 characters wide"),  # would allocate gigabytes
        ("{queue:x>65}", "a field is at most 64 characters wide"),
        ("{slot:%Y}" * 300, "at most 1000"),
        (5, "a template is a string"),
    ],
)
def test_a_template_naming_anything_else_is_refused_when_it_is_made(text: Any, words: str) -> None:
    with pytest.raises(jobsup.BadInput) as caught:
        jobsup.template(text)
    assert words in str(caught.value)


def test_a_template_default_on_a_field_that_is_not_a_string_is_refused_at_import() -> None:
    @dataclasses.dataclass
    class Counted:
        count: int = jobsup.template("{slot:%d}")

    with pytest.raises(jobsup.BadInput, match="parameter 'count' has a template default, which makes a string"):
        params_of(Counted, job="counted")


def test_definitions_show_prints_the_template(url: str) -> None:
    client = jobsup.Client(url)
    client.store.definitions.publish([jobsup.registry.lookup("templated-report").type], instance="w")  # type: ignore[union-attr]
    shown = run_jobsup("--database-url", url, "definitions", "show", "templated-report")
    assert shown.returncode == 0, shown.stderr
    lines = {line.split()[0]: line for line in shown.stdout.splitlines()[1:] if line.strip()}
    assert "template {slot:%Y-%m-%d}" in lines["day"] and " no " in lines["day"]
