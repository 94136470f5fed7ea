"""The operator's side of the client: queues (pause, resume, figures), circuit breakers, the
processes at work, parked events, the audit trail and dead letters. Every change is an
audited operator action (see `jobsup.client.core`)."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from jobsup.audit import actor_of
from jobsup.checks import INT64, check_limit, check_name, check_text
from jobsup.client.activity import empty, last_hour
from jobsup.client.core import ClientCore, found, row_id
from jobsup.client.shapes import (
    BreakerInfo,
    FailureGroup,
    LiveCounts,
    ProcessInfo,
    QueueInfo,
    QueueOverview,
    QueueStats,
)
from jobsup.durations import parse_duration
from jobsup.errors import BadInput, DuplicateJob
from jobsup.events.catalogue import error_type
from jobsup.observe.events import emit
from jobsup.store.audit import AuditEntry
from jobsup.store.rows import Job
from jobsup.store.schema import CANCELLED, DEAD_LETTERED, PENDING, RUNNING, STATUSES, SUCCEEDED, WAITING
from jobsup.store.states import RETRYING, SCHEDULED

MAX_REASON = 1000  # characters of a pause's reason


class Queues:
    """Queues: which there are, pausing and resuming them, and their figures."""

    def __init__(self, core: ClientCore) -> None:
        self._core = core

    def list(self) -> builtins.list[QueueInfo]:
        """Every queue a job, job definition, schedule or pause names, by name: pending and
        running jobs, ``state`` (``paused`` or ``active``), and for a queue an operator
        paused or resumed, the reason, who changed it (``changed_by``) and when (``since``)."""
        counts = self._core.store.overview.queue_counts()  # each status through its index: a live page reads it
        states = self._core.store.pauses.states()
        rows: builtins.list[QueueInfo] = []
        for queue in self._core.store.pauses.known():
            state = states.get(queue)
            rows.append(
                {
                    "queue": queue,
                    "pending": counts.get((queue, PENDING), 0),
                    "running": counts.get((queue, RUNNING), 0),
                    "state": "paused" if state is not None and state.paused else "active",
                    "reason": None if state is None else state.reason,
                    "changed_by": None if state is None else state.changed_by,
                    "since": None if state is None else state.changed_at,
                }
            )
        return rows

    def pause(
        self, queue: str, *, reason: str | None = None, actor: str | None = None, allow_unknown: bool = False
    ) -> bool:
        """Stop every instance from claiming jobs of `queue` (within one poll interval; a
        claim that started before the pause may still take a job). Running jobs finish,
        enqueueing goes on, and the pause outlives restarts (it is a row). False if it was
        paused already. A queue that no job, job definition, schedule or earlier pause
        names raises `UnknownQueue` and nothing is written, unless `allow_unknown` (to pause
        a queue before the deploy that brings it). Audited in the pause's transaction."""
        check_name(queue, "queue")
        if reason is not None:
            check_text(reason, "reason", longest=MAX_REASON)
        who = actor_of(actor)
        return self._core.store.pauses.pause(queue, actor=who, reason=reason, allow_unknown=allow_unknown)

    def resume(self, queue: str, *, actor: str | None = None) -> bool:
        """Let every instance claim jobs of `queue` again, and wake its idle workers; False
        if it was not paused (recorded as ``not_found``)."""
        check_name(queue, "queue")
        who = actor_of(actor)
        return self._core.store.pauses.resume(queue, actor=who)

    def stats(self, *, window: object = "5m") -> builtins.list[QueueStats]:
        """Per queue: counts by status, the oldest due pending job's age, and successes per
        minute over the last `window`."""
        from jobsup.clock import host_clock

        seconds = parse_duration(window, what="window")
        if seconds <= 0:
            raise BadInput("window must be longer than zero")
        # Waiting as the overview counts it, held by a key (a workflow step waiting for its
        # predecessors is its workflow's), so not read here; retrying and scheduled: parts of pending.
        counts, first_due = self._core.store.reads.job_counts([s for s in STATUSES if s != WAITING])
        counts.update(self._core.store.overview.state_counts())
        recent = self._core.store.reads.job_finished_since(seconds)
        now = host_clock()
        queues = sorted({queue for queue, _ in counts} | set(first_due) | set(recent))
        rows: builtins.list[QueueStats] = []
        for queue in queues:
            due = first_due.get(queue)
            rows.append(
                {
                    "queue": queue,
                    **live_counts(counts, queue),
                    "succeeded": counts.get((queue, SUCCEEDED), 0),
                    "dead_lettered": counts.get((queue, DEAD_LETTERED), 0),
                    "cancelled": counts.get((queue, CANCELLED), 0),
                    "oldest_pending_seconds": None if due is None else (now - due).total_seconds(),
                    "per_minute": recent.get(queue, 0) * 60.0 / seconds,
                }
            )
        return rows

    def recent_failures(
        self, *, window: object = "1h", limit: int = 500, now: datetime | None = None
    ) -> builtins.list[FailureGroup]:
        """What is failing: the jobs dead-lettered over the last `window` and those retrying
        now (at most `limit` of each, newest dead letters first), grouped by job type and
        error type (the error's leading exception name), most first, each with its newest
        job as an example."""
        seconds = parse_duration(window, what="window")
        if seconds <= 0:
            raise BadInput("window must be longer than zero")
        rows = self._core.store.overview.recent_failures(since=seconds, limit=check_limit(limit), now=now)
        groups: dict[tuple[str, str], FailureGroup] = {}
        for row in sorted(rows, key=lambda r: -int(r.id)):
            # The events' error_type (the exception's name); else how it ended ("timed out after 30s").
            key = (row.name, error_type(row.last_error) or " ".join((row.last_error or "-").split()[:2]))
            group = groups.get(key)
            if group is None:
                group = groups[key] = {
                    "name": row.name,
                    "error_type": key[1],
                    "count": 0,
                    "dead_lettered": 0,
                    "example_job": int(row.id),
                    "example_error": None if row.last_error is None else row.last_error[:200],
                }
            group["count"] += 1
            group["dead_lettered"] += row.status == DEAD_LETTERED
        return sorted(groups.values(), key=lambda g: (-g["count"], g["name"], g["error_type"]))

    def overview(self, *, now: datetime | None = None) -> builtins.list[QueueOverview]:
        """The dashboard's figures per queue: the live counts, ``dead_lettered``,
        ``oldest_pending_seconds``, and its last hour (`jobsup.client.activity`). Every
        figure comes from an indexed query."""
        reads = self._core.store.overview
        clock = now or datetime.now(UTC)
        counts = reads.queue_counts() | reads.state_counts(now=now)
        oldest = reads.oldest_due(now=now)
        hourly = last_hour(self._core.store, by="queue", now=clock)
        states = self._core.store.pauses.states()
        paused = {queue for queue, state in states.items() if state.paused}
        # Not `pauses.known()`: it reads waiting jobs, which no index covers.
        queues = sorted(set(states) | {queue for queue, _ in counts} | set(hourly))
        rows: builtins.list[QueueOverview] = []
        for queue in queues:
            due = oldest.get(queue)
            rows.append(
                {
                    "queue": queue,
                    "paused": queue in paused,
                    **live_counts(counts, queue),
                    "dead_lettered": counts.get((queue, DEAD_LETTERED), 0),
                    "oldest_pending_seconds": None if due is None else max(0.0, (clock - due).total_seconds()),
                    **hourly.get(queue, empty()),
                }
            )
        return rows


