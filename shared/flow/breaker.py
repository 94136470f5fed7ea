"""The breaker policy of a job type (see `jobsup.flow`). Not built yet: any value is refused."""

from __future__ import annotations

from typing import Any

from jobsup.errors import BadInput


def parse(value: object, job: str) -> Any:
    raise BadInput(f"job {job!r}: breaker= is not supported yet")


def describe(policy: Any) -> dict[str, Any]:
    raise NotImplementedError


def load(described: Any) -> Any:
    return None
