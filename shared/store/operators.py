"""The operators' transitions out of a job's end or into it: cancel (waiting or pending ->
cancelled; a running job is asked to stop) and retry (dead_lettered -> pending). Each is one
transaction with its in-transaction steps, and announces what it did through the outbox
(`jobsup.events.publishing`), as `Transitions` does for the worker's."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, Row

from jobsup.errors import ConstraintViolation, Deadlock, DuplicateJob
from jobsup.events import publishing
from jobsup.observe.events import emit
from jobsup.store import steps
from jobsup.store.schema import CANCELLED

# An operator's transaction the database chose as a deadlock's victim (a cancel against a
# worker's renewal of the same rows, on MariaDB in a CI run) is run again, up to this many
# times in all: it wrote nothing, and the other transaction has gone on.
DEADLOCK_TRIES = 3
T = TypeVar("T")

if TYPE_CHECKING:
    from jobsup.store.chain import Returning
    from jobsup.store.transitions import Transitions


def cancel_where(
    t: Transitions,
    chain: Returning,
    which: Mapping[str, Any],
    now: datetime | None,
    also: Callable[[Connection, dict[str, Any]], object] | None = None,
) -> Sequence[Row[Any]]:
    """Cancel what `chain` matches, and do `also` in the same transaction. Returns the rows
    matched: those that ended (status `cancelled`) and the running ones asked to."""
    params = {**t.dialect.clock_params(now), **which, "p_outcome": "cancelled", "p_error": None}

    def cancel(conn: Connection) -> Sequence[Row[Any]]:
        if also is not None:
            also(conn, params)
        rows = chain.run(conn, params)
        # Only the jobs that ended: a running one was asked to stop, and ends later.
        ended = [row for row in rows if row.status == CANCELLED]
        if ended:
            steps.run(conn, steps.Change("cancel", ended, params, t))
        cancelled = [{"outcome": "cancelled", **publishing.job_fields(row)} for row in ended]
        publishing.publish_each(conn, "job.cancelled", cancelled)
        return rows

    rows = _in_transaction(t, "cancel", cancel)
    for row in rows:
        if row.status != CANCELLED:
            emit("job.cancel_requested", job=row.id, name=row.name, queue=row.queue, attempt=row.attempts)
    return rows


def retry(t: Transitions, job_ids: Sequence[int], *, now: datetime | None = None) -> list[int]:
    """dead_lettered -> pending, with the job's own budget of attempts again on top of those
    it used: attempt numbers only go up. Returns the ids retried. A job whose unique key a
    live job now holds raises `DuplicateJob`."""
    retried: list[int] = []
    for job_id in job_ids:
        params = {**t.dialect.clock_params(now), "p_job": job_id}

        def again(conn: Connection, params: dict[str, Any] = params) -> Sequence[Row[Any]]:
            rows = t.sql.retry.run(conn, params)
            if rows:
                steps.run(conn, steps.Change("retry", rows, params, t))
            for row in rows:
                publishing.publish(conn, "job.retrying", retry_at=row.run_at.isoformat(), **publishing.job_fields(row))
            return rows

        try:
            rows = _in_transaction(t, "dead_letters", again)
        except ConstraintViolation:
            raise DuplicateJob(
                f"job {job_id} cannot be retried: a live job holds its unique key", existing_id=None
            ) from None
        retried.extend(row.id for row in rows)
    return retried


def _in_transaction(t: Transitions, operation: str, unit: Callable[[Connection], T]) -> T:
    """`unit` in a transaction of its own, run again when the database ends it to break a
    deadlock (up to `DEADLOCK_TRIES` in all), after a moment, a random one: two operators'
    transactions that deadlocked each other would meet again in step."""
    for attempt in range(1, DEADLOCK_TRIES):
        try:
            with t.db.transaction(operation) as conn:
                return unit(conn)
        except Deadlock as exc:
            wait = random.uniform(0.0, 0.05 * attempt)
            emit("db.error", operation=operation, error=exc, retry_in=round(wait, 3))
            time.sleep(wait)
    with t.db.transaction(operation) as conn:  # the last try: its deadlock is the caller's
        return unit(conn)
