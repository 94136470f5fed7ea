"""Rows as frozen dataclasses: what the store hands to the client, the worker and the CLI."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Attempt:
    attempt: int
    outcome: str | None
    owner: str
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None


@dataclass(frozen=True)
class Job:
    """A job as stored. `payload` is decoded; a corrupt payload is shown as its raw text."""

    id: int
    name: str
    queue: str
    status: str
    priority: int
    payload: Any
    attempts: int
    max_attempts: int
    run_at: datetime | None
    last_error: str | None
    actor: str | None
    unique_key: str | None
    timeout: float | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    created_at: datetime | None
    updated_at: datetime | None
    finished_at: datetime | None
    result: Any
    history: tuple[Attempt, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values, with the same field names (for `--json` and logs)."""
        return {key: _plain(value) for key, value in asdict(self).items()}


@dataclass(frozen=True)
class ClaimedJob:
    """A job a worker holds under its lease. The payload stays raw text: decoding is the
    worker's job, so a corrupt row fails its attempt there instead of breaking the claim."""

    id: int
    name: str
    queue: str
    payload: str
    attempt: int
    max_attempts: int
    timeout: float | None
    actor: str | None
    owner: str
    due_at: datetime | None = None  # when it became due (None when unreadable)

    @property
    def lease(self) -> Lease:
        return Lease(self.id, self.owner, self.attempt)


@dataclass(frozen=True)
class Lease:
    """The fence of every worker-side write: a stale holder's write matches nothing."""

    job_id: int
    owner: str
    attempt: int


@dataclass(frozen=True)
class NewJob:
    """A job to insert, already validated (see `jobsup.client`)."""

    name: str
    queue: str
    payload: str
    priority: int
    run_at: datetime | None
    delay: float
    max_attempts: int
    timeout: float | None
    unique_key: str | None
    actor: str | None


def decode_stored(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


@dataclass(frozen=True)
class RecurringSchedule:
    """A recurring schedule as stored: `job` runs with `payload` at each `cron` slot."""

    name: str
    job: str
    cron: str
    timezone: str
    payload: Any
    queue: str
    priority: int
    enabled: bool
    next_run_at: datetime | None
    last_fired_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return {key: _plain(value) for key, value in asdict(self).items()}
