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

from collections import Counter
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Integer, bindparam, delete, func, or_, select, update

from jobsup.store.claim import status_is
from jobsup.store.schema import FINISHED_STATUSES, PENDING, RUNNING, concurrency, job
from jobsup.store.states import held_by_key

if TYPE_CHECKING:
    from jobsup.store.dialects import Dialect
    from jobsup.store.rows import NewJob
    from jobsup.store.statements import Statements
    from jobsup.store.steps import Change, StepContext

# The key's row, locked until the transaction ends (FOR UPDATE; SQL Server's UPDLOCK; SQLite's
# writers take turns anyway): every admission and hand-over of a key reads it first, so they
# are one at a time, and a hand-over waits for an enqueue that found the key full to commit
# (then sees its waiting job).
_locked = (
    select(concurrency.c.admitted)
    .where(concurrency.c.key == bindparam("p_key"))
    .with_for_update()
    .with_hint(concurrency, "WITH (UPDLOCK, ROWLOCK)", dialect_name="mssql")
)
_add = (
    update(concurrency)
    .where(concurrency.c.key == bindparam("p_key"))
    .values(admitted=concurrency.c.admitted + bindparam("p_by", type_=Integer))
)


# Keys with nothing admitted: the next job of the key makes its row again. The rows are
# picked under a lock that skips those another transaction holds (an admission, a
# hand-over), so the delete never waits on one and cannot deadlock with an enqueue that
# locks its keys in sorted order; the delete rechecks `admitted` all the same.
_idle_keys = (
    select(concurrency.c.key)
    .where(concurrency.c.admitted <= 0)
    .order_by(concurrency.c.key)
    .limit(bindparam("p_batch", type_=Integer))
    .with_for_update(skip_locked=True)
    .with_hint(concurrency, "WITH (UPDLOCK, ROWLOCK, READPAST)", dialect_name="mssql")
)
_forget = delete(concurrency).where(
    concurrency.c.key.in_(bindparam("p_keys", expanding=True)), concurrency.c.admitted <= 0
)


def forget_idle(conn: Connection, batch: int) -> int:
    """Delete up to `batch` rows of keys with no admitted job (one a customer ever had
    would otherwise stay forever); returns how many."""
    keys = list(conn.execute(_idle_keys, {"p_batch": batch}).scalars())
    if not keys:
        return 0
    return int(conn.execute(_forget, {"p_keys": keys}).rowcount or 0)


def admit_new(conn: Connection, sql: Statements, inserted: Sequence[tuple[int, Any]]) -> None:
    """`admit` the keyed ones of jobs just inserted: (id, `NewJob`) pairs."""
    admit(
        conn, sql, [(i, new.concurrency_key, new.concurrency_limit or 1) for i, new in inserted if new.concurrency_key]
    )


def admit(conn: Connection, sql: Statements, jobs: Sequence[tuple[int, Any, int]]) -> None:
    """Admit the just inserted or retried `jobs` (id, key, limit); hold those their key has
    no room for. Keys are locked in sorted order, so two transactions never wait on each other."""
    for job_id, key, limit in sorted(jobs, key=lambda each: (each[1], each[0])):
        if not _took(conn, sql.dialect, key, limit):
            conn.execute(sql.hold_for_key, {"p_job": job_id})


def _took(conn: Connection, dialect: Dialect, key: str, limit: int) -> bool:
    admitted = _lock(conn, key)
    if admitted is None:  # the key's first job: its row (or the one another transaction made first), locked now
        dialect.insert_missing(conn, concurrency, {"key": key, "admitted": 0})
        admitted = _lock(conn, key) or 0
    if admitted >= limit:
        return False
    conn.execute(_add, {"p_key": key, "p_by": 1})
    return True


def _lock(conn: Connection, key: str) -> int | None:
    found = conn.execute(_locked, {"p_key": key}).scalar()
    return None if found is None else int(found)


# How long, in a worker or a supervisor (`Store`), a hand-over, the recount, or a keyed job
# a settle or a fire inserts waits for its key's row before it gives up with `LockBusy`, to
# be tried again. The row may be held by a caller's open transaction that enqueued a job of
# the key (`connection=`), for as long as the caller likes; meanwhile the settle holds its
# job's row, and an unbounded wait would hold up the worker's renewal of every lease it has
# (one statement), a supervisor burying that worker, or the supervisor's heartbeat.
KEY_WAIT = 1.0


def bounded(
    conn: Connection, t: StepContext, inserting: Sequence[NewJob] | None = None
) -> AbstractContextManager[None]:
    """In a process that holds leases (`Store`), every lock wait inside the block (a key's
    row, a live unique key) at most `KEY_WAIT`, then `LockBusy`: for the hand-over, and the
    jobs a settle or a cron fire inserts (`inserting`: triggers, batch callbacks, a
    schedule's run; when none has a key or a unique key, nothing is set: two round trips)."""
    waits = inserting is None or any(new.concurrency_key or new.unique_key for new in inserting)
    return t.dialect.lock_within(conn, t.key_wait) if waits and t.key_wait is not None else nullcontext()