def live_counts(counts: Mapping[tuple[str, str], int], queue: str) -> LiveCounts:
    """`queue`'s unfinished jobs from counts by (queue, status or state)."""
    return {
        "waiting": counts.get((queue, WAITING), 0),
        "pending": counts.get((queue, PENDING), 0),
        "retrying": counts.get((queue, RETRYING), 0),
        "scheduled": counts.get((queue, SCHEDULED), 0),
        "running": counts.get((queue, RUNNING), 0),
    }


class Breakers:
    """Circuit breakers, one per job type that declares one."""

    def __init__(self, core: ClientCore) -> None:
        self._core = core

    def list(self) -> builtins.list[BreakerInfo]:
        """Every job type's breaker that has counted a failure: ``name``, ``state``
        (closed, open, half_open), consecutive ``failures``, ``opened_at``, ``reopen_at``
        (when an open one lets a probe through), ``probe_job_id``, ``changed_by``,
        ``changed_at``."""
        return cast(builtins.list[BreakerInfo], self._core.store.breakers.rows())  # its columns, by name

    def reset(self, name: str, *, actor: str | None = None) -> bool:
        """Close the circuit breaker of job type `name` at once, its failure count zeroed,
        audited ``breaker.reset`` in the same transaction. False when it was closed with no
        failures counted (recorded ``unchanged``) or never failed (``not_found``)."""
        check_name(name, "job name")
        who = actor_of(actor)
        return self._core.store.breakers.reset(name, actor=who)


