"""The in-transaction steps of linked jobs (workflow steps, batch children, jobs with
triggers): what happens, in the transaction that ends a job, to the jobs that depend on it.
The protocol, and why the batch check cannot miss its end: docs/internals.md, "The steps of
linked jobs".
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from jobsup.errors import BadInput, ConfigurationError, LockBusy
from jobsup.events.publishing import job_fields, publish
from jobsup.observe.events import emit
from jobsup.store import limits
from jobsup.store.builder import build
from jobsup.store.database import after_commit
from jobsup.store.rows import NewJob, has_links
from jobsup.store.schema import CANCELLED, DEAD_LETTERED, FINISHED_STATUSES, SUCCEEDED
from jobsup.store.workflows import status_of as workflow_status

if TYPE_CHECKING:
    from jobsup.store.steps import Change
    from jobsup.store.transitions import Transitions

log = logging.getLogger("jobsup.links")


def linked_rows(rows: Sequence[Any]) -> list[Any]:
    """The rows of jobs that ended and are linked."""
    return [row for row in rows if row.status in FINISHED_STATUSES and has_links(row)]


def after_finish(conn: Connection, change: Change) -> None:
    finished = linked_rows(change.rows)
    if finished:
        settle_links(conn, change.transitions, finished, {"p_now": change.params.get("p_now")})


def settle_links(conn: Connection, t: Transitions, finished: Sequence[Any], clock: Mapping[str, Any]) -> None:
    level, workflows = list(finished), set()
    while level:
        fire_triggers(conn, t, [row for row in level if row.triggers is not None], clock)
        for batch_id in sorted({row.batch_id for row in level if row.batch_id is not None}):
            child_ended(conn, t, batch_id, clock)
        steps_ended = [row for row in level if row.workflow_id is not None]
        workflows |= {int(row.workflow_id) for row in steps_ended}
        level = unblock_dependents(conn, t, steps_ended, clock)
    for workflow_id in sorted(workflows):  # once every level is settled: its last steps may be among them
        step_ended(conn, t, workflow_id, clock)


# -- triggers -------------------------------------------------------------------------------

# Which `Trigger.on` values fire for each way a job ends.
FIRES_ON = {
    SUCCEEDED: {"succeeded", "any"},
    DEAD_LETTERED: {"failed", "dead_lettered", "any"},
    CANCELLED: {"failed", "cancelled", "any"},
}


def stored_triggers(text: str | None) -> list[dict[str, Any]]:
    """A row's triggers; an unreadable (hand-edited) value fires nothing rather than failing the settle."""
    try:
        described = json.loads(text or "[]")
    except ValueError:
        return []
    if not isinstance(described, list):
        return []
    return [t for t in described if isinstance(t, dict) and isinstance(t.get("job"), str)]


def fire_triggers(conn: Connection, t: Transitions, rows: Sequence[Any], clock: Mapping[str, Any]) -> None:
    news: list[NewJob] = []
    for row in rows:
        for trigger in stored_triggers(row.triggers):
            if trigger.get("on", "any") not in FIRES_ON.get(row.status, ()):
                continue
            try:
                jobtype = t.resolver.settings_of(trigger["job"])
                options = {"queue": trigger["queue"]} if trigger.get("queue") else {}
                news.append(build(jobtype, trigger.get("payload"), options, links={"parent_id": row.id}))
            except (BadInput, ConfigurationError) as exc:  # valid at enqueue; the row or the job type changed since
                log.warning("job %s: trigger %r not fired: %s", row.id, trigger.get("job"), exc)
    if news:
        with limits.bounded(conn, t, news):
            t.insert(conn, news, clock)


# -- workflows ------------------------------------------------------------------------------


def unblock_dependents(conn: Connection, t: Transitions, rows: Sequence[Any], clock: Mapping[str, Any]) -> list[Any]:
    """Count the ended `rows` on their dependents; returns the dependents this cancelled."""
    if not rows:
        return []
    failed = {row.id for row in rows if row.status != SUCCEEDED}
    done: dict[int, list[int]] = defaultdict(list)
    for dependent, depends_on in conn.execute(t.sql.dependents_of, {"p_ids": [row.id for row in rows]}):
        done[int(dependent)].append(int(depends_on))
    ready, blocked = [], []
    for dependent in sorted(done):
        deps = done[dependent]
        params = {**clock, "p_job": dependent, "p_done": len(deps), "p_failed": sum(d in failed for d in deps)}
        counts = t.sql.unblock.run(conn, params)
        counted = counts[0] if counts else None
        if counted is None or counted.waiting_on > 0:
            continue  # no longer waiting (cancelled by an operator), or more to wait for
        if counted.failed_deps and (counted.on_failure or "cancel") == "cancel":
            blocked.append(dependent)
        else:
            ready.append(dependent)
    if ready:
        promoted = t.sql.promote.run(conn, {**clock, "p_ids": ready})
        t.dialect.after_enqueue(conn, {row.queue for row in promoted})
    if not blocked:
        return []
    reason = "cancelled: a step it depends on did not succeed"
    cancelled = list(t.sql.cancel_blocked.run(conn, {**clock, "p_ids": blocked, "p_error": reason}))
    for row in cancelled:  # not through the cancel transition, whose steps would cascade again
        publish(conn, "job.cancelled", outcome="cancelled", **job_fields(row))
    return cancelled


