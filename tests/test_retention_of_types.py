"""A job type's own retention (`@jobsup.job(retain=...)`): checked when it is declared,
published with the definition and shown with it, and applied by the supervisor's retention
purge, for that type's jobs only, on every database."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

import jobsup
from jobsup import retention
from jobsup.jobtypes import JobType
from jobsup.ops.definitions import disagreement
from jobsup.registry import lookup
from jobsup.store.definitions import as_jobtype
from jobsup.store.schema import FINISHED_STATUSES, job_definition
from jobsup.supervisor.maintenance import PurgeFinished, Sweep

from helpers import claim, run_jobsup, succeed
from webhelpers import READER, log_in, web

HOUR, DAY = 3600.0, 86400.0  # ages, in seconds
H, D = timedelta(hours=1), timedelta(days=1)  # moments apart
SETTINGS = {"succeeded": 7 * DAY, "dead_lettered": 30 * DAY, "cancelled": 7 * DAY}  # the defaults
T = datetime(2030, 1, 1, tzinfo=UTC)  # after every real job's run_at: claims at T find them


@jobsup.job("retain-short", retain={"succeeded": "1h"})
def short(ctx: jobsup.JobContext, payload: object) -> None: ...


@jobsup.job("retain-long", retain={"succeeded": "30d", "cancelled": None})
def long(ctx: jobsup.JobContext, payload: object) -> None: ...


@jobsup.job("retain-settings")
def settings(ctx: jobsup.JobContext, payload: object) -> None: ...


NAMES = ("retain-short", "retain-long", "retain-settings")


def published(client: jobsup.Client, *names: str) -> None:
    client.store.definitions.publish([lookup(name).type for name in names], instance="workers")  # type: ignore[union-attr]


def finished(client: jobsup.Client, name: str, at: datetime, count: int = 2) -> set[int]:
    """`count` jobs of `name` that succeeded at `at`."""
    ids = {client.enqueue(name) for _ in range(count)}
    assert succeed(client, claim(client, limit=count, now=at), now=at) == ids
    return ids


def left(client: jobsup.Client, ids: set[int]) -> set[int]:
    return {job_id for job_id in ids if client.get(job_id) is not None}


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


def test_the_api_and_a_job_type_s_dashboard_page_show_retain(url: str) -> None:
    published(jobsup.Client(url), *NAMES)
    with web(url) as http:
        listed = {d["name"]: d for d in http.get("/api/v1/definitions", headers=READER).json()}
        assert listed["retain-long"]["retain"] == {"succeeded": 30 * DAY, "cancelled": None}
        assert listed["retain-settings"]["retain"] is None
        assert log_in(http).status_code == 303
        page = http.get("/definitions/retain-long").text
        assert "Kept after it ends" in page and "&#34;cancelled&#34;: null" in page
        assert "Kept after it ends" not in http.get("/definitions/retain-settings").text


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
    assert PurgeFinished(client.store, SETTINGS).run_once(now=T) == 0


# -- applying it ----------------------------------------------------------------------------------


def test_a_type_kept_for_less_has_its_old_jobs_purged_and_the_others_stay(url: str) -> None:
    client = jobsup.Client(url)
    published(client, *NAMES)
    old_short = finished(client, "retain-short", T - 2 * H)
    new_short = finished(client, "retain-short", T - H / 2)
    old_other = finished(client, "retain-settings", T - 2 * H)
    old_long = finished(client, "retain-long", T - 2 * H)
    step = PurgeFinished(client.store, SETTINGS, batch=1)  # a batch of one: each reads on from the last
    assert step.run_once(now=T) == 2
    assert left(client, old_short) == set()
    assert left(client, new_short | old_other | old_long) == new_short | old_other | old_long
    assert step.run_once(now=T + 8 * D) == 4  # the settings' 7 days: the rest, but for 'retain-long'
    assert left(client, new_short | old_other | old_long) == old_long


def test_a_type_kept_for_longer_keeps_jobs_the_settings_purge(url: str) -> None:
    client = jobsup.Client(url)
    published(client, *NAMES)
    kept = finished(client, "retain-long", T)
    others = finished(client, "retain-settings", T, count=3)
    cancelled = {client.enqueue("retain-long"), client.enqueue("retain-settings")}
    for job_id in cancelled:
        assert client.cancel(job_id)
    step = PurgeFinished(client.store, SETTINGS, batch=2)
    assert step.run_once(now=T + 8 * D) == 4  # the settings' jobs, succeeded and cancelled
    assert left(client, kept | others | cancelled) == kept | {min(cancelled)}
    assert step.run_once(now=T + 31 * D) == 2  # its own 30 days
    assert step.run_once(now=T + 3650 * D) == 0  # forever, for its cancelled one
    assert left(client, kept | cancelled) == {min(cancelled)}


def test_the_sweeps_of_a_tick_follow_the_published_ages(url: str) -> None:
    client = jobsup.Client(url)
    published(client, *NAMES)
    step = PurgeFinished(client.store, SETTINGS)
    assert step.sweeps(client.store.definitions.own_retention()) == [
        Sweep("succeeded", 30 * DAY, "retain-long"),
        Sweep("succeeded", HOUR, "retain-short"),
        Sweep("succeeded", 7 * DAY, excluding=("retain-long",)),  # 'retain-short': its old ones too
        Sweep("dead_lettered", 30 * DAY),
        Sweep("cancelled", 7 * DAY, excluding=("retain-long",)),  # forever: no sweep of its own
    ]


def test_a_sweep_reads_on_from_its_last_cutoff_and_a_changed_exclusion_reads_from_the_oldest(url: str) -> None:
    client = jobsup.Client(url)
    published(client, *NAMES)
    kept = finished(client, "retain-long", T)
    step = PurgeFinished(client.store, SETTINGS)
    assert step.run_once(now=T + 8 * D) == 0
    floor = T + 8 * D - timedelta(days=7, hours=1)
    assert step.floors[Sweep("succeeded", 7 * DAY, excluding=("retain-long",))] == floor
    later = finished(client, "retain-settings", T + 9 * D)  # finished after the floor: still found
    assert step.run_once(now=T + 17 * D) == 2 and left(client, later) == set()
    # The type no longer keeps its jobs longer: the settings' sweep changes, and reads them from the oldest.
    client.store.definitions.publish([JobType("retain-long")], instance="workers")
    assert step.run_once(now=T + 18 * D) == 2 and left(client, kept) == set()
    assert set(step.floors) == {Sweep("succeeded", HOUR, "retain-short")} | {Sweep(s, a) for s, a in SETTINGS.items()}


def test_without_a_given_now_the_floors_are_cut_from_the_database_clock(url: str) -> None:
    client = jobsup.Client(url)
    published(client, *NAMES)
    step = PurgeFinished(client.store, SETTINGS)
    assert step.run_once() == 0
    for sweep, floor in step.floors.items():
        expected = datetime.now(UTC) - timedelta(seconds=sweep.age) - H
        assert abs((floor - expected).total_seconds()) < 60, (sweep, floor)
    assert step.run_once() == 0  # and the next tick reads from them
