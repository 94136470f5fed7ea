"""Batches: children counted by their own rows, callbacks fired once. Every statement about
`jobsup_batch`, the batch transitions (open, enqueue, add, close, finish_if_done, sweep, cancel),
and what happens in the transaction that ends a child (`child_ended`).

A batch is open while children may be added, closed once they may not, and finished once
its callbacks fired: `finished_at` is the compare-and-set of firing, so they fire once
however many transactions find the last child ended (docs/internals.md, "The steps a
job's end sets off", says why none is missed). Counts are read from the children's rows when asked
for; no settle writes a counter.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import Connection, Integer, Select, bindparam, func, insert, select, update

from jobsup.errors import BadInput, ConfigurationError, LockBusy
from jobsup.events import publishing
from jobsup.observe.events import emit
from jobsup.store import concurrency_keys
from jobsup.store.builder import build
from jobsup.store.database import now_or_after_commit
from jobsup.store.rows import BatchInfo, NewJob
from jobsup.store.schema import FINISHED_STATUSES, STATUSES, SUCCEEDED, UNFINISHED_STATUSES, batch, job

if TYPE_CHECKING:
    from jobsup.store.steps import StepContext

log = logging.getLogger("jobsup.batches")


class Finished(NamedTuple):
    """A batch that this transaction finished: its callbacks, name, and whether it was cancelled."""

    callbacks: dict[str, Any]
    name: str | None
    cancelled: bool


class Batches:
    def __init__(self, t: StepContext) -> None:
        self.t, self.db, self.dialect = t, t.db, t.dialect

    # -- the transitions ----------------------------------------------------------------------

    def open(
        self,
        name: str | None,
        callbacks: Mapping[str, Any],
        *,
        connection: Connection | None = None,
        now: datetime | None = None,
    ) -> int:
        with self.db.unit(connection, "enqueue") as conn:
            return self.create(conn, name, callbacks, self.dialect.clock_params(now))

    def enqueue(
        self,
        name: str | None,
        callbacks: Mapping[str, Any],
        news: Sequence[NewJob],
        *,
        connection: Connection | None = None,
        now: datetime | None = None,
        progress: Callable[[int], object] | None = None,
    ) -> tuple[int, list[int]]:
        """Create a batch, insert its children and close it, in one transaction (all or
        none); its id and the children's ids."""
        clock = self.dialect.clock_params(now)
        with self.db.unit(connection, "enqueue") as conn:
            batch_id = self.create(conn, name, callbacks, clock)
            ids = self._add(conn, batch_id, news, clock, progress)
            self._close(conn, batch_id, clock)
        publishing.emit_enqueued(news, ids, range(len(ids)), connection)
        return batch_id, ids

    def add(
        self,
        batch_id: int,
        news: Sequence[NewJob],
        *,
        connection: Connection | None = None,
        now: datetime | None = None,
        progress: Callable[[int], object] | None = None,
        close: bool = False,
    ) -> list[int]:
        """Insert children of an open batch in one transaction (all or none); with `close`,
        close it in that transaction. `BadInput` when the batch is closed or does not exist."""
        clock = self.dialect.clock_params(now)
        with self.db.unit(connection, "enqueue") as conn:
            ids = self._add(conn, batch_id, news, clock, progress)
            if close:
                self._close(conn, batch_id, clock)
        publishing.emit_enqueued(news, ids, range(len(ids)), connection)
        return ids

    def _add(
        self,
        conn: Connection,
        batch_id: int,
        news: Sequence[NewJob],
        clock: Mapping[str, Any],
        progress: Callable[[int], object] | None,
        chunk: int = 5000,
    ) -> list[int]:
        """Insert children, `chunk` per statement; `progress(n)` after each chunk."""
        if not self.grow(conn, batch_id, len(news)):
            raise BadInput(f"batch {batch_id} is closed or does not exist: children are added to an open batch")
        ids: list[int] = []
        for start in range(0, len(news), chunk):
            part = news[start : start + chunk]
            for new in part:
                new.batch_id = batch_id
            ids.extend(self.t.insert(conn, part, clock)[0])
            if progress is not None:
                progress(len(part))
        return ids

    def close(self, batch_id: int, *, connection: Connection | None = None, now: datetime | None = None) -> bool:
        """No more children: its callbacks fire once the last has ended (at once, if they all
        have). False when it was closed already."""
        with self.db.unit(connection, "enqueue") as conn:
            return self._close(conn, batch_id, self.dialect.clock_params(now))

    def _close(self, conn: Connection, batch_id: int, clock: Mapping[str, Any]) -> bool:
        """Close it, and fire it in this transaction if every child has ended already:
        waiting for the transactions ending children now (no child's settle waits for the
        batch row this holds, so nothing waits in a circle). Not after the commit: on your
        connection (`connection=`) that would run before your COMMIT, unable to see it."""
        if not self.mark_closed(conn, batch_id, clock):
            return False
        if not self.any_unfinished(conn, batch_id, skip_locked=False):
            self.finish_now(conn, batch_id, clock)
        return True

    def finish_if_done(self, batch_id: int, *, now: datetime | None = None, operation: str = "batches") -> bool:
        """Fire the batch if it is closed and no child is unfinished, waiting for the
        transactions changing its children to end; True if this fired it. Run after the
        commit of a child's end that could not decide (`child_ended`), and by the sweep."""
        clock = self.dialect.clock_params(now)
        with self.db.transaction(operation) as conn:
            if self.any_unfinished(conn, batch_id, skip_locked=False):
                return False
            return self.finish_now(conn, batch_id, clock)

    def sweep(self, *, limit: int = 100) -> int:
        """Fire the closed batches whose children have all ended but whose callbacks did not
        fire (the process that ended the last child died before its second look)."""
        fired = 0
        for batch_id in self.finishable_ids(limit):
            try:
                fired += self.finish_if_done(batch_id, operation="maintenance")
            except LockBusy as exc:  # a callback's key a caller holds: the next sweep tries again
                emit("db.error", operation="maintenance", batch=batch_id, error=exc)
        return fired

    def cancel(self, batch_id: int, *, now: datetime | None = None) -> int:
        """Cancel every unfinished child of a batch, and close it, as one transition; its
        callbacks then fire with the counts. Returns how many children were cancelled."""

        def mark(conn: Connection, clock: dict[str, Any]) -> None:
            self.mark_cancelled(conn, batch_id, clock)

        return len(self.t.cancel_where(self.t.sql.cancel_batch, {"p_batch": batch_id}, now, mark))

    # -- in the transaction that ends a child ---------------------------------------------------

    def child_ended(self, conn: Connection, batch_id: int, clock: Mapping[str, Any]) -> None:
        """A child of `batch_id` ended in this transaction (or the batch was closed): finish
        the batch now, or look again after the commit, or leave it to the sibling that will end
        after this commit."""
        if not self.any_unfinished(conn, batch_id, skip_locked=True):
            now_or_after_commit(
                conn, self.dialect, lambda: self.finish_now(conn, batch_id, clock), lambda: self._finish_later(batch_id)
            )

    def _finish_later(self, batch_id: int) -> None:
        try:
            self.finish_if_done(batch_id)
        except LockBusy as exc:  # a callback's key a caller holds: maintenance fires it (`FinishBatches`)
            emit("db.error", operation="batches", batch=batch_id, error=exc)

    def finish_now(self, conn: Connection, batch_id: int, clock: Mapping[str, Any]) -> bool:
        """Finish the batch and enqueue its callbacks, in `conn`'s transaction; False when it
        is not closed yet or has already fired."""
        finished = self.finish(conn, batch_id, clock)
        if finished is None:
            return False
        counts = self.counts(conn, batch_id)
        ended = sum(counts[s] for s in FINISHED_STATUSES)
        succeeded = counts[SUCCEEDED] == ended
        outcome = "cancelled" if finished.cancelled else "succeeded" if succeeded else "failed"
        ended_counts = {status: n for status, n in counts.items() if n}
        subject = f"batch:{batch_id}"
        publishing.publish(
            conn,
            "batch.finished",
            subject=subject,
            batch=batch_id,
            name=finished.name,
            outcome=outcome,
            counts=ended_counts,
        )
        news = []
        for key in ["on_complete", "on_success" if succeeded else "on_failure"]:
            callback = finished.callbacks.get(key)
            if not isinstance(callback, dict) or not isinstance(callback.get("job"), str):
                continue
            payload = {**(callback.get("payload") or {}), "batch": {"id": batch_id, "counts": counts}}
            try:
                news.append(build(self.t.resolver.settings_of(callback["job"]), payload, {}))
            except (BadInput, ConfigurationError) as exc:
                log.warning("batch %s: %s callback %r not enqueued: %s", batch_id, key, callback["job"], exc)
        if news:
            with concurrency_keys.bounded(conn, self.t, news):
                self.t.insert(conn, news, clock)
        return True

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

    def mark_closed(self, conn: Connection, batch_id: int, clock: Mapping[str, Any]) -> bool:
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