# -- batches --------------------------------------------------------------------------------


def child_ended(conn: Connection, t: Transitions, batch_id: int, clock: Mapping[str, Any]) -> None:
    """A child of `batch_id` ended in this transaction (or the batch was closed): fire the
    batch now, or look again after the commit, or leave it to the sibling that will end
    after this commit (see the module's docstring)."""
    _member_ended(
        conn,
        t,
        t.batches.any_unfinished(conn, batch_id, skip_locked=True),
        lambda: fire_batch(conn, t, batch_id, clock),
        lambda: _settle_batch_later(t, batch_id),
    )


def _settle_batch_later(t: Transitions, batch_id: int) -> None:
    try:
        t.groups.settle_batch(batch_id)
    except LockBusy as exc:  # a callback's key a caller holds: maintenance fires it (`FinishBatches`)
        emit("db.error", operation="batches", batch=batch_id, error=exc)


def _member_ended(
    conn: Connection, t: Transitions, others_left: bool, now: Callable[[], object], later: Callable[[], object]
) -> None:
    # Where writers take turns (SQLite) no sibling can be ending beside this transaction,
    # so it finishes the group itself; elsewhere a sibling's uncommitted end is invisible
    # here (skipped, not waited for), so the group is looked at again after the commit.
    if others_left:
        return
    if t.dialect.one_writer:
        now()
        return
    after_commit(conn, later)


def fire_batch(conn: Connection, t: Transitions, batch_id: int, clock: Mapping[str, Any]) -> bool:
    """Finish the batch and enqueue its callbacks, in `conn`'s transaction; False when it
    is not closed yet or has already fired."""
    finished = t.batches.finish(conn, batch_id, clock)
    if finished is None:
        return False
    callbacks = finished.callbacks
    counts = t.batches.counts(conn, batch_id)
    ended = sum(counts[s] for s in FINISHED_STATUSES)
    succeeded = counts[SUCCEEDED] == ended
    outcome = "cancelled" if finished.cancelled else "succeeded" if succeeded else "failed"
    ended_counts = {status: n for status, n in counts.items() if n}
    publish(
        conn,
        "batch.finished",
        subject=f"batch:{batch_id}",
        batch=batch_id,
        name=finished.name,
        outcome=outcome,
        counts=ended_counts,
    )
    which = ["on_complete", "on_success" if succeeded else "on_failure"]
    news = []
    for key in which:
        callback = callbacks.get(key)
        if not isinstance(callback, dict) or not isinstance(callback.get("job"), str):
            continue
        payload = {**(callback.get("payload") or {}), "batch": {"id": batch_id, "counts": counts}}
        try:
            news.append(build(t.resolver.settings_of(callback["job"]), payload, {}))
        except (BadInput, ConfigurationError) as exc:
            log.warning("batch %s: %s callback %r not enqueued: %s", batch_id, key, callback["job"], exc)
    if news:
        with limits.bounded(conn, t, news):
            t.insert(conn, news, clock)
    return True


# -- the end of a workflow: found as a batch's is, announced once --------------------------


def step_ended(conn: Connection, t: Transitions, workflow_id: int, clock: Mapping[str, Any]) -> None:
    """A step of `workflow_id` ended in this transaction: finish the workflow now, or look
    again after the commit, or leave it to the step that will end after this commit."""
    _member_ended(
        conn,
        t,
        t.workflows.any_unfinished(conn, workflow_id, skip_locked=True),
        lambda: finish_workflow(conn, t, workflow_id, clock),
        lambda: t.groups.settle_workflow(workflow_id),
    )


def finish_workflow(conn: Connection, t: Transitions, workflow_id: int, clock: Mapping[str, Any]) -> bool:
    """Mark the workflow finished and announce it, in `conn`'s transaction; False when it
    had been already."""
    finished = t.workflows.finish(conn, workflow_id, clock)
    if finished is None:
        return False
    counts = t.workflows.counts(conn, workflow_id)
    outcome = workflow_status(counts, finished.cancelled_at is not None)
    publish(
        conn,
        "workflow.finished",
        subject=f"workflow:{workflow_id}",
        workflow=workflow_id,
        name=finished.name,
        outcome=outcome,
        counts=counts,
    )
    return True


def after_retry(conn: Connection, change: Change) -> None:
    """A dead-lettered workflow step runs again: whoever still waits on it waits again."""
    for row in change.rows:
        if row.workflow_id is not None:
            conn.execute(change.transitions.sql.recount, {"p_job": row.id, "p_now": change.params.get("p_now")})