class Workers:
    """The supervisors and workers registered in the database."""

    def __init__(self, core: ClientCore) -> None:
        self._core = core

    def list(self) -> builtins.list[ProcessInfo]:
        """Every registered supervisor and worker, with the job each worker holds."""
        held = self._core.store.reads.job_held_by()
        return [
            {
                "id": row.id,
                "kind": "supervisor" if row.kind == "supervisor" else "worker",
                "host": row.host,
                "pid": row.pid,
                "queue": row.queue,
                "supervisor_id": row.supervisor_id,
                "state": "supervising" if row.kind == "supervisor" else ("running" if row.id in held else "idle"),
                "job": held.get(row.id),
                "started_at": row.started_at,
                "heartbeat_at": row.heartbeat_at,
            }
            for row in self._core.store.processes.process_list()
        ]


class ParkedEvents:
    """Outbox events their destination refused for good: look, deliver again, discard."""

    def __init__(self, core: ClientCore) -> None:
        self._core = core

    def parked(self, *, limit: int = 100) -> list[dict[str, Any]]:
        """Parked events, oldest first: ``id`` (the outbox row's), ``job_id`` or ``subject``,
        ``type``, ``created_at``, ``parked_at``, ``attempts`` and ``last_error``."""
        limit = check_limit(limit)
        return self._core.store.outbox.parked(limit)

    def retry(self, ids: Sequence[int] | None, *, actor: str | None = None) -> list[int]:
        """Deliver the parked events `ids` again (None: every parked event), after whatever
        their objects announced since; audited ``events.retry``. Returns the ids that were
        parked."""
        chosen, who = _event_ids(ids), actor_of(actor)
        return self._core.store.outbox.unpark(chosen, actor=who)

    def discard(self, ids: Sequence[int] | None, *, actor: str | None = None) -> list[int]:
        """Delete the parked events `ids` (None: every parked event) undelivered; audited
        ``events.discard``. Returns the ids that were parked."""
        chosen, who = _event_ids(ids), actor_of(actor)
        return self._core.store.outbox.discard(chosen, actor=who)


class AuditTrail:
    """Operator actions as recorded (what is recorded: `jobsup.client.core`)."""

    def __init__(self, core: ClientCore) -> None:
        self._core = core
        # Record an action that has already happened, by a tool built on the client (the
        # CLI's key rotation and batch enqueue): its change has committed, and a failure to
        # write the row is logged rather than raised.
        self.record = core.audited

    def list(
        self, *, since: object = None, actor: str | None = None, action: str | None = None, limit: int = 100
    ) -> builtins.list[AuditEntry]:
        """Operator actions, newest first: since an aware datetime or a duration ago
        (``"1d"``), by `actor`, of `action` (``queue.pause``; or a prefix: ``queue.``)."""
        if isinstance(since, datetime):
            if since.tzinfo is None:
                raise BadInput("since must be timezone-aware (or a duration such as 1d)")
            start: datetime | float | None = since
        else:
            start = None if since is None else parse_duration(since, what="since")
        for text, what in ((actor, "actor"), (action, "action")):
            if text is not None:
                check_text(text, what)
        limit = check_limit(limit)
        return self._core.store.audit.list(since=start, actor=actor, action=action, limit=limit)


