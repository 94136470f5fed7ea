"""Flow control: the five policies a job type may declare (`@jobsup.job(concurrency=...,
rate=..., breaker=..., sla=..., calendar=...)`), and `Limits`, a type's policies together.

Each policy is a frozen dataclass with the same three doors: `parse(value, job)` (the
decorator's argument, checked; `BadInput` naming the job), `describe()` (JSON for the
definition row, `jobsup_job_definition.limits`) and `load(described)` (back from that row).
What enforces each lives in the store: `jobsup.store.concurrency_keys` (concurrency keys, at
admission), `jobsup.store.rates` (in the claim), `jobsup.store.breakers` (in the claim and
maintenance), `jobsup.store.sla` (marked by maintenance), `jobsup.store.calendars` (run_at
moved at enqueue).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from jobsup.checks import check_name
from jobsup.durations import parse_duration
from jobsup.errors import BadInput


def _whole(value: object, low: int, high: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and low <= value <= high


@dataclass(frozen=True)
class Concurrency:
    """At most `limit` jobs with one concurrency key admitted (pending or running) at once,
    across every instance. ``concurrency=1`` is one per key; ``concurrency={"key":
    "customer", "limit": 2}`` names a key prefix job types share (a job's key is then
    ``customer:<its key>``)."""

    limit: int
    key: str | None = None  # a prefix shared by job types (None: the job type's own name)

    MAX_LIMIT = 1_000_000

    @classmethod
    def parse(cls, value: object, job: str) -> Concurrency:
        key = None
        if isinstance(value, dict):
            if set(value) - {"key", "limit"} or "limit" not in value:
                raise BadInput(f"job {job!r}: concurrency takes {{'limit': N}} and optionally 'key', not {value!r}")
            key = value.get("key")
            if key is not None and (not isinstance(key, str) or not key or len(key) > 100):
                raise BadInput(f"job {job!r}: concurrency key must be a string of 1-100 characters, not {key!r}")
            value = value["limit"]
        if not _whole(value, 1, cls.MAX_LIMIT):
            raise BadInput(
                f"job {job!r}: a concurrency limit is a whole number from 1 to {cls.MAX_LIMIT:,}, not {value!r}"
            )
        return cls(value, key)  # type: ignore[arg-type]

    def describe(self) -> dict[str, Any]:
        return {"limit": self.limit, **({"key": self.key} if self.key else {})}

    @classmethod
    def load(cls, described: Any) -> Concurrency:
        return cls(int(described["limit"]), described.get("key"))


def concurrency_key(policy: Concurrency | None, job: str, given: object) -> tuple[str | None, int | None]:
    """The concurrency key a job of type `job` is counted under, and its limit: under the
    type's policy, the type's name (or the policy's shared key) and the given key; with no
    policy, a given key alone holds one job at a time."""
    if given is not None and (not isinstance(given, str) or not 0 < len(given) <= 100):
        raise BadInput(f"concurrency_key must be a string of 1-100 characters, not {given!r}")
    if policy is None:
        return (None, None) if given is None else (given, 1)
    prefix = policy.key or job
    key = prefix if given is None else f"{prefix}:{given}"
    if len(key) > 200:
        raise BadInput(f"the concurrency key {key[:40]!r}... of job {job!r} is over 200 characters; use a shorter key")
    return key, policy.limit


_SHORT_RATE = re.compile(r"\s*(\d+)\s*/\s*(\S+)\s*")


@dataclass(frozen=True)
class Rate:
    """At most `limit` jobs *start* in any window of `per` seconds, across every instance.
    ``rate="10/s"``, ``rate="600/5m"``, or ``rate={"limit": 10, "per": "1s", "key":
    "partner-api"}``: job types naming the same key share one window (a partner's API that
    several job types call)."""

    limit: int  # starts allowed in any window of `per` seconds
    per: float
    key: str | None = None  # a window shared by job types (None: the job type's own)

    # The window keeps the last `limit` start times of its key, and a rate-limited claim
    # reads them all: a bound on that read.
    MAX_LIMIT = 10_000
    MIN_PER = 0.01  # seconds: finer than this, the clocks of the instances decide, not the window
    MAX_PER = 86_400.0

    def key_for(self, job: str) -> str:
        return self.key or job

    @property
    def spacing(self) -> float:
        """Seconds between the starts of a backlog draining at the full rate."""
        return self.per / self.limit

    @classmethod
    def parse(cls, value: object, job: str) -> Rate:
        if isinstance(value, str):
            match = _SHORT_RATE.fullmatch(value)
            if not match:
                raise BadInput(f"job {job!r}: rate {value!r} is not a rate; write N/PERIOD, e.g. '10/s' or '600/5m'")
            return cls._checked(int(match.group(1)), match.group(2), None, job)
        if isinstance(value, dict):
            if set(value) - {"limit", "per", "key"} or not {"limit", "per"} <= set(value):
                raise BadInput(
                    f"job {job!r}: rate takes {{'limit': N, 'per': DURATION}} and optionally 'key', not {value!r}"
                )
            return cls._checked(value["limit"], value["per"], value.get("key"), job)
        raise BadInput(f"job {job!r}: rate takes 'N/PERIOD' or {{'limit': N, 'per': DURATION}}, not {value!r}")

    @classmethod
    def _checked(cls, limit: object, per: object, key: object, job: str) -> Rate:
        if not _whole(limit, 1, cls.MAX_LIMIT):
            raise BadInput(f"job {job!r}: a rate limit is a whole number from 1 to {cls.MAX_LIMIT:,}, not {limit!r}")
        # '10/s' reads as ten a second: a bare unit is one of it.
        text = f"1{per}" if isinstance(per, str) and per.strip() in {"ms", "s", "m", "h", "d"} else per
        seconds = parse_duration(text, what=f"job {job!r}: rate period")
        if not cls.MIN_PER <= seconds <= cls.MAX_PER:
            raise BadInput(f"job {job!r}: a rate period is from 10ms to 1 day, not {per!r}")
        if key is not None and (not isinstance(key, str) or not 0 < len(key) <= 100 or not key.isprintable()):
            raise BadInput(f"job {job!r}: a rate key is a string of 1-100 printable characters, not {key!r}")
        return cls(limit, seconds, key)  # type: ignore[arg-type]

    def describe(self) -> dict[str, Any]:
        return {"limit": self.limit, "per": self.per, **({"key": self.key} if self.key else {})}

    @classmethod
    def load(cls, described: Any) -> Rate:
        return cls(int(described["limit"]), float(described["per"]), described.get("key"))


@dataclass(frozen=True)
class Breaker:
    """A circuit breaker: after `failures` consecutive failed attempts (failed, timed out,
    dead-lettered) the type's jobs are not claimed for `reset` seconds, then one probe runs;
    its success closes the breaker, its failure opens it again.
    ``breaker={"failures": 5, "reset": "60s"}``."""

    failures: int  # consecutive failed attempts that open it
    reset: float  # seconds it stays open before one probe is let through

    MAX_FAILURES = 1_000_000

    @classmethod
    def parse(cls, value: object, job: str) -> Breaker:
        if not isinstance(value, dict) or set(value) != {"failures", "reset"}:
            raise BadInput(f"job {job!r}: breaker takes {{'failures': N, 'reset': DURATION}}, not {value!r}")
        failures = value["failures"]
        if not _whole(failures, 1, cls.MAX_FAILURES):
            raise BadInput(
                f"job {job!r}: breaker failures is a whole number from 1 to {cls.MAX_FAILURES:,}, not {failures!r}"
            )
        reset = parse_duration(value["reset"], what=f"job {job!r}: breaker reset")
        if reset <= 0:
            raise BadInput(f"job {job!r}: breaker reset must be longer than 0, not {value['reset']!r}")
        return cls(failures, reset)

    def describe(self) -> dict[str, Any]:
        return {"failures": self.failures, "reset": self.reset}

    @classmethod
    def load(cls, described: Any) -> Breaker:
        return cls(int(described["failures"]), float(described["reset"]))


_SLA_KEYS = ("start_within", "finish_within")


@dataclass(frozen=True)
class Sla:
    """Each job should start within `start_within` and finish within `finish_within` of when
    it is due (either may be left out). The deadlines are stored on the job when it is
    enqueued (`sla_start_by`, `sla_finish_by`); maintenance marks the jobs that miss them.
    ``sla={"start_within": "5m", "finish_within": "1h"}``."""

    start_within: float | None = None  # seconds
    finish_within: float | None = None

    @classmethod
    def parse(cls, value: object, job: str) -> Sla:
        if not isinstance(value, dict) or not value or set(value) - set(_SLA_KEYS):
            raise BadInput(f"job {job!r}: sla takes 'start_within' and/or 'finish_within' durations, not {value!r}")
        policy = cls(*(deadline(value.get(key), f"job {job!r}: sla {key}") for key in _SLA_KEYS))
        if policy.start_within is None and policy.finish_within is None:
            raise BadInput(f"job {job!r}: sla needs start_within or finish_within (a duration), not {value!r}")
        return policy

    def describe(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in _SLA_KEYS if getattr(self, key) is not None}

    @classmethod
    def load(cls, described: Any) -> Sla:
        return cls(*(None if described.get(key) is None else float(described[key]) for key in _SLA_KEYS))


def deadline(value: object, what: str) -> float | None:
    """A deadline's duration in seconds, checked (`what` names it in the error); None stays None."""
    if value is None:
        return None
    seconds = parse_duration(value, what=what)
    if seconds <= 0:
        raise BadInput(f"{what} must be longer than 0, not {value!r}")
    return seconds


@dataclass(frozen=True)
class CalendarUse:
    """The type's jobs' run_at is moved, when they are enqueued, to the next instant the named
    calendar allows. ``calendar="business-hours"`` or ``calendar={"name": "business-hours",
    "mode": "allowed"}``: run only inside the calendar; ``"mode": "blackout"``: never start
    inside it (run_at moves to the end of the window). The calendar is read from the database
    by the enqueuing client, so registration only checks the shape; an unknown calendar is
    refused at enqueue."""

    name: str
    mode: str = "allowed"  # allowed | blackout

    @classmethod
    def parse(cls, value: object, job: str) -> CalendarUse:
        if isinstance(value, str):
            value = {"name": value}
        if not isinstance(value, dict) or set(value) - {"name", "mode"} or "name" not in value:
            raise BadInput(f"job {job!r}: calendar takes a name or {{'name': NAME, 'mode': 'allowed'}}, not {value!r}")
        mode = value.get("mode", "allowed")
        if mode not in ("allowed", "blackout"):
            raise BadInput(f"job {job!r}: calendar mode {mode!r} is not known; use 'allowed' or 'blackout'")
        return cls(check_name(value["name"], f"job {job!r}: calendar name"), mode)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "mode": self.mode}

    @classmethod
    def load(cls, described: Any) -> CalendarUse:
        return cls(str(described["name"]), str(described.get("mode", "allowed")))


