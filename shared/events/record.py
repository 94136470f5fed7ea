"""Building events inside the transitions, and sending them on: into the outbox (in the
same transaction, so an event exists if and only if its change committed) and to the
in-process hooks (after the commit).

This is an in-transaction step (`jobsup.store.steps`), on only for the transitions whose
events someone wants: every transition once a publisher is configured (`enable`), else those
a hook listens to. Off, a transition pays nothing, and PostgreSQL's claim and settle stay
single statements. The events of no transition (breakers, queues, SLAs,
batches, workflows) come from the store's announcements (`jobsup.store.announce`), which
this module listens to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from jobsup.clock import host_clock
from jobsup.events.catalogue import encode, error_type, event
from jobsup.store import announce, outbox
from jobsup.store.database import after_commit
from jobsup.store.schema import CANCELLED, DEAD_LETTERED, PENDING

if TYPE_CHECKING:
    from jobsup.store.steps import Change

# The event types each transition can announce.
TRANSITION_TYPES: dict[str, frozenset[str]] = {
    "enqueue": frozenset({"job.enqueued"}),
    "claim": frozenset({"job.started"}),
    "complete": frozenset({"job.succeeded"}),
    "fail": frozenset({"job.failed", "job.timed_out", "job.retrying", "job.dead_lettered"}),
    "expire": frozenset({"lease.expired", "job.retrying", "job.dead_lettered"}),
    "cancel": frozenset({"job.cancelled"}),
    "release": frozenset({"job.cancelled"}),  # a job an operator asked to cancel while it was held
    "retry": frozenset({"job.retrying"}),
}

_publishing = False  # a publisher is configured: every event goes into the outbox
_hooked: set[str] = set()  # the types some in-process hook listens to
_dispatch: Callable[[list[dict[str, Any]]], None] | None = None  # `jobsup.events.hooks.dispatch`
_wanted: frozenset[str] = frozenset()  # the transitions whose events someone wants


def enable(*, publish: bool = True) -> None:
    """Write every event into the outbox from now on (a publisher is configured)."""
    global _publishing
    _publishing = _publishing or publish
    _update_wanted()


def disable() -> None:
    """Stop writing events and announcing them to hooks (tests, and a process that stops publishing)."""
    global _publishing
    _publishing = False
    _hooked.clear()
    _update_wanted()


def want(kind: str, dispatch: Callable[[list[dict[str, Any]]], None]) -> None:
    """A hook listens to `kind`: build its events, and hand them to `dispatch` after commit."""
    global _dispatch
    _dispatch = dispatch
    _hooked.add(kind)
    _update_wanted()


def publishing() -> bool:
    return _publishing


def wanted(transition: str) -> bool:
    """Does the step run in `transition` (see `jobsup.store.steps.STEPS`)?"""
    return transition in _wanted


def _update_wanted() -> None:
    global _wanted
    _wanted = frozenset(t for t, types in TRANSITION_TYPES.items() if _publishing or types & _hooked)


def record(conn: Connection, change: Change) -> None:
    """The step: this transition's events, into the outbox and, after commit, to hooks."""
    built = list(_events(conn, change))
    if built:
        _send(conn, built)


class _Announcements:
    """The listener of the store's announcements: an event of no transition, sent as the
    transitions' events are."""

    def wants(self, kind: str) -> bool:
        return _publishing or kind in _hooked

    def announce(self, conn: Connection, kind: str, subject: str | None, fields: dict[str, Any]) -> None:
        _send(conn, [event(kind, host_clock(), **fields)], subject=subject)


announce.listen(_Announcements())


def _send(conn: Connection, built: list[dict[str, Any]], *, subject: str | None = None) -> None:
    if _publishing:
        at = host_clock()
        rows = [
            {
                "o_job": None if subject else e.get("job"),
                "o_subject": subject,
                "o_type": e["type"],
                "o_payload": encode(e),
                "o_at": at,
            }
            for e in built
        ]
        outbox.write(conn, rows)
    hooked = [e for e in built if e["type"] in _hooked]
    if hooked and _dispatch is not None:
        dispatch = _dispatch
        after_commit(conn, lambda: dispatch(hooked))


def _events(conn: Connection, change: Change) -> Iterable[dict[str, Any]]:
    at, transition = host_clock(), change.transition
    if transition == "enqueue":
        for job_id, new in change.rows:  # type: ignore[misc]  # enqueue's rows are (id, NewJob) pairs
            yield event("job.enqueued", at, job=job_id, name=new.name, queue=new.queue, attempt=0, actor=new.actor)
        return
    if transition == "claim":
        for row in change.rows:
            if row.id not in change.dropped:  # put back by a rate window: not started
                yield event(
                    "job.started", at, job=row.id, name=row.name, queue=row.queue, attempt=row.attempts, actor=row.actor
                )
        return
    found = outbox.facts(conn, [row[0] for row in change.rows])
    outcome = change.params.get("p_outcome")
    for row in change.rows:
        job = found.get(row[0])
        if job is None:
            continue
        same = announce.job_fields(job)
        if transition == "complete":
            yield event("job.succeeded", at, **same, outcome="succeeded")
        elif transition in ("cancel", "release"):  # a release is announced only when it ended the job
            if job.status == CANCELLED:
                yield event("job.cancelled", at, **same, outcome="cancelled")
        elif transition == "retry":
            yield event("job.retrying", at, **same, retry_at=job.run_at.isoformat())
        else:  # fail or expire: how the attempt ended, then what becomes of the job
            kind = {"timed_out": "job.timed_out", "lease_expired": "lease.expired"}.get(str(outcome), "job.failed")
            if outcome != "cancelled":  # the worker stopped it for its cancel: job.cancelled says it
                yield event(kind, at, **same, outcome=outcome, error_type=error_type(job.last_error))
            if job.status == PENDING:
                yield event("job.retrying", at, **same, retry_at=job.run_at.isoformat())
            elif job.status == DEAD_LETTERED:
                yield event("job.dead_lettered", at, **same, outcome=outcome, error_type=error_type(job.last_error))
            elif job.status == CANCELLED:  # an operator asked while it ran
                yield event("job.cancelled", at, **same, outcome="cancelled")
