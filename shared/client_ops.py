"""The client's operator side: paused queues, circuit breakers and the audit trail (a part of `jobsup.Client`,
kept apart by role).

**What is audited.** Every call of an operator method of the API records one row in
`jobsup_audit`, whoever calls it: the CLI, or an application (a web app's "cancel" button is
an operator action too). The methods: `cancel`, `dead_letters.retry` / `retry_all` /
`purge`, `pause_queue`, `resume_queue`, `add_recurring`, `remove_recurring`,
`set_recurring_enabled`, `add_calendar`, `remove_calendar`, `cancel_workflow`,
`retry_workflow`, `cancel_batch`, `reset_breaker`. Each takes `actor=`; without it the actor
is `jobsup.audit.default_actor()` (``os:<user>``). What the worker and the supervisor do on
their own (settling, retrying with backoff, sweeping leases, firing schedules, retention)
goes through the store, not these methods, and is not audited. Bad input (a bad id, a queue
no one knows) is refused before anything is attempted and records nothing; an action that
ran records its outcome: ``ok``, ``not_found`` (nothing matched: no such job, schedule, or
paused queue) or ``refused`` (the database's state forbade it, with the reason in `detail`).

**When.** A pause, a resume and a breaker reset write their row in their own transaction. The other actions
write it right after their change has committed: they run through the store's transitions,
which the worker shares and which are one or many transactions (a retry-all or a purge works
in batches), and their outcome is known only once their compare-and-set has run. A process
that dies in that instant keeps the change and loses its row; a write that meets a dead
pooled connection (the first use of a pool after the database restarted) is tried once more;
a row that still cannot be written (the database went away) is logged as ``audit.failed``
with its fields, rather than making a change that happened look failed.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobsup.audit import actor_of
from jobsup.checks import check_limit, check_name, check_text
from jobsup.durations import parse_duration
from jobsup.errors import BadInput, ConfigurationError, DatabaseError, DatabaseUnavailable
from jobsup.observe.events import emit
from jobsup.secrets import SealedParameterError
from jobsup.store.audit import JOB_IDS_KEPT, AuditEntry
from jobsup.store.builder import fired_payload
from jobsup.store.rows import RecurringSchedule
from jobsup.store.schema import PENDING, RUNNING

if TYPE_CHECKING:
    from jobsup.store import Store

MAX_REASON = 1000  # characters of a pause's reason


class OpsAPI:
    """`Client`'s methods for paused queues, circuit breakers, parked events and the audit trail."""

    if TYPE_CHECKING:
        store: Store

        def _ready(self) -> None: ...
        def _enqueue(
            self, name: str, payload: Any, connection: Any, allow_unknown: bool, options: dict[str, Any]
        ) -> tuple[int, bool]: ...

    # -- an operator's enqueue ------------------------------------------------------------

    def enqueue_as_operator(
        self, name: str, payload: Any = None, *, actor: str, allow_unknown: bool = False, **options: Any
    ) -> int:
        """`enqueue` on an operator's behalf (the CLI, the HTTP API), audited as
        ``job.enqueue``, unlike an application's; ``unchanged`` when a live job's unique key
        meant nothing was added."""
        job_id, new = self._enqueue(name, payload, None, allow_unknown, {**options, "actor": actor})
        self._audit(actor, "job.enqueue", target=name, job_ids=[job_id], outcome="ok" if new else "unchanged")
        return job_id

    # -- paused queues --------------------------------------------------------------------

    def pause_queue(
        self, queue: str, *, reason: str | None = None, actor: str | None = None, allow_unknown: bool = False
    ) -> bool:
        """Stop every instance from claiming jobs of `queue` (within one poll interval; a
        claim that started before the pause may still take a job). Running jobs finish,
        enqueueing goes on, and the pause outlives restarts (it is a row). False if it was
        paused already. A queue that no job, job definition, schedule or earlier pause
        names raises `UnknownQueue` and nothing is written, unless `allow_unknown` (to pause
        a queue before the deploy that brings it)."""
        check_name(queue, "queue")
        if reason is not None:
            check_text(reason, "reason", longest=MAX_REASON)
        who = actor_of(actor)
        self._ready()
        return self.store.pauses.pause(queue, actor=who, reason=reason, allow_unknown=allow_unknown)

    def resume_queue(self, queue: str, *, actor: str | None = None) -> bool:
        """Let every instance claim jobs of `queue` again, and wake its idle workers; False
        if it was not paused (recorded as ``not_found``)."""
        check_name(queue, "queue")
        who = actor_of(actor)
        self._ready()
        return self.store.pauses.resume(queue, actor=who)

    def queues(self) -> list[dict[str, Any]]:
        """Every queue a job, job definition, schedule or pause names, by name: pending and
        running jobs, ``state`` (``paused`` or ``active``), and for a queue an operator
        paused or resumed, the reason, who changed it (``changed_by``) and when (``since``)."""
        self._ready()
        counts, _ = self.store.reads.job_counts((PENDING, RUNNING))
        states = self.store.pauses.states()
        rows = []
        for queue in self.store.pauses.known():
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

    # -- circuit breakers -----------------------------------------------------------------

    def reset_breaker(self, name: str, *, actor: str | None = None) -> bool:
        """Close the circuit breaker of job type `name` at once, its failure count zeroed,
        audited ``breaker.reset`` in the same transaction. False when it was closed with no
        failures counted (recorded ``unchanged``) or never failed (``not_found``)."""
        check_name(name, "job name")
        who = actor_of(actor)
        self._ready()
        return self.store.breakers.reset(name, actor=who)

    def breakers(self) -> list[dict[str, Any]]:
        """Every job type's breaker that has counted a failure: ``name``, ``state``
        (closed, open, half_open), consecutive ``failures``, ``opened_at``, ``reopen_at``
        (when an open one lets a probe through), ``probe_job_id``, ``changed_by``,
        ``changed_at``."""
        self._ready()
        return self.store.breakers.rows()

    # -- parked events ----------------------------------------------------------------------

    def parked_events(self, *, limit: int = 100) -> list[dict[str, Any]]:
        """Outbox events the destination refused for good, oldest first: ``id`` (the outbox
        row's), ``job_id`` or ``subject``, ``type``, ``created_at``, ``parked_at``,
        ``attempts`` and ``last_error``."""
        check = check_limit(limit)
        self._ready()
        return self.store.outbox.parked(check)

    def retry_events(self, ids: Sequence[int] | None, *, actor: str | None = None) -> list[int]:
        """Deliver the parked events `ids` again (None: every parked event), after whatever
        their objects announced since; audited ``events.retry``. Returns the ids that were
        parked."""
        chosen = _event_ids(ids)
        self._ready()
        return self.store.outbox.unpark(chosen, actor=actor_of(actor))

    def discard_events(self, ids: Sequence[int] | None, *, actor: str | None = None) -> list[int]:
        """Delete the parked events `ids` (None: every parked event) undelivered; audited
        ``events.discard``. Returns the ids that were parked."""
        chosen = _event_ids(ids)
        self._ready()
        return self.store.outbox.discard(chosen, actor=actor_of(actor))

    # -- the audit trail ------------------------------------------------------------------

    def audit(
        self, *, since: object = None, actor: str | None = None, action: str | None = None, limit: int = 100
    ) -> list[AuditEntry]:
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
        self._ready()
        return self.store.audit.list(since=start, actor=actor, action=action, limit=check_limit(limit))

    def _audit(
        self,
        actor: str,
        action: str,
        *,
        target: str | None = None,
        job_ids: Sequence[int] = (),
        job_count: int | None = None,
        outcome: str = "ok",
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Record an action that has already happened (see the module's docstring)."""
        record = functools.partial(
            self.store.audit.record,
            actor,
            action,
            target=target,
            job_ids=job_ids,
            job_count=job_count,
            outcome=outcome,
            detail=detail,
        )
        try:
            try:
                record()
            except DatabaseUnavailable:
                # Once: after a restart of the database the first use of each pool fails on
                # a dead connection and renews the pool; the change was made on another.
                record()
        except DatabaseError as exc:
            emit(
                "audit.failed",
                actor=actor,
                action=action,
                target=target,
                outcome=outcome,
                job_count=len(job_ids) if job_count is None else job_count,
                job_ids=",".join(map(str, list(job_ids)[:JOB_IDS_KEPT])) or None,
                reason=str(exc),
            )


def same_schedule(before: RecurringSchedule | None, after: RecurringSchedule) -> bool:
    """Whether an upsert changed nothing a schedule does (its sealed values compared
    opened: each upsert seals them afresh)."""
    if before is None:
        return False

    def shape(schedule: RecurringSchedule) -> tuple[Any, ...]:
        payload, _ = fired_payload(schedule)  # opened, as a fire sees it
        how = (schedule.overlap, schedule.calendar, schedule.calendar_mode, schedule.calendar_policy)
        return (schedule.job, schedule.cron, schedule.timezone, schedule.queue, schedule.priority, payload, how)

    try:
        return shape(before) == shape(after)
    except (SealedParameterError, ConfigurationError):
        return False  # sealed under a key this process lacks: count it as a change


def _event_ids(ids: Sequence[int] | None) -> list[int] | None:
    if ids is None:
        return None
    chosen = list(ids)
    if not chosen or not all(isinstance(i, int) and not isinstance(i, bool) and 0 < i < 2**63 for i in chosen):
        raise BadInput(f"event ids must be positive whole numbers (or None for every parked event), not {ids!r}")
    return chosen
