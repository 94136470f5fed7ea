"""A job type's flow-control policies together, as `@jobsup.job` takes them and as its
definition stores them (`jobsup_job_definition.limits`, JSON: absent policies left out)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from jobsup.flow import breaker, calendar, concurrency, rate, sla

_MODULES = {"concurrency": concurrency, "rate": rate, "breaker": breaker, "sla": sla, "calendar": calendar}


@dataclass(frozen=True)
class Limits:
    concurrency: Any = None  # `jobsup.flow.concurrency.Concurrency`
    rate: Any = None  # `jobsup.flow.rate.Rate`
    breaker: Any = None  # `jobsup.flow.breaker.Breaker`
    sla: Any = None  # `jobsup.flow.sla.Sla`
    calendar: Any = None  # `jobsup.flow.calendar.CalendarUse`

    @classmethod
    def parse(cls, job: str, **given: Any) -> Limits:
        """From `@jobsup.job`'s arguments (None: no such policy)."""
        return cls(**{key: None if value is None else _MODULES[key].parse(value, job) for key, value in given.items()})

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))

    def describe(self) -> dict[str, Any]:
        return {
            f.name: _MODULES[f.name].describe(getattr(self, f.name))
            for f in fields(self)
            if getattr(self, f.name) is not None
        }

    @classmethod
    def load(cls, described: Any) -> Limits:
        """From a definition row; a policy it cannot read is left out (a hand-edited row)."""
        if not isinstance(described, dict):
            return cls()
        found = {}
        for key, module in _MODULES.items():
            if key in described:
                try:
                    found[key] = module.load(described[key])
                except (KeyError, TypeError, ValueError):
                    found[key] = None
        return cls(**found)


NONE = Limits()
