"""Concurrency keys: at most a key's limit of its jobs admitted (pending or running) at once,
on every instance.

A job over its key's limit is not claimed and released, nor skipped by every claim: it
waits, status `waiting` with no dependency (`waiting_on` 0), outside the claim index, so a
queue whose head is 10,000 jobs of one saturated key claims the others as fast as ever,
and the claim statement does not change at all. The gate is the key's row in
`jobsup_concurrency`, counting its admitted jobs:

- a new job (or a dead letter retried) of a key takes a slot by compare-and-set
  (``admitted < limit``) in its enqueue's transaction, or waits;
- a job of a key that ends (succeeded, dead-lettered, cancelled) gives its slot to the
  longest-waiting job of its key in its settle's transaction, or back; a retry with
  backoff, a release or a lost lease keeps it (the job is pending again);
- the key's row is locked by that UPDATE, so admissions and hand-overs of one key are one
  at a time across every instance, and the count is exact: only transitions change it.

Why not at the claim: a prototype that checked the count inside the claim (a
data-modifying CTE on the key's row) was correct under 4 competing claimers, but every
claim walked the saturated key's jobs at the head of the index: 18 ms a claim behind
10,000 of them, against well under one without.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, bindparam, insert, update
from sqlalchemy.exc import IntegrityError

from jobsup.store import steps
from jobsup.store.schema import FINISHED_STATUSES, concurrency

if TYPE_CHECKING:
    from jobsup.store.statements import Statements

_take = (
    update(concurrency)
    .where(concurrency.c.key == bindparam("p_key"), concurrency.c.admitted < bindparam("p_limit"))
    .values(admitted=concurrency.c.admitted + 1)
)
_give_back = (
    update(concurrency)
    .where(concurrency.c.key == bindparam("p_key"), concurrency.c.admitted > 0)
    .values(admitted=concurrency.c.admitted - 1)
)


def admit_new(conn: Connection, sql: Statements, inserted: Sequence[tuple[int, Any]]) -> None:
    """`admit` the keyed ones of jobs just inserted: (id, `NewJob`) pairs."""
    admit(
        conn, sql, [(i, new.concurrency_key, new.concurrency_limit or 1) for i, new in inserted if new.concurrency_key]
    )


def admit(conn: Connection, sql: Statements, jobs: Sequence[tuple[int, Any, int]]) -> None:
    """Admit the just inserted or retried `jobs` (id, key, limit), each in turn; hold those
    their key has no room for."""
    for job_id, key, limit in jobs:
        if not _took(conn, key, limit):
            conn.execute(sql.hold_for_key, {"p_job": job_id})


def _took(conn: Connection, key: str, limit: int) -> bool:
    if conn.execute(_take, {"p_key": key, "p_limit": limit}).rowcount:
        return True
    try:  # the key's first job: its row, with this job's slot
        with conn.begin_nested():
            conn.execute(insert(concurrency).values(key=key, admitted=1))
        return limit >= 1
    except IntegrityError:  # the row exists, and is full (or another job just made it)
        return bool(conn.execute(_take, {"p_key": key, "p_limit": limit}).rowcount)


def hand_over(conn: Connection, sql: Statements, keys: Sequence[str], clock: dict[str, Any]) -> set[str]:
    """Each of `keys` lost an admitted job: give its slot to the key's longest-waiting job,
    or back. Returns the queues of the jobs let in (to wake their workers)."""
    woken = set()
    for key in keys:
        conn.execute(_give_back, {"p_key": key})  # locks the key's row: one hand-over at a time
        waiting = conn.execute(sql.next_for_key, {"p_key": key}).first()
        if waiting is None:
            continue
        limit = conn.execute(sql.limit_of, {"p_job": waiting.id}).scalar_one()
        if (
            _took(conn, key, int(limit or 1))
            and conn.execute(sql.promote_for_key, {"p_job": waiting.id, **clock}).rowcount
        ):
            woken.add(waiting.queue)
    return woken


def _finished_keys(rows: Sequence[Any]) -> list[str]:
    # A job that waited for room (waiting_on 0) and was cancelled there held no slot.
    return [
        row.concurrency_key
        for row in rows
        if getattr(row, "concurrency_key", None) is not None
        and row.status in FINISHED_STATUSES
        and getattr(row, "waiting_on", None) is None
    ]


def after_finish(conn: Connection, change: steps.Change) -> None:
    keys = _finished_keys(change.rows)
    if keys:
        t = change.transitions
        woken = hand_over(conn, t.sql, keys, t.dialect.clock_params(change.params.get("p_now")))
        if woken:
            t.dialect.after_enqueue(conn, woken)


def after_retry(conn: Connection, change: steps.Change) -> None:
    keyed = [(row.id, row.concurrency_key, row.concurrency_limit or 1) for row in change.rows if row.concurrency_key]
    if keyed:
        admit(conn, change.transitions.sql, keyed)


for _transition in ("complete", "fail", "expire", "cancel"):
    steps.register(_transition, after_finish, linked_only=True)
steps.register("retry", after_retry, linked_only=True)
