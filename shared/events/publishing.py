"""Publishing events: how an event of a change leaves the transaction that made it. A
public event (`jobsup.events.catalogue`) goes into the outbox in the same transaction, so it
exists if and only if its change committed, and to the in-process hooks after the commit.

Two ways in, one way into the outbox and to the hooks (`_send`):
- a job transition's events are built by an in-transaction step (`jobsup.store.steps`) from
  the rows its compare-and-set returned (`publish_transition`); the step is on only for the
  transitions whose events someone wants: every transition once a publisher is configured
  (`enable`), else those a hook listens to. Off, a transition pays nothing, and
  PostgreSQL's claim and settle stay single statements. The log lines and metrics of a
  transition are the transition's own (`jobsup.store.transitions`), emitted after the
  commit from what the worker knows (its run time, the error's message);
- a change of no transition (a breaker, a pause, an SLA mark, a workflow or batch
  finishing, a step changed by its workflow) calls `publish` (or `publish_each`), which also
  hands the event to the log and the metrics after the commit: each change published once.
An enqueue's log lines and metrics (`emit_enqueued`) are its transition's own, as above.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from jobsup.clock import host_clock
from jobsup.events.catalogue import KINDS, TYPES, encode, error_type, event
from jobsup.observe.events import emit
from jobsup.store import outbox
from jobsup.store.database import after_commit
from jobsup.store.schema import CANCELLED, DEAD_LETTERED, PENDING

if TYPE_CHECKING:
    from jobsup.store.rows import NewJob
    from jobsup.store.steps import Change

# The event types each transition's step may build, from the catalogue.
TRANSITION_TYPES: dict[str, frozenset[str]] = {
    transition: frozenset(name for name, kind in KINDS.items() if transition in kind.made_by)
    for transition in {transition for kind in KINDS.values() for transition in kind.made_by}
}

_publishing = False  # a publisher is configured: every event goes into the outbox
_hooked: set[str] = set()  # the types some in-process hook listens to
_dispatch: Callable[[list[dict[str, Any]]], None] | None = None  # `jobsup.events.hooks.dispatch`
_wanted: frozenset[str] = frozenset()  # the transitions whose events someone wants


def enable() -> None:
    """Write every event into the outbox from now on (a publisher is configured)."""
    global _publishing
    _publishing = True
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


def enabled() -> bool:
    return _publishing


def wanted(transition: str) -> bool:
    """Does the step run in `transition` (see `jobsup.store.steps.STEPS`)?"""
    return transition in _wanted


def _update_wanted() -> None:
    global _wanted
    _wanted = frozenset(t for t, types in TRANSITION_TYPES.items() if _publishing or types & _hooked)


# A settle's parameters may carry the exception the job raised under this key (bound to no
# statement): its failure events hand it to in-process hooks as ``exception``, never to the
# outbox (a job with sensitive parameters has none: see `jobsup.worker.execute.Prepared`).
HOOKS_EXCEPTION = "hooks_exception"
_RAISED = frozenset({"job.failed", "job.dead_lettered", "job.retrying"})  # (a timeout has no exception)


def publish_transition(conn: Connection, change: Change) -> None:
    """The step: this transition's events, into the outbox and, after commit, to hooks."""
    built = list(_events(change))
    if built:
        _send(conn, built, exception=change.params.get(HOOKS_EXCEPTION))


def publish(conn: Connection, kind: str, /, *, subject: str | None = None, **fields: Any) -> None:
    """Publish a `kind` event of a change made on `conn` that is not a job transition (a
    breaker, a pause, an SLA mark, a workflow or batch finishing, a step changed by its
    workflow): into the outbox in its transaction, and after the commit to hooks, the log
    and the metrics. `subject` names the object of an event of no job (``queue:mail``) and
    orders its events in the outbox; an event of a job passes `job=` (`job_fields`) instead."""
    publish_each(conn, kind, [fields], subject=subject)


def publish_each(conn: Connection, kind: str, each: Sequence[dict[str, Any]], *, subject: str | None = None) -> None:
    """`publish` a `kind` event with each of `each`'s fields, in one outbox write (a cancel
    of a whole batch, say)."""
    if not each:
        return
    if kind in TYPES and (_publishing or kind in _hooked):  # public, and someone wants it
        at = host_clock()
        _send(conn, [event(kind, at, **fields) for fields in each], subject=subject)

    def emitted() -> None:
        for fields in each:
            emit(kind, **fields)

    after_commit(conn, emitted)


def emit_enqueued(
    jobs: Sequence[NewJob], ids: Sequence[int], inserted: Iterable[int], connection: Connection | None = None
) -> None:
    """The log lines and metrics of an enqueue (one per job, or one per queue and type for
    many), after the commit of `connection` (the caller's transaction), else now. Its public
    events are the `enqueue` transition's (`publish_transition`)."""
    positions = list(inserted)

    def emitted() -> None:
        if len(positions) == 1:
            new = jobs[positions[0]]
            emit("job.enqueued", job=ids[positions[0]], name=new.name, queue=new.queue)
            return
        for (queue, name), count in Counter((jobs[i].queue, jobs[i].name) for i in positions).items():
            emit("job.enqueued", name=name, queue=queue, count=count)

    after_commit(connection, emitted)


def job_fields(row: Any) -> dict[str, Any]:
    """What every event of a job says about it, from a row with its id, name, queue,
    attempts and actor."""
    return {"job": row.id, "name": row.name, "queue": row.queue, "attempt": row.attempts, "actor": row.actor}


def _send(
    conn: Connection,
    built: list[dict[str, Any]],
    *,
    subject: str | None = None,
    exception: BaseException | None = None,
) -> None:
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
    hooked = [
        {**e, "exception": exception} if exception is not None and e["type"] in _RAISED else e
        for e in built
        if e["type"] in _hooked
    ]
    if hooked and _dispatch is not None:
        dispatch = _dispatch
        after_commit(conn, lambda: dispatch(hooked))


def _events(change: Change) -> Iterable[dict[str, Any]]:
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
    outcome = change.params.get("p_outcome")
    for job in change.rows:  # as the compare-and-set returned them (`statements.EVENT_COLUMNS`)
        same = job_fields(job)
        if transition == "complete":
            yield event("job.succeeded", at, **same, outcome="succeeded")
        elif transition == "release":  # announced only when it ended the job
            if job.status == CANCELLED:
                yield event("job.cancelled", at, **same, outcome="cancelled")
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