Policy = Concurrency | Rate | Breaker | Sla | CalendarUse
_KINDS: dict[str, Any] = {
    "concurrency": Concurrency,
    "rate": Rate,
    "breaker": Breaker,
    "sla": Sla,
    "calendar": CalendarUse,
}


@dataclass(frozen=True)
class Limits:
    """A job type's policies together, as `@jobsup.job` takes them and as its definition row
    stores them (JSON, absent policies left out)."""

    concurrency: Concurrency | None = None
    rate: Rate | None = None
    breaker: Breaker | None = None
    sla: Sla | None = None
    calendar: CalendarUse | None = None

    @classmethod
    def parse(cls, job: str, **given: Any) -> Limits:
        """From `@jobsup.job`'s arguments (None: no such policy)."""
        return cls(**{key: None if value is None else _KINDS[key].parse(value, job) for key, value in given.items()})

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))

    def describe(self) -> dict[str, Any]:
        policies = {f.name: getattr(self, f.name) for f in fields(self)}
        return {name: policy.describe() for name, policy in policies.items() if policy is not None}

    @classmethod
    def load(cls, described: Any) -> Limits:
        """From a definition row; a policy it cannot read is left out (a hand-edited row)."""
        if not isinstance(described, dict):
            return cls()
        found = {}
        for key, kind in _KINDS.items():
            if key in described:
                try:
                    found[key] = kind.load(described[key])
                except (KeyError, TypeError, ValueError, AttributeError):
                    found[key] = None
        return cls(**found)


NONE = Limits()
