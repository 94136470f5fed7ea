"""The circuit-breaker policy of a job type: after `failures` consecutive failed attempts
(failed, timed out, dead-lettered) its jobs are not claimed for `reset` seconds, then one
probe runs; its success closes the breaker, its failure opens it again
(`jobsup.store.breakers` keeps the state and enforces it in the claim).
``breaker={"failures": 5, "reset": "60s"}``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobsup.durations import parse_duration
from jobsup.errors import BadInput

MAX_FAILURES = 1_000_000
KEYS = {"failures", "reset"}


@dataclass(frozen=True)
class Breaker:
    failures: int  # consecutive failed attempts that open it
    reset: float  # seconds it stays open before one probe is let through


def parse(value: object, job: str) -> Breaker:
    if not isinstance(value, dict) or set(value) != KEYS:
        raise BadInput(f"job {job!r}: breaker takes {{'failures': N, 'reset': DURATION}}, not {value!r}")
    failures = value["failures"]
    if isinstance(failures, bool) or not isinstance(failures, int) or not 1 <= failures <= MAX_FAILURES:
        raise BadInput(f"job {job!r}: breaker failures is a whole number from 1 to {MAX_FAILURES:,}, not {failures!r}")
    reset = parse_duration(value["reset"], what=f"job {job!r}: breaker reset")
    if reset <= 0:
        raise BadInput(f"job {job!r}: breaker reset must be longer than 0, not {value['reset']!r}")
    return Breaker(failures, reset)


def describe(policy: Breaker) -> dict[str, Any]:
    return {"failures": policy.failures, "reset": policy.reset}


def load(described: Any) -> Breaker:
    return Breaker(int(described["failures"]), float(described["reset"]))
