"""The event catalogue: every event type jobsup emits, declared once here with how loud its
log line is, and, for the public types, what it means; and the one shape public events share.

Public events (those with a meaning below) reach hooks and, through the outbox, the
publishers. The log and the metrics hear every change: a change of no job transition by the
same event; a job transition by its own words for it, with what only the worker knows (its
run time, the error's message): ``job.failed outcome=timed_out`` where the public event is
``job.timed_out``, and no separate ``job.retrying`` line after a failed attempt. An event is a
small JSON object, versioned by ``"v"``::

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
from dataclasses import dataclass
from datetime import datetime
from logging import DEBUG, ERROR, INFO, WARNING
from typing import Any

from jobsup.errors import BadInput

VERSION = 1


@dataclass(frozen=True)
class Kind:
    level: int = INFO  # of its log line, where it has one
    meaning: str | None = None  # a public type's, as its subscribers read it; None: internal
    # The job transitions whose in-transaction step builds it (`jobsup.events.publishing`);
    # the others are published by the change that makes them.
    made_by: tuple[str, ...] = ()


_INFO, _WARNING, _ERROR = Kind(), Kind(WARNING), Kind(ERROR)

# Every event type. A job's attempt ends with one of job.succeeded, job.failed,
# job.timed_out, lease.expired or job.cancelled; then, if it will run again, job.retrying,
# or, if it will not, job.dead_lettered.
KINDS: dict[str, Kind] = {
    # -- public: hooks and the outbox hear these too ----------------------------------------
    "job.enqueued": Kind(meaning="a job was stored (pending, or waiting on its dependencies)", made_by=("enqueue",)),
    # A start and a success are logged at DEBUG, one line per job; at INFO the successes of a
    # settle are one `jobs.succeeded` line ("Logs" in docs/how-to/operating.md says why), which
    # carries the per-job lines (`EACH`).
    "job.started": Kind(DEBUG, "a worker claimed the job: an attempt began", ("claim",)),
    "job.succeeded": Kind(DEBUG, "the attempt succeeded; the job is finished", ("complete",)),
    "job.failed": Kind(WARNING, "the attempt raised (outcome failed)", ("fail",)),
    "job.timed_out": Kind(WARNING, "the attempt ran past its timeout (outcome timed_out)", ("fail",)),
    "lease.expired": Kind(WARNING, "the attempt's worker died or lost its lease (outcome lease_expired)", ("expire",)),
    "job.retrying": Kind(
        meaning="the job will run again at retry_at: after a failed attempt, or an operator's retry",
        made_by=("fail", "expire"),
    ),
    # At ERROR, with the job's exception on the record (not in jobsup's line): what an error
    # tracker such as Sentry reports (docs/how-to/sentry.md).
    "job.dead_lettered": Kind(ERROR, "the job will not run again: attempts used up, or discarded", ("fail", "expire")),
    # By an operator; or, for a running job, by the end its worker (or the sweep, or a release
    # of one held unstarted) writes once the job has stopped.
    "job.cancelled": Kind(meaning="the job was cancelled", made_by=("fail", "expire", "release")),
    "batch.finished": Kind(meaning="a batch's last child ended (after it was closed): its callbacks fired"),
    "workflow.finished": Kind(meaning="a workflow's last step ended"),
    "sla.breached": Kind(WARNING, "a job missed an SLA deadline (once per job: the first deadline it missed)"),
    "breaker.opened": Kind(WARNING, "a job type's circuit breaker opened: its jobs are not claimed"),
    "breaker.closed": Kind(meaning="a job type's circuit breaker closed again"),
    "queue.paused": Kind(meaning="an operator paused a queue"),
    "queue.resumed": Kind(meaning="an operator resumed a queue"),
    # -- a job, inside the process that handles it -----------------------------------------
    "jobs.succeeded": _INFO,  # the successes one settle wrote: their count, ids, names, run time (and EACH)
    "jobs.started": Kind(DEBUG),  # the starts a batch run one by one held (`jobsup.worker.starts`)
    "job.cancel_requested": _INFO,
    "job.cancelling": _INFO,
    "job.released": _INFO,
    "job.skipped": _INFO,
    "job.settle_stale": _INFO,
    "job.lease_lost": _WARNING,
    "job.traceback": _WARNING,
    "job.result_dropped": _WARNING,
    "job.retry_in_failed": _INFO,
    "joblog.write_failed": _WARNING,
    "metrics.write_failed": _WARNING,
    "joblog.line_dropped": _WARNING,
    "secrets.unseal_failed": _ERROR,
    "workflow.enqueued": _INFO,
    "workflow.retried": _INFO,
    "dead_letter.retry_skipped": _INFO,
    "concurrency.repaired": _WARNING,
    "breaker.half_open": _INFO,
    "breaker.reset": _INFO,
    "breaker.reset_by_success": _INFO,
    "recurring.fired": _INFO,
    "recurring.already_fired": _INFO,
    "recurring.skipped": _INFO,
    "recurring.invalid": _WARNING,
    "recurring.behind": _WARNING,
    # -- processes ---------------------------------------------------------------------------
    "supervisor.started": _INFO,
    "supervisor.stopping": _INFO,
    "supervisor.stopping_now": _INFO,
    "supervisor.stopped": _INFO,
    "supervisor.killing": _INFO,
    "supervisor.polling": _WARNING,
    "supervisor.chores_failed": _INFO,
    "supervisor.enforce_failed": _INFO,
    "worker.spawned": _INFO,
    "worker.spawn_failed": _INFO,
    "worker.started": _INFO,
    "worker.ending": _INFO,
    "worker.stopped": _INFO,
    "worker.died": _WARNING,
    "worker.crashed": _ERROR,
    "worker.boot_failed": _WARNING,
    "worker.restarting": _INFO,
    "worker.restart_delayed": _INFO,
    "worker.killed_overdue": _WARNING,
    "worker.claim_batch_limited": _WARNING,
    "worker.orphan_stuck": _WARNING,
    "worker.orphans_released": _INFO,
    "burial.abandoned": _INFO,
    "metrics.serving": _INFO,
    "health.failed": _WARNING,
    "http.failed": _ERROR,
    "definitions.incompatible": _WARNING,
    "fault.hanging": _WARNING,
    # -- the database, upkeep and delivery ---------------------------------------------------
    "db.error": _ERROR,
    "maintenance.failed": _ERROR,
    "jobs.purged": _INFO,
    "audit.purged": _INFO,
    "audit.failed": _ERROR,
    "processes.pruned": _INFO,
    "hook.failed": _ERROR,
    "hook.timed_out": _WARNING,
    "hook.dropped": _WARNING,
    "events.delivered": _INFO,
    "events.publish_failed": _WARNING,
    "events.publish_recovered": _INFO,
    "events.parked": _WARNING,
    "relay.failed": _ERROR,
}

# The public types, and what each means.
TYPES: dict[str, str] = {name: kind.meaning for name, kind in KINDS.items() if kind.meaning is not None}


# Events of many jobs at once, and the per-job event each of their jobs stands for: the event
# carries its jobs in `each`, a tuple of the fields named here per job, and the log shows each
# as a line of that kind (at its level). One event per settle or batch, not one per job: at a
# claim batch of 100 an event per success and per start were each a tenth of a worker's CPU.
EACH = {
    "jobs.succeeded": ("job.succeeded", ("job", "name", "attempt", "queue", "seconds")),
    "jobs.started": ("job.started", ("job", "name", "attempt", "queue", "waited")),
}


def level(kind: str) -> int:
    """The log level of a `kind` event (INFO for a name the catalogue lacks, which a test forbids)."""
    return KINDS.get(kind, _INFO).level


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