def hand_over(conn: Connection, t: StepContext, keys: Sequence[str], clock: dict[str, Any]) -> set[str]:
    """Each of `keys` (once per job of it that ended) lost an admitted job: give its slots to
    the key's longest-waiting jobs, or back. Returns the queues of the jobs let in. Raises
    `LockBusy` when a key's row stays held (`bounded`)."""
    sql, woken = t.sql, set()
    for key, ended in sorted(Counter(keys).items()):
        with bounded(conn, t):
            admitted = (_lock(conn, key) or 0) - ended
        let_in = tries = 0
        while let_in < ended and tries < 10:
            tries += 1
            # Skipping a waiting job another transaction holds (an operator cancelling it):
            # waiting for it could deadlock, and it may not be waiting once that commits.
            waiting = conn.execute(sql.next_for_key, {"p_key": key}).first()
            if waiting is None or admitted + let_in >= int(waiting.concurrency_limit or 1):
                break
            if conn.execute(sql.promote_for_key, {"p_job": waiting.id, **clock}).rowcount:
                let_in += 1
                woken.add(waiting.queue)
        conn.execute(_add, {"p_key": key, "p_by": let_in - ended})
    return woken


# -- the recount: a missed update costs a maintenance interval, never a stuck key ----------

# Keys with jobs waiting for room, in key order (served by the waiting index, key first).
_keys_waiting = (
    select(job.c.concurrency_key)
    .where(held_by_key())
    .group_by(job.c.concurrency_key)
    .order_by(job.c.concurrency_key)
    .limit(bindparam("p_batch", type_=Integer))
)
# What a key's count should say: its jobs admitted now (a job waiting for room holds none).
_admitted_now = (
    select(func.count())
    .select_from(job)
    .where(job.c.concurrency_key == bindparam("p_key"), or_(status_is(PENDING), status_is(RUNNING)))
)
_set = update(concurrency).where(concurrency.c.key == bindparam("p_key")).values(admitted=bindparam("p_admitted"))


def keys_waiting(conn: Connection, batch: int) -> list[str]:
    return [str(key) for key in conn.execute(_keys_waiting, {"p_batch": batch}).scalars()]


def repair(conn: Connection, sql: Statements, key: str, clock: dict[str, Any]) -> tuple[int, int, set[str]]:
    """Recount `key`'s admitted jobs from the job rows under the key's lock, and let its
    waiting jobs in while it has room. Returns the count kept before, the count now, and
    the queues of the jobs let in.

    Why: the count is kept by the transitions, and a hand-over that skipped a waiting job
    another transaction had locked (a sibling's batch check, an SLA mark) gave the slot back
    with nothing to offer it again. Under the key's lock no admission or hand-over of the key
    runs; a job ending beside this (its row already changed, uncommitted) is still counted,
    and its own hand-over, which waits for this lock, then counts it out."""
    with sql.dialect.lock_within(conn, KEY_WAIT):
        kept = _lock(conn, key)
        if kept is None:
            sql.dialect.insert_missing(conn, concurrency, {"key": key, "admitted": 0})
            kept = _lock(conn, key) or 0
    admitted = int(conn.execute(_admitted_now, {"p_key": key}).scalar_one())
    woken: set[str] = set()
    for _ in range(100):  # bounded per tick; a key with more room is topped up at the next
        waiting = conn.execute(sql.next_for_key, {"p_key": key}).first()
        if waiting is None or admitted >= int(waiting.concurrency_limit or 1):
            break
        if conn.execute(sql.promote_for_key, {"p_job": waiting.id, **clock}).rowcount:
            admitted += 1
            woken.add(waiting.queue)
    if admitted != kept:
        conn.execute(_set, {"p_key": key, "p_admitted": admitted})
    return kept, admitted, woken


def _finished_keys(rows: Sequence[Any]) -> list[str]:
    # A job that waited for room (waiting_on 0) and was cancelled there held no slot.
    return [
        row.concurrency_key
        for row in rows
        if getattr(row, "concurrency_key", None) is not None
        and row.status in FINISHED_STATUSES
        and getattr(row, "waiting_on", None) is None
    ]


def after_finish(conn: Connection, change: Change) -> None:
    keys = _finished_keys(change.rows)
    if keys:
        t = change.context
        woken = hand_over(conn, t, keys, t.dialect.clock_params(change.params.get("p_now")))
        if woken:
            t.dialect.after_enqueue(conn, woken)


def after_retry(conn: Connection, change: Change) -> None:
    keyed = [(row.id, row.concurrency_key, row.concurrency_limit or 1) for row in change.rows if row.concurrency_key]
    if keyed:
        admit(conn, change.context.sql, keyed)