class DeadLetters:
    """Jobs that used up their attempts or were discarded: inspect, retry, purge."""

    def __init__(self, core: ClientCore, list_jobs: Callable[..., builtins.list[Job]]) -> None:
        self._core, self._list_jobs = core, list_jobs

    def list(self, *, queue: str | None = None, limit: int = 100) -> builtins.list[Job]:
        return self._list_jobs(status=DEAD_LETTERED, queue=queue, limit=limit)

    def retry(self, job_id: int, *, actor: str | None = None) -> bool:
        """Back to pending with a fresh budget of attempts; False if the job is not
        dead-lettered. Attempt numbers go on from where they were. Audited."""
        job_id, who = row_id(job_id), actor_of(actor)
        try:
            retried = bool(self._core.store.transitions.retry([job_id]))
        except DuplicateJob as exc:
            detail = {"reason": str(exc)}
            self._core.audited(who, "dead.retry", job_ids=[job_id], job_count=0, outcome="refused", detail=detail)
            raise
        self._core.audited(who, "dead.retry", job_ids=[job_id], job_count=int(retried), outcome=found(retried))
        return retried

    def retry_all(self, *, actor: str | None = None) -> int:
        """Retry every dead letter; return how many. One whose unique key a live job holds
        is left dead-lettered (and said so in the log), and the others are still retried.
        Audited as one row: the count, the first ids, how many were skipped."""
        who = actor_of(actor)
        store = self._core.store
        retried: builtins.list[int] = []
        skipped, after, outcome = 0, None, "failed"
        try:
            while ids := store.reads.job_ids_after(DEAD_LETTERED, after):
                for job_id in ids:
                    try:
                        retried += store.transitions.retry([job_id])
                    except DuplicateJob as exc:
                        skipped += 1
                        emit("dead_letter.retry_skipped", job=job_id, reason=str(exc))
                after = ids[-1]
            outcome = "ok"
        finally:  # what was retried before an error stopped it is recorded too
            detail = {"skipped": skipped} if skipped else None
            self._core.audited(
                who, "dead.retry_all", job_ids=retried, job_count=len(retried), outcome=outcome, detail=detail
            )
        return len(retried)

    def purge(self, *, older_than: object = None, actor: str | None = None) -> int:
        """Delete dead letters (all, or those finished more than `older_than` ago). Audited
        as one row: the count and the first ids."""
        age = None if older_than is None else parse_duration(older_than, what="older_than")
        who = actor_of(actor)
        first: builtins.list[int] = []
        detail = None if age is None else {"older_than_seconds": age}
        retention = self._core.store.retention  # the schema checked before the action starts
        try:
            purged = retention.purge(DEAD_LETTERED, older_than=age, first_ids=first)
        except BaseException:  # stopped part way: what was deleted by then is recorded (its count is not known)
            self._core.audited(who, "dead.purge", job_ids=first, outcome="failed", detail=detail)
            raise
        self._core.audited(who, "dead.purge", job_ids=first, job_count=purged, detail=detail)
        return purged


def _event_ids(ids: Sequence[int] | None) -> list[int] | None:
    if ids is None:
        return None
    chosen = list(ids)
    if not chosen or not all(isinstance(i, int) and not isinstance(i, bool) and 0 < i <= INT64 for i in chosen):
        raise BadInput(f"event ids must be positive whole numbers (or None for every parked event), not {ids!r}")
    return chosen
