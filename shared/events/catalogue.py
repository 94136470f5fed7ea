"""The event catalogue: every event type jobsup announces, and the one shape they share.

An event is a small JSON object, versioned by ``"v"``::

    {"v": 1, "id": "5f0c...", "type": "job.dead_lettered", "at": "2026-12-02T10:00:00.123456+00:00",
     "job": 42, "name": "send-email", "queue": "mail", "attempt": 5, "outcome": "failed",
     "error_type": "SMTPError", "actor": "alice"}

`id` is unique per event (a consumer deduplicates by it: delivery is at least once); `job`,
`name`, `queue`, `attempt` say which job and attempt; `outcome` how the attempt ended;
`error_type` the exception's type only (never its message, which may quote payload values);
`actor` who enqueued the job (or who acted, for operator events); `at` when the change was
recorded. Fields that do not apply are left out. Events of no job carry their object
instead of `job`: `name` for `breaker.*` (the job type), `queue` for `queue.*`, `batch` and
`workflow` (ids, with their `name`) for `batch.finished` and `workflow.finished`; an
`sla.breached` is a job's (with `kind`, the deadline missed: ``start`` or ``finish``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from jobsup.errors import BadInput

VERSION = 1

# Each type, and what it means. A job's attempt ends with one of job.succeeded,
# job.failed, job.timed_out, lease.expired or job.cancelled; then, if it will run again,
# job.retrying, or, if it will not, job.dead_lettered.
TYPES: dict[str, str] = {
    "job.enqueued": "a job was stored (pending, or waiting on its dependencies)",
    "job.started": "a worker claimed the job: an attempt began",
    "job.succeeded": "the attempt succeeded; the job is finished",
    "job.failed": "the attempt raised (outcome failed)",
    "job.timed_out": "the attempt ran past its timeout (outcome timed_out)",
    "lease.expired": "the attempt's worker died or lost its lease (outcome lease_expired)",
    "job.retrying": "the job will run again at retry_at: after a failed attempt, or an operator's retry",
    "job.dead_lettered": "the job will not run again: attempts used up, or discarded",
    "job.cancelled": "the job was cancelled",
    "batch.finished": "a batch's last child ended (after it was closed): its callbacks fired",
    "workflow.finished": "a workflow's last step ended",
    "sla.breached": "a job missed an SLA deadline (once per job: the first deadline it missed)",
    "breaker.opened": "a job type's circuit breaker opened: its jobs are not claimed",
    "breaker.closed": "a job type's circuit breaker closed again",
    "queue.paused": "an operator paused a queue",
    "queue.resumed": "an operator resumed a queue",
}


def check_type(kind: str) -> str:
    """`kind` if it is a type of the catalogue, else `BadInput` naming them."""
    if kind not in TYPES:
        raise BadInput(f"no event type {kind!r}; the event types are {', '.join(TYPES)}")
    return kind


def event(kind: str, at: datetime, /, **fields: Any) -> dict[str, Any]:
    """One event of the catalogue's shape; fields that are None are left out."""
    return {
        "v": VERSION,
        "id": uuid.uuid4().hex,
        "type": kind,
        "at": at.isoformat(),
        **{key: value for key, value in fields.items() if value is not None},
    }


def error_type(stored: str | None) -> str | None:
    """The exception's type from a stored error (``TypeName: message``), without the message."""
    if not stored:
        return None
    head = stored.split(":", 1)[0].strip()
    return head if head.replace(".", "").replace("_", "").isalnum() else None


def encode(payload: Mapping[str, Any]) -> str:
    return json.dumps(payload, separators=(",", ":"), default=str)
