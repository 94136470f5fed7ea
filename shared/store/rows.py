"""Rows as frozen dataclasses: what the store hands to the client, the worker and the CLI, and
what they hand back to it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, Literal, TypedDict


class Frame(TypedDict):
    """One frame of a failed attempt's traceback: where, never what (no source, no values)."""

    file: str
    line: int | None
    function: str


@dataclass(frozen=True)
class Attempt:
    attempt: int
    outcome: str | None
    owner: str
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    progress: Any = None  # what it last reported (`ctx.set_progress`), decoded
    traceback: list[Frame] | None = None  # where a failure was raised, innermost last


JobStatus = Literal["waiting", "pending", "running", "succeeded", "dead_lettered", "cancelled"]


@dataclass(frozen=True)
class Job:
    """A job as stored. `payload` is decoded; a corrupt payload is shown as its raw text."""

    id: int
    name: str
    queue: str
    status: JobStatus
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
    workflow_id: int | None = None
    step: str | None = None  # its name in its workflow
    batch_id: int | None = None
    parent_id: int | None = None  # the job whose trigger or batch enqueued it
    concurrency_key: str | None = None  # the key it is counted under (`jobsup.store.concurrency_keys`)
    sla_start_by: datetime | None = None  # its SLA deadlines (`jobsup.store.sla`)
    sla_finish_by: datetime | None = None
    sla_breached_at: datetime | None = None  # when maintenance found it past one
    cancel_requested_at: datetime | None = None  # an operator cancelled it while it ran: it ends cancelled
    progress: Any = None  # what its latest attempt last reported (`ctx.set_progress`); `Client.get` only
    rerun_of: int | None = None  # the finished job it was made again from (`Client.rerun`)
    reruns: tuple[int, ...] = ()  # the jobs made again from it; `Client.get` only

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values, with the same field names (for `--json` and logs)."""
        return {key: _plain(value) for key, value in asdict(self).items()}


@dataclass(frozen=True)
class Lease:
    """The fence of every worker-side write: a stale holder's write matches nothing."""

    job_id: int
    owner: str
    attempt: int


class Renewed(set[int]):
    """The ids of the leases a renewal extended, and `cancel_requested`: those of jobs an
    operator asked to cancel."""

    def __init__(self, ids: Iterable[int] = (), cancel_requested: Iterable[int] = ()) -> None:
        super().__init__(ids)
        self.cancel_requested = set(cancel_requested)


def lease_owner(host: str, worker: str, token: str, at_once: int) -> str:
    """A worker's lease owner (and process row id): its host, its label (``default#1``), a
    token of its own, and how many jobs it runs at once when more than one (``/3``), which
    the sweep reads when the worker is gone with its host (`owner_runs_at_once`)."""
    return f"{host}:{worker}:{token}" + (f"/{at_once}" if at_once > 1 else "")


def owner_runs_at_once(owner: str) -> int:
    """How many jobs the worker `owner` ran at once (1 for owners named otherwise)."""
    _, _, width = owner.rpartition(":")[2].partition("/")
    return int(width) if width.isdigit() else 1


def needs_steps(row: Any) -> bool:
    """Does the end of the job of `row` (a `ClaimedJob`, or a row with the columns of
    `step_statements.STEP_COLUMNS`; a row without them needs none) set off in-transaction
    steps: is it in a workflow or batch, with triggers, or under a concurrency key (its slot
    to hand on)?"""
    return any(getattr(row, name, None) is not None for name in STEP_FIELDS)


STEP_FIELDS = ("workflow_id", "batch_id", "triggers", "concurrency_key")


@dataclass(frozen=True)
class Held:
    """A lease with the job's name and queue: enough to settle it and to say so."""

    lease: Lease
    name: str
    queue: str
    needs_steps: bool  # in a workflow or batch, with triggers or under a key: its settle has steps to run

    @property
    def id(self) -> int:
        return self.lease.job_id

    @classmethod
    def of_row(cls, row: Any) -> Held:
        """From a row of `Statements.held_by`."""
        return cls(Lease(row.id, row.lease_owner, row.attempts), row.name, row.queue, needs_steps(row))


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
    workflow_id: int | None = None
    batch_id: int | None = None
    triggers: str | None = None
    concurrency_key: str | None = None
    traceparent: str | None = None  # the enqueuer's W3C trace context
    due: float | None = None  # when it became due, in seconds since the epoch (None when unreadable)

    # Built once per job, not at every look (the worker's path looks several times a job).
    @cached_property
    def lease(self) -> Lease:
        return Lease(self.id, self.owner, self.attempt)

    @cached_property
    def needs_steps(self) -> bool:
        return needs_steps(self)

    @cached_property
    def held(self) -> Held:
        return Held(self.lease, self.name, self.queue, self.needs_steps)


# How an attempt ended, as the worker (or, for a dead worker, its supervisor) reports it.
SUCCEEDED, FAILED, DISCARDED, TIMED_OUT, RELEASED, LEASE_EXPIRED, CANCELLED = (
    "succeeded",
    "failed",
    "discarded",
    "timed_out",
    "released",
    "lease_expired",
    "cancelled",
)


