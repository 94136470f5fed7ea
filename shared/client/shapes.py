"""The shapes of what the client's parts return as mappings (`client.queues.list()`,
`.stats()`, `.overview()`, `client.breakers.list()`, `client.workers.list()`): plain dicts
at run time (so `--json` and the HTTP API print them as they are), typed for your checker."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, TypedDict


class QueueInfo(TypedDict):
    """A queue (`client.queues.list()`): its live jobs, and whether an operator paused it."""

    queue: str
    pending: int
    running: int
    state: Literal["paused", "active"]
    reason: str | None  # why it was paused or resumed, as the operator said
    changed_by: str | None
    since: datetime | None


class LiveCounts(TypedDict):
    """A queue's unfinished jobs, as `jobsup stats`, the overview and the gauges count them
    (`jobsup.store.states`)."""

    waiting: int  # held back by a concurrency key
    pending: int  # all of them, retrying and scheduled ones too
    retrying: int  # pending after a failed attempt
    scheduled: int  # pending, not yet tried, due later
    running: int


class QueueStats(LiveCounts):
    """A queue's figures (`client.queues.stats()`): jobs by status, the oldest due pending
    job's age in seconds, and successes per minute over the window."""

    queue: str
    succeeded: int
    dead_lettered: int
    cancelled: int
    oldest_pending_seconds: float | None
    per_minute: float


class Hourly(TypedDict):
    """The last hour of a queue or a job type (`client.last_hour()`) in twelve five-minute
    buckets, oldest first: jobs succeeded, jobs dead-lettered, and the succeeded ones' mean
    seconds from due to finished (None for a bucket with none)."""

    succeeded: list[int]
    failed: list[int]
    latency: list[float | None]


class QueueOverview(LiveCounts, Hourly):
    """A queue on the dashboard (`client.queues.overview()`): live counts, and its last hour."""

    queue: str
    paused: bool
    dead_lettered: int
    oldest_pending_seconds: float | None


class BreakerInfo(TypedDict):
    """A job type's circuit breaker (`client.breakers.list()`)."""

    name: str
    state: Literal["closed", "open", "half_open"]
    failures: int  # consecutive
    opened_at: datetime | None
    reopen_at: datetime | None  # when an open breaker lets one probe through
    probe_job_id: int | None
    changed_by: str | None
    changed_at: datetime


class ProcessInfo(TypedDict):
    """A registered supervisor or worker (`client.workers.list()`)."""

    id: str
    kind: Literal["supervisor", "worker"]
    host: str
    pid: int
    queue: str | None
    supervisor_id: str | None
    state: Literal["supervising", "running", "idle"]
    job: int | None  # the job a worker holds
    started_at: datetime | None  # (never None: NOT NULL columns, read through a type that allows it)
    heartbeat_at: datetime | None


class FailureGroup(TypedDict):
    """Jobs failing alike (`client.queues.recent_failures()`): one job type and one error type,
    how many, and the newest of them as an example."""

    name: str
    error_type: str
    count: int
    dead_lettered: int  # of `count`: the rest are retrying
    example_job: int
    example_error: str | None
