"""The SLA policy of a job type: each job should start within `start_within` and finish
within `finish_within` of when it is due (either may be left out). The deadlines are
stored on the job when it is enqueued (`sla_start_by`, `sla_finish_by`); the maintenance
tick marks the jobs that miss them (`jobsup.store.sla`).
``sla={"start_within": "5m", "finish_within": "1h"}``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobsup.durations import parse_duration
from jobsup.errors import BadInput

KEYS = ("start_within", "finish_within")


@dataclass(frozen=True)
class Sla:
    start_within: float | None = None  # seconds
    finish_within: float | None = None


def within(value: object, what: str) -> float | None:
    """A deadline's duration, checked (`what` names it in the error); None stays None."""
    if value is None:
        return None
    seconds = parse_duration(value, what=what)
    if seconds <= 0:
        raise BadInput(f"{what} must be longer than 0, not {value!r}")
    return seconds


def parse(value: object, job: str) -> Sla:
    if not isinstance(value, dict) or not value or set(value) - set(KEYS):
        raise BadInput(f"job {job!r}: sla takes 'start_within' and/or 'finish_within' durations, not {value!r}")
    policy = Sla(*(within(value.get(key), f"job {job!r}: sla {key}") for key in KEYS))
    if all(getattr(policy, key) is None for key in KEYS):
        raise BadInput(f"job {job!r}: sla needs start_within or finish_within (a duration), not {value!r}")
    return policy


def describe(policy: Sla) -> dict[str, Any]:
    return {key: getattr(policy, key) for key in KEYS if getattr(policy, key) is not None}


def load(described: Any) -> Sla:
    return Sla(*(None if described.get(key) is None else float(described[key]) for key in KEYS))