@dataclass(slots=True)  # not frozen: a frozen init costs a job a microsecond, of about forty
class Outcome:
    """How one attempt ended: handed to `Transitions.complete`, `fail` or
    `release`, which write it.

    `kind` is one of SUCCEEDED, FAILED, DISCARDED (dead-letter now), TIMED_OUT, RELEASED
    (back to pending, the attempt not counted), LEASE_EXPIRED. `retry_in` is a delay the job
    asked for (`Retry(after=)`); None means its retry policy. `result` is the success's JSON."""

    held: Held
    kind: str
    error: str | None = None
    retry_in: float | None = None
    result: str | None = None
    seconds: float | None = None  # how long the job function ran
    worker: str | None = None  # the worker's label, for events
    # What the job raised, in the worker's process only (never written: `error` is the
    # scrubbed text): its final failure's log record carries it for Sentry and the like.
    exc: BaseException | None = field(default=None, compare=False, repr=False)
    traceback: str | None = None  # a failure's frames, JSON (`jobsup.worker.frames`)


@dataclass(slots=True)  # not frozen: a frozen init costs a bulk enqueue 2 us a job
class NewJob:
    """A job row to insert, already validated (see `jobsup.store.builder`). Its fields are
    `jobsup_job` columns; `run_at` None means the reference clock's now."""

    name: str
    queue: str
    payload: str
    priority: int
    run_at: datetime | None
    max_attempts: int
    timeout: float | None
    unique_key: str | None = None
    actor: str | None = None
    recurring_name: str | None = None
    scheduled_slot: datetime | None = None
    # Links (`jobsup.store.steps`): None for a plain job.
    workflow_id: int | None = None
    step: str | None = None
    batch_id: int | None = None
    parent_id: int | None = None
    waiting_on: int | None = None  # dependencies to finish first (>= 1): inserted `waiting`
    on_failure: str | None = None
    triggers: str | None = None  # JSON
    concurrency_key: str | None = None  # with its limit: at most that many admitted at once
    concurrency_limit: int | None = None
    # SLA deadlines (`jobsup.store.sla`): None for a job without one.
    sla_start_by: datetime | None = None
    sla_finish_by: datetime | None = None
    traceparent: str | None = None  # the enqueuer's W3C trace context (`jobsup.observe.tracing`)
    # Not a column: its sensitive values, sealed once the insert gives it an id.
    sealing: Any = field(default=None, compare=False, repr=False, metadata={"column": False})

    @property
    def writes_twice(self) -> bool:
        """Its insert takes more than one statement (a unique key, secrets to seal, a
        concurrency slot to take): never the single-statement autocommit insert."""
        return self.unique_key is not None or self.sealing is not None or self.concurrency_key is not None


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
    overlap: str = "allow"  # skip | allow | queue
    calendar: str | None = None
    calendar_mode: str = "blackout"  # blackout | allowed
    calendar_policy: str = "skip"  # skip | defer_to_end
    skipped: int = 0  # slots not fired (overlap, calendar)
    last_skipped_at: datetime | None = None
    # New at every `add_recurring`, bound into its sealed values (`jobsup.secrets.schedule_binding`).
    seal_id: str | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {key: _plain(value) for key, value in asdict(self).items() if key != "seal_id"}


def frames_of(text: str | None) -> list[Frame] | None:
    """A stored traceback's frames; None for none, or for a text that is not a list of them."""
    found = decode_stored(text)
    if not isinstance(found, list) or not all(isinstance(frame, dict) for frame in found):
        return None
    return [
        Frame(
            file=str(f.get("file")),
            line=f.get("line") if isinstance(f.get("line"), int) else None,
            function=str(f.get("function")),
        )
        for f in found
    ]


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
class Definition:
    """A published job type: its settings, who declared them last and when, and the newest
    declaration by another instance that disagreed (None when all agree)."""

    name: str
    queue: str
    priority: int
    max_attempts: int
    timeout: float | None
    retry: dict[str, Any]
    declared_by: str
    declared_at: datetime | None
    first_seen_at: datetime | None
    disagreement: dict[str, Any] | None
    triggers: list[dict[str, Any]] | None = None
    params: dict[str, Any] | None = None  # JSON Schema of its parameters; None: untyped
    limits: dict[str, Any] | None = None  # its flow-control policies (`jobsup.policies`)
    retain: dict[str, float | None] | None = None  # its own retention by end state (`jobsup.retention`)

    def to_dict(self) -> dict[str, Any]:
        return {key: _plain(value) for key, value in asdict(self).items()}


@dataclass(frozen=True)
class BatchInfo:
    """A batch: `status` is open (children may be added), running (closed, children left),
    succeeded or failed (every child ended, all succeeded or not), or cancelled; `counts`
    has every job status; `callbacks` as given."""

    id: int
    name: str | None
    status: str
    total: int
    counts: dict[str, int]
    callbacks: dict[str, Any]
    created_at: datetime | None
    closed_at: datetime | None
    finished_at: datetime | None
    cancelled_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return {key: _plain(value) for key, value in asdict(self).items()}


@dataclass(frozen=True)
class StepInfo:
    """One step of a workflow as stored."""

    name: str
    job_id: int
    job: str
    status: str
    depends_on: tuple[str, ...]
    on_failure: str
    attempts: int
    last_error: str | None
    result: Any


@dataclass(frozen=True)
class WorkflowInfo:
    """A workflow: `status` is running (a step is unfinished), succeeded (every step
    succeeded), failed (a step did not succeed), or cancelled (an operator cancelled it)."""

    id: int
    name: str
    status: str
    created_at: datetime | None
    cancelled_at: datetime | None
    counts: dict[str, int]
    steps: tuple[StepInfo, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {key: _plain(value) for key, value in asdict(self).items()}


@dataclass(frozen=True)
class LogLine:
    """A line a job logged through `ctx.log`: the attempt that logged it, when (the worker's
    clock), its level (``debug``, ``info``, ``warning``, ``error``) and its scrubbed text."""

    id: int
    job_id: int
    attempt: int
    logged_at: datetime | None
    level: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {key: _plain(value) for key, value in asdict(self).items()}
