"""A job type's own retention (`@jobsup.job(retain=...)`): checked when it is declared,
published with the definition and shown with it, and applied by the supervisor's retention
purge, for that type's jobs only, on every database."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import update

import jobsup
from jobsup import retention
from jobsup.jobtypes import JobType
from jobsup.ops.definitions import disagreement
from jobsup.registry import lookup
from jobsup.store.definitions import as_jobtype
from jobsup.store.schema import FINISHED_STATUSES, job_definition

from helpers import run_jobsup

HOUR, DAY = 3600.0, 86400.0  # ages, in seconds


@jobsup.job("retain-short", retain={"succeeded": "1h"})
def short(ctx: jobsup.JobContext, payload: object) -> None: ...


@jobsup.job("retain-long", retain={"succeeded": "30d", "cancelled": None})
def long(ctx: jobsup.JobContext, payload: object) -> None: ...


@jobsup.job("retain-settings")
def settings(ctx: jobsup.JobContext, payload: object) -> None: ...


NAMES = ("retain-short", "retain-long", "retain-settings")


def published(client: jobsup.Client, *names: str) -> None:
    client.store.definitions.publish([lookup(name).type for name in names], instance="workers")  # type: ignore[union-attr]


# -- declaring it ---------------------------------------------------------------------------------


def test_the_end_states_are_the_schema_s_finished_statuses() -> None:
    assert retention.END_STATES == FINISHED_STATUSES


def test_retain_is_parsed_by_end_state_and_none_keeps_forever() -> None:
    jobtype = lookup("retain-long").type  # type: ignore[union-attr]
    assert jobtype.retain == {"succeeded": 30 * DAY, "cancelled": None}
    assert jobtype.settings()["retain"] == {"succeeded": 30 * DAY, "cancelled": None}
    assert "retain" not in lookup("retain-settings").type.settings()  # type: ignore[union-attr]
    assert retention.parse("x", {"dead_lettered": 90, "cancelled": timedelta(hours=2)}) == {
        "dead_lettered": 90.0,
        "cancelled": 2 * HOUR,
    }
    assert retention.parse("x", {}) is None and retention.parse("x", None) is None


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"succeded": "1h"}, r"job 'bad-retain': retain= names 'succeded', which is not an end state; use succeeded, "),
        ({"running": "1h"}, r"names 'running', which is not an end state"),
        ({"succeeded": "a day"}, r"job 'bad-retain': retain\['succeeded'\]: 'a day' is not a duration; write e\.g\. "),
        ({"succeeded": -5}, r"retain\['succeeded'\]: -5 must be a finite, non-negative duration \(None keeps them"),
        ({"succeeded": "forever"}, r"'forever' is not a duration; .* \(None keeps them forever\)"),
        ({"cancelled": True}, r"retain\['cancelled'\]: True is not a duration"),
        ("7d", r'job \'bad-retain\': retain= maps end states to durations, e\.g\. \{"succeeded": "1d"\}, not \'7d\''),
    ],
)
def test_bad_retain_is_refused_when_the_job_is_declared(given: object, message: str) -> None:
    with pytest.raises(jobsup.BadInput, match=message) as caught:
        jobsup.job("bad-retain", retain=given)
    assert len(str(caught.value).splitlines()) == 1
    assert lookup("bad-retain") is None


# -- publishing it --------------------------------------------------------------------------------


def test_the_definition_stores_and_shows_retain(url: str) -> None:
    client = jobsup.Client(url)
    published(client, *NAMES)
    found = {d.name: d for d in client.definitions()}
    assert found["retain-long"].retain == {"succeeded": 30 * DAY, "cancelled": None}
    assert found["retain-long"].to_dict()["retain"] == {"succeeded": 30 * DAY, "cancelled": None}
    assert found["retain-settings"].retain is None and found["retain-settings"].to_dict()["retain"] is None
    assert as_jobtype(found["retain-short"]).retain == {"succeeded": HOUR}
    assert client.store.definitions.own_retention() == {
        "succeeded": {"retain-short": HOUR, "retain-long": 30 * DAY},
        "cancelled": {"retain-long": None},
    }
    assert client.store.definitions.publish([lookup("retain-long").type], instance="workers") == []  # type: ignore[union-attr]
    shown = run_jobsup("definitions", "show", "retain-long", "--database-url", url)
    assert "retain: succeeded 30d, cancelled forever (other end states: the retain_* settings)" in shown.stdout
    as_json = json.loads(run_jobsup("definitions", "show", "retain-long", "--json", "--database-url", url).stdout)
    assert as_json["retain"] == {"succeeded": 30 * DAY, "cancelled": None}


def test_two_deployments_that_disagree_on_retain_show_it(url: str) -> None:
    definitions = jobsup.Client(url).store.definitions
    definitions.publish([JobType("report", retain={"succeeded": DAY})], instance="a")
    definitions.publish([JobType("report")], instance="b")  # an older deploy: no retain
    found = definitions.get("report")
    assert found is not None and found.retain is None and found.declared_by == "b"
    assert found.disagreement is not None and found.disagreement["retain"] == {"succeeded": DAY}
    assert disagreement(found) == f"a said retain={{'succeeded': {DAY}}} at {found.disagreement['at']}"
    assert definitions.own_retention() == {}  # the newest declaration is the one applied


def test_a_hand_edited_retain_is_left_out_rather_than_breaking_the_purge(url: str) -> None:
    client = jobsup.Client(url)
    published(client, "retain-short", "retain-long")
    with client.database.transaction() as conn:
        conn.execute(update(job_definition).where(job_definition.c.name == "retain-short").values(retain="{nope"))
        conn.execute(
            update(job_definition)
            .where(job_definition.c.name == "retain-long")
            .values(retain=json.dumps({"succeeded": "1h", "running": 5, "cancelled": -1, "dead_lettered": 60}))
        )
    assert client.store.definitions.own_retention() == {"dead_lettered": {"retain-long": 60.0}}
