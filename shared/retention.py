"""A job type's own retention: ``@jobsup.job("report", retain={"succeeded": "1d"})``.

For each end state it names, a job type keeps its finished jobs that long instead of the
`retain_*` setting (None: forever); the states it leaves out follow the setting. It is
published with the definition, so the supervisor's purge (`jobsup.store.retention`) applies it
without importing the type's code. Registering a job imports nothing of the store, so the end
states are spelt out here (`tests/test_retention_of_types.py` checks them against the schema's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobsup.durations import parse_duration
from jobsup.errors import BadInput, InvalidDuration

END_STATES = ("succeeded", "dead_lettered", "cancelled")

# Seconds each end state's jobs are kept, by state; None: forever. Only the states a type sets.
Retain = dict[str, float | None]


def parse(job: str, given: object) -> Retain | None:
    """`@jobsup.job`'s `retain=` for job `job`: seconds (or None) by end state; None for none given.
    Raises `BadInput` naming the job, what is wrong and what to write instead."""
    if given is None:
        return None
    if not isinstance(given, Mapping):
        raise BadInput(f'job {job!r}: retain= maps end states to durations, e.g. {{"succeeded": "1d"}}, not {given!r}')
    retain: Retain = {}
    for state, value in given.items():
        if state not in END_STATES:
            ends = "succeeded, dead_lettered or cancelled"
            raise BadInput(f"job {job!r}: retain= names {state!r}, which is not an end state; use {ends}")
        try:
            retain[state] = None if value is None else parse_duration(value, what=f"job {job!r}: retain[{state!r}]")
        except InvalidDuration as exc:
            raise InvalidDuration(f"{exc} (None keeps them forever)") from None
    return retain or None


def load(described: Any) -> Retain | None:
    """From a definition row: the states whose value reads as seconds or null; anything else
    (a hand-edited row) is left out, so those jobs follow the settings."""
    if not isinstance(described, dict):
        return None
    retain: Retain = {}
    for state in (state for state in END_STATES if state in described):  # in this order, whatever the row's
        value = described[state]
        if value is None or _seconds(value):
            retain[state] = None if value is None else float(value)
    return retain or None


def _seconds(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < float("inf")
