"""Paused queues (`jobsup_queue_state`): an operator's pause holds on every instance.

The pause is a part of the claim predicate (`jobsup.store.claim`): every dialect's
claim statement carries ``NOT EXISTS (SELECT 1 FROM jobsup_queue_state WHERE queue =
:p_queue AND paused)``. The subquery names no column of the job row, so the database runs it
once per claim, as one primary-key lookup, and a pause committed before a claim starts is
seen by that claim on every instance, with nothing cached in any worker. Jobs already
running finish; enqueueing goes on. Resuming wakes the queue's idle workers the way an
enqueue does (PostgreSQL NOTIFY, SQLite's pokes), in the resume's own transaction.

A pause and a resume write their audit row in the same transaction as the change, and
announce it there (`queue.paused`, `queue.resumed`) when they changed the queue's state.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, literal_column, select, true, union, update

from jobsup.errors import UnknownQueue
from jobsup.events import publishing
from jobsup.store.audit import Audit
from jobsup.store.claim import status_is
from jobsup.store.database import Database
from jobsup.store.schema import PENDING, RUNNING, job, job_definition, queue_state, recurring_job
from jobsup.store.schema import UNFINISHED_STATUSES as UNFINISHED
from jobsup.store.states import held_by_key

KNOWN_SHOWN = 20  # known queues named in the error about an unknown one


@dataclass(frozen=True)
class QueueState:
    """A queue an operator paused, or paused and resumed: who changed it last, and when."""

    queue: str
    paused: bool
    reason: str | None
    changed_by: str
    changed_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Pauses:
    def __init__(self, db: Database, audit: Audit) -> None:
        self.db, self.dialect, self.audit = db, db.dialect, audit

    def pause(
        self,
        queue: str,
        *,
        actor: str,
        reason: str | None = None,
        allow_unknown: bool = False,
        now: datetime | None = None,
    ) -> bool:
        """Pause `queue` on every instance; False if it was paused already (its reason and
        who paused it are updated, its pause time kept, nothing announced). A queue no job,
        definition, schedule or earlier pause names raises `UnknownQueue` and nothing is
        written, unless `allow_unknown` (pausing a queue ahead of the deploy that brings it)."""
        if not allow_unknown and not self.is_known(queue):
            raise UnknownQueue(_unknown_message(queue, self.known()))
        clock = self.dialect.clock_params(now)
        values: dict[str, Any] = {"paused": True, "reason": reason, "changed_by": actor}
        with self.db.transaction("queues") as conn:
            row = queue_state.c.queue == queue
            if conn.execute(select(queue_state.c.paused).where(row)).scalar() is None:
                # Its first row, as not paused: of pauses at once, the compare-and-set decides.
                first = {**values, "paused": False, "changed_at": self.dialect.clock()}
                self.dialect.insert_missing(conn, queue_state, {"queue": queue, **first}, clock)
            flip = update(queue_state).where(row, queue_state.c.paused != true())
            was = not conn.execute(flip.values({**values, "changed_at": self.dialect.clock()}), clock).rowcount
            if was:  # paused already: its reason and who paused it are updated
                conn.execute(update(queue_state).where(row).values(values), clock)
            detail = {"reason": reason, "was_paused": bool(was)}
            self.audit.record(actor, "queue.pause", target=queue, detail=detail, connection=conn, now=now)
            if not was:
                publishing.publish(
                    conn, "queue.paused", subject=f"queue:{queue}", queue=queue, actor=actor, reason=reason
                )
        return not was

    def resume(self, queue: str, *, actor: str, now: datetime | None = None) -> bool:
        """Let `queue` be claimed again, and wake its idle workers; False if it was not paused."""
        clock = self.dialect.clock_params(now)
        values = {"paused": False, "reason": None, "changed_by": actor, "changed_at": self.dialect.clock()}
        paused = (queue_state.c.queue == queue) & (queue_state.c.paused == true())
        with self.db.transaction("queues") as conn:
            resumed = bool(conn.execute(update(queue_state).where(paused).values(values), clock).rowcount)
            if resumed:
                self.dialect.after_enqueue(conn, {queue})
            outcome = "ok" if resumed else "not_found"
            self.audit.record(actor, "queue.resume", target=queue, outcome=outcome, connection=conn, now=now)
            if resumed:
                publishing.publish(conn, "queue.resumed", subject=f"queue:{queue}", queue=queue, actor=actor)
        return resumed

    def states(self) -> dict[str, QueueState]:
        """Every queue with a row: paused ones, and those resumed since."""
        with self.db.read("queues") as conn:
            rows = conn.execute(select(queue_state).order_by(queue_state.c.queue)).all()
        return {
            # As the claim reads it: `paused = true`, so a hand-written 7 reads as not paused there too.
            row.queue: QueueState(
                row.queue, row.paused is True or row.paused == 1, row.reason, row.changed_by, row.changed_at
            )
            for row in rows
        }

    def paused(self) -> set[str]:
        return {queue for queue, state in self.states().items() if state.paused}

    def is_known(self, queue: str) -> bool:
        """Whether an unfinished job, a job definition, a recurring schedule or a queue
        state names `queue` (each an indexed or small-table lookup, the jobs last)."""
        checks: list[Select[Any]] = [
            select(literal_column("1")).where(table.c.queue == queue).limit(1)
            for table in (queue_state, job_definition, recurring_job)
        ]
        checks += [select(literal_column("1")).where(job.c.queue == queue, status_is(s)).limit(1) for s in UNFINISHED]
        with self.db.read("queues") as conn:
            return any(conn.execute(check).first() is not None for check in checks)

    def known(self) -> list[str]:
        """Every queue named by a pending or running job, a job held by its concurrency key, a
        job definition, a recurring schedule or a queue state, sorted. Each through an index:
        finished jobs would make this read every row retention keeps, and a workflow step
        waiting for the steps before it has no index by status (its queue is known once it is
        pending, or by its job type's definition)."""
        stmt = union(
            select(job.c.queue).where(status_is(PENDING)).distinct(),
            select(job.c.queue).where(status_is(RUNNING)).distinct(),
            select(job.c.queue).where(held_by_key()).distinct(),
            select(job_definition.c.queue),
            select(recurring_job.c.queue),
            select(queue_state.c.queue),
        )
        with self.db.read("queues") as conn:
            return sorted(str(queue) for queue in conn.execute(stmt).scalars())


def _unknown_message(queue: str, known: list[str]) -> str:
    shown = ", ".join(known[:KNOWN_SHOWN]) + (
        f" and {len(known) - KNOWN_SHOWN} more" if len(known) > KNOWN_SHOWN else ""
    )
    return (
        f"queue {queue!r} is unknown: no job, job definition, schedule or earlier pause names it "
        f"(known queues: {shown or 'none'}); check the name, or pass --force (allow_unknown=True) to pause "
        "a queue ahead of the deploy that brings it"
    )
