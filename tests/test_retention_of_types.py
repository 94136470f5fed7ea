"""A job type's own retention (`@jobsup.job(retain=...)`): checked when it is declared,
published with the definition and shown with it, and applied by the supervisor's retention
purge, for that type's jobs only, on every database."""

from __future__ import annotations

from datetime import timedelta

import pytest

import jobsup
from jobsup import retention
from jobsup.registry import lookup
from jobsup.store.schema import FINISHED_STATUSES

HOUR, DAY = 3600.0, 86400.0  # ages, in seconds


@jobsup.job("retain-short", retain={"succeeded": "1h"})
def short(ctx: jobsup.JobContext, payload: object) -> None: ...


@jobsup.job("retain-long", retain={"succeeded": "30d", "cancelled": None})
def long(ctx: jobsup.JobContext, payload: object) -> None: ...


@jobsup.job("retain-settings")
def settings(ctx: jobsup.JobContext, payload: object) -> None: ...


NAMES = ("retain-short", "retain-long", "retain-settings")


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
