"""Every statement about `jobsup_batch`, and the reads of a batch's children.

A batch is open while children may be added, closed once they may not, and finished once
its callbacks fired: `finished_at` is the compare-and-set of firing, so they fire once
however many transactions find the last child ended (see `jobsup.store.links`). Counts are
read from the children's rows when asked for; no settle writes a counter.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cached_property
from typing import Any, NamedTuple

from sqlalchemy import Connection, Integer, Select, bindparam, func, insert, select, update

from jobsup.store.database import Database
from jobsup.store.rows import BatchInfo
from jobsup.store.schema import FINISHED_STATUSES, STATUSES, SUCCEEDED, UNFINISHED_STATUSES, batch, job


class Finished(NamedTuple):
    """A batch that this transaction finished: its callbacks, name, and whether it was cancelled."""

    callbacks: dict[str, Any]
    name: str | None
    cancelled: bool


class Batches:
    def __init__(self, db: Database) -> None:
        self.db, self.dialect = db, db.dialect

    # -- writes, on the caller's transaction ----------------------------------------------

    def create(self, conn: Connection, name: str | None, callbacks: Mapping[str, Any], clock: Mapping[str, Any]) -> int:
        values = {"name": name, "callbacks": json.dumps(callbacks), "total": 0, "created_at": self.dialect.clock()}
        return int(conn.execute(insert(batch).values(values).returning(batch.c.id), dict(clock)).scalar_one())

    def grow(self, conn: Connection, batch_id: int, count: int) -> bool:
        """Count `count` more children of an open batch; False when it is closed or absent
        (the caller then rolls back the children it inserted)."""
        stmt = (
            update(batch)
            .where(batch.c.id == batch_id, batch.c.closed_at.is_(None))
            .values(total=batch.c.total + count)
            .returning(batch.c.id)
        )
        return bool(self.dialect.returning(stmt).run(conn, {}))

    def close(self, conn: Connection, batch_id: int, clock: Mapping[str, Any]) -> bool:
        stmt = (
            update(batch)
            .where(batch.c.id == batch_id, batch.c.closed_at.is_(None))
            .values(closed_at=self.dialect.clock())
            .returning(batch.c.id)
        )
        return bool(self.dialect.returning(stmt).run(conn, dict(clock)))

    def mark_cancelled(self, conn: Connection, batch_id: int, clock: Mapping[str, Any]) -> bool:
        clock_now = self.dialect.clock()
        stmt = (
            update(batch)
            .where(batch.c.id == batch_id, batch.c.finished_at.is_(None))
            .values(cancelled_at=clock_now, closed_at=func.coalesce(batch.c.closed_at, clock_now))
            .returning(batch.c.id)
        )
        return bool(self.dialect.returning(stmt).run(conn, dict(clock)))

    def finish(self, conn: Connection, batch_id: int, clock: Mapping[str, Any]) -> Finished | None:
        """The compare-and-set of firing: a closed, unfinished batch becomes finished, and
        its callbacks are returned to enqueue in this same transaction; None when it is not
        closed or another transaction fired it."""
        stmt = (
            update(batch)
            .where(batch.c.id == batch_id, batch.c.closed_at.is_not(None), batch.c.finished_at.is_(None))
            .values(finished_at=self.dialect.clock())
            .returning(batch.c.callbacks, batch.c.name, batch.c.cancelled_at)
        )
        rows = self.dialect.returning(stmt).run(conn, dict(clock))
        if not rows:
            return None
        row = rows[0]
        try:
            callbacks = json.loads(row.callbacks)
        except ValueError:
            callbacks = {}  # a hand-edited row: it finishes without callbacks rather than never
        return Finished(callbacks if isinstance(callbacks, dict) else {}, row.name, row.cancelled_at is not None)

    # -- the fan-in's reads -----------------------------------------------------------------

    @cached_property
    def unfinished_child(self) -> Select[Any]:
        """One unfinished child of batch `p_batch`, the newest first (of equal priority and
        due time the one claimed last, so the one least in the way of claims while locked)."""
        return (
            select(job.c.id)
            .where(job.c.batch_id == bindparam("p_batch", type_=Integer), job.c.status.in_(UNFINISHED_STATUSES))
            .order_by(job.c.id.desc())
            .limit(1)
        )

    def any_unfinished(self, conn: Connection, batch_id: int, *, skip_locked: bool) -> bool:
        """Is a child of the batch unfinished? Locks the one found to the end of the
        transaction (see `Dialect.lock_rows`): it cannot end before this transaction has."""
        stmt = self.dialect.lock_rows(self.unfinished_child, skip_locked=skip_locked)
        return conn.execute(stmt, {"p_batch": batch_id}).first() is not None

    def counts(self, conn: Connection, batch_id: int) -> dict[str, int]:
        return self.counts_of(conn, [batch_id])[batch_id]

    def counts_of(self, conn: Connection, batch_ids: list[int]) -> dict[int, dict[str, int]]:
        """Each batch's children by status (every status, zeros included), in one query."""
        counts = {batch_id: dict.fromkeys(STATUSES, 0) for batch_id in batch_ids}
        stmt = (
            select(job.c.batch_id, job.c.status, func.count())
            .where(job.c.batch_id.in_(batch_ids))
            .group_by(job.c.batch_id, job.c.status)
        )
        for batch_id, status, n in conn.execute(stmt):
            counts[int(batch_id)][str(status)] = int(n)
        return counts

    @cached_property
    def finishable(self) -> Select[Any]:
        """Closed batches not finished, none of whose children is unfinished: what the sweep
        fires, for a settle that committed but did not live to fire them."""
        child = job.alias("child")
        unfinished = select(child.c.id).where(child.c.batch_id == batch.c.id, child.c.status.in_(UNFINISHED_STATUSES))
        return (
            select(batch.c.id)
            .where(batch.c.finished_at.is_(None), batch.c.closed_at.is_not(None), ~unfinished.exists())
            .order_by(batch.c.id)
            .limit(bindparam("p_limit", type_=Integer))
        )

    def finishable_ids(self, limit: int = 100) -> list[int]:
        with self.db.read("maintenance") as conn:
            return [int(i) for i in conn.execute(self.finishable, {"p_limit": limit}).scalars()]

    # -- the operator's reads ---------------------------------------------------------------

    def get(self, batch_id: int) -> BatchInfo | None:
        with self.db.read("inspect") as conn:
            row = conn.execute(select(batch).where(batch.c.id == batch_id)).first()
            if row is None:
                return None
            return _info(row, self.counts(conn, batch_id))

    def list(self, *, unfinished: bool = False, limit: int = 100) -> list[BatchInfo]:
        stmt = select(batch).order_by(batch.c.id.desc()).limit(limit)
        if unfinished:
            stmt = stmt.where(batch.c.finished_at.is_(None))
        with self.db.read("inspect") as conn:
            rows = conn.execute(stmt).all()
            counts = self.counts_of(conn, [row.id for row in rows]) if rows else {}
        return [_info(row, counts[row.id]) for row in rows]


def _info(row: Any, counts: dict[str, int]) -> BatchInfo:
    if row.cancelled_at is not None:
        status = "cancelled"
    elif row.closed_at is None:
        status = "open"
    elif row.finished_at is None:
        status = "running"
    else:
        ended = sum(counts[s] for s in FINISHED_STATUSES)
        status = "succeeded" if counts[SUCCEEDED] == ended else "failed"
    try:
        callbacks = json.loads(row.callbacks)
    except ValueError:
        callbacks = {}
    return BatchInfo(
        id=row.id,
        name=row.name,
        status=status,
        total=row.total,
        counts=counts,
        callbacks=callbacks,
        created_at=row.created_at,
        closed_at=row.closed_at,
        finished_at=row.finished_at,
        cancelled_at=row.cancelled_at,
    )
