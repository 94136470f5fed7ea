"""SLA deadlines: marking the jobs that miss them (`sla_breached_at`).

A job's deadlines are written when it is enqueued (`jobsup.store.builder.sla_deadlines`):
`sla_start_by`, by which it should have started, and `sla_finish_by`, by which it should
have finished. The maintenance tick looks for unmarked jobs past one, in bounded batches,
each through its own filtered index (`jobsup_job_sla_start`: waiting or pending with a start
deadline; `jobsup_job_sla_finish`: unfinished with a finish deadline), so finished jobs and
jobs without an SLA are never read. A job is marked by compare-and-set on
``sla_breached_at IS NULL``: however many supervisors look at once, each breach is marked,
announced (``sla.breached``, in the marking transaction, for the rows it changed) and
counted once, with the kind first found (``start`` or ``finish``). A job that finishes late
between two ticks is not marked: the settle is left as it was (one statement), and the
maintenance interval bounds what can slip through.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Integer, bindparam, select

from jobsup.events import publishing
from jobsup.store.claim import status_literal
from jobsup.store.schema import PENDING, RUNNING, WAITING, job

if TYPE_CHECKING:
    from jobsup.store.transitions import Transitions

START, FINISH = "start", "finish"
# The statuses each index keeps, as literals: a partial index serves a query whose WHERE
# repeats its predicate.
_BEFORE_START = (WAITING, PENDING)
_UNFINISHED = (WAITING, PENDING, RUNNING)


def _overdue(kind: str, clock: Any, limit: Any) -> Any:
    deadline = job.c.sla_start_by if kind == START else job.c.sla_finish_by
    statuses = _BEFORE_START if kind == START else _UNFINISHED
    return (
        select(job.c.id)
        .where(
            deadline.is_not(None),
            job.c.sla_breached_at.is_(None),
            job.c.status.in_([status_literal(s) for s in statuses]),
            deadline < clock,
            # A job pending again for a retry's backoff did start: only a finish can be late.
            *((job.c.attempts == 0,) if kind == START else ()),
        )
        .order_by(deadline)
        .limit(limit)
    )


class SlaMarks:
    """Maintenance's SLA transition: unmarked -> marked, through `Statements.sla_mark`."""

    def __init__(self, t: Transitions) -> None:
        self.t = t
        limit = bindparam("p_limit", type_=Integer)
        self.overdue = {kind: _overdue(kind, t.dialect.clock(), limit) for kind in (START, FINISH)}

    def mark(self, *, now: datetime | None = None, batch: int = 500, max_batches: int = 10) -> int:
        """Mark the jobs past a deadline, at most `batch` per statement and `max_batches`
        per kind; returns how many this call marked (another instance's are not counted)."""
        clock = self.t.dialect.clock_params(now)
        marked = 0
        for kind in (START, FINISH):
            for _ in range(max_batches):
                with self.t.db.read("sla") as conn:
                    ids = list(conn.execute(self.overdue[kind], {**clock, "p_limit": batch}).scalars())
                if not ids:
                    break
                with self.t.db.transaction("sla") as conn:
                    rows = self.t.sql.sla_mark.run(conn, {**clock, "p_ids": ids})
                    breached = [{"job": r.id, "name": r.name, "queue": r.queue, "kind": kind} for r in rows]
                    publishing.publish_each(conn, "sla.breached", breached)
                marked += len(rows)
                if len(ids) < batch:
                    break
        return marked
