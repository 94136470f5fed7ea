"""The outbox's statements (`jobsup_outbox`), every one of them: writing events inside a
transition's transaction, and the relay's claim, delivery and release.

A relay claims rows by setting `locked_by` and `locked_until` (a lease that lapses if the
relay dies, so another relay delivers them: at least once). Only the head of each object's
events is claimable, the row with no earlier row of the same object left: a job's event N+1
is never delivered while N waits or is out with another relay, so delivery is in order per
job with any number of relays. An event of no job names its object in `subject`
(`breaker:NAME`, `queue:NAME`, `batch:ID`, `workflow:ID`) and is ordered among that
object's events the same way; a row has one of `job_id` and `subject`, never both. The
claim's candidates are locked with the dialect's row lock (`Dialect.lock_rows`: SKIP LOCKED
on PostgreSQL, so relays take different rows; SQLite's writers take turns; on MariaDB a
second statement confirms they are heads still), and a plain
read first keeps an idle relay off SQLite's write lock. The claim's lease runs on the
database's clock (`Dialect.clock`), so relays on hosts whose clocks disagree still agree on
when a dead relay's claim has lapsed.

An event the destination refuses for good (see `PublishFailed.permanent`) is parked: its
`parked_at` is set, no relay takes it again, and it no longer holds its object's later
events (a retried parked event goes out after them). Every failed try counts in the row's
`attempts` and leaves its `last_error`. Parked events stay until an operator retries or
discards them (`jobsup events`), each audited in the same transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from sqlalchemy import (
    Connection,
    Integer,
    Select,
    and_,
    bindparam,
    case,
    delete,
    exists,
    func,
    insert,
    or_,
    select,
    update,
)

from jobsup.clock import host_clock
from jobsup.store.audit import Audit
from jobsup.store.database import Database
from jobsup.store.schema import outbox


@dataclass(frozen=True)
class Pending:
    """An outbox row a relay claimed: its id, job (None for events of no job), type and payload."""

    id: int
    job_id: int | None
    type: str
    payload: str
    subject: str | None = None  # the object of an event of no job


# -- inside a transition (dialect-neutral, so no dialect is needed to write) ---------------------

_INSERT = insert(outbox).values(
    job_id=bindparam("o_job"),
    subject=bindparam("o_subject"),
    type=bindparam("o_type"),
    payload=bindparam("o_payload"),
    created_at=bindparam("o_at"),
)


def write(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert events on `conn`, in its transaction: each a mapping of o_job, o_subject,
    o_type, o_payload, o_at. One executemany, in order (their ids order them per object)."""
    if rows:
        conn.execute(_INSERT, list(rows))


class Outbox:
    """The relay's side of the outbox on one database."""

    def __init__(self, db: Database, audit: Audit | None = None) -> None:
        self.db, self.dialect = db, db.dialect
        self.audit = audit or Audit(db)

    # -- the relay --------------------------------------------------------------------------

    @staticmethod
    def _heads() -> list[Any]:
        # Two NOT EXISTS, each served by its own index; a NULL matches neither, so a job's
        # event never waits for an event of no job, nor the other way round. A parked
        # event holds nothing back.
        earlier = outbox.alias("earlier")
        return [
            ~exists().where(earlier.c[key] == outbox.c[key], earlier.c.id < outbox.c.id, earlier.c.parked_at.is_(None))
            for key in ("job_id", "subject")
        ]

    def _claimable(self) -> Any:
        free = or_(outbox.c.locked_until.is_(None), outbox.c.locked_until < self.dialect.clock())
        return and_(free, outbox.c.parked_at.is_(None), *self._heads())

    @cached_property
    def _any_claimable(self) -> Select[Any]:
        return select(outbox.c.id).where(self._claimable()).limit(1)

    @cached_property
    def _candidates(self) -> Select[Any]:
        stmt = (
            select(outbox.c.id)
            .where(self._claimable())
            .order_by(outbox.c.id)
            .limit(bindparam("p_limit", type_=Integer))
        )
        return self.dialect.lock_rows(stmt, skip_locked=True, table=outbox)

    @cached_property
    def _still_heads(self) -> Select[Any]:
        return select(outbox.c.id).where(outbox.c.id.in_(bindparam("p_ids", expanding=True)), *self._heads())

    @cached_property
    def _lock(self) -> Any:
        return (
            update(outbox)
            .where(outbox.c.id.in_(bindparam("p_ids", expanding=True)))
            .values(locked_by=bindparam("p_owner"), locked_until=self.dialect.clock("lease"))
        )

    @cached_property
    def _claimed(self) -> Select[Any]:
        columns = (outbox.c.id, outbox.c.job_id, outbox.c.type, outbox.c.payload, outbox.c.subject)
        return select(*columns).where(outbox.c.id.in_(bindparam("p_ids", expanding=True))).order_by(outbox.c.id)

    def claim(self, owner: str, *, limit: int, lease: float, now: datetime | None = None) -> list[Pending]:
        """Claim up to `limit` deliverable events for `lease` seconds, oldest first."""
        clock = self.dialect.clock_params(now, lease=lease)
        params = {**clock, "p_limit": limit}
        with self.db.read("outbox") as conn:
            if conn.execute(self._any_claimable, params).first() is None:
                return []
        with self.db.transaction("outbox") as conn:
            ids = list(conn.execute(self._candidates, params).scalars())
            if ids and self.dialect.locking_reads_outrun_snapshot:
                # Its NOT EXISTS read an older snapshot than the rows it locked (MariaDB): are
                # they heads still? (docs/explanation/internals.md, "A locking read outruns
                # its snapshot")
                ids = list(conn.execute(self._still_heads, {"p_ids": ids}).scalars())
            if not ids:
                return []
            conn.execute(self._lock, {**clock, "p_ids": ids, "p_owner": owner})
            rows = conn.execute(self._claimed, {"p_ids": ids}).all()
        return [Pending(row.id, row.job_id, row.type, row.payload, row.subject) for row in rows]

    @cached_property
    def _delete(self) -> Any:
        return delete(outbox).where(outbox.c.id.in_(bindparam("p_ids", expanding=True)))

    def delivered(self, ids: Sequence[int]) -> None:
        """Delete delivered events, whoever holds them now: one whose claim lapsed while it
        was being sent need not go out again."""
        if ids:
            with self.db.statement("outbox") as conn:
                conn.execute(self._delete, {"p_ids": list(ids)})

    @cached_property
    def _release(self) -> Any:
        return (
            update(outbox)
            .where(outbox.c.id.in_(bindparam("p_ids", expanding=True)), outbox.c.locked_by == bindparam("p_owner"))
            .values(locked_by=None, locked_until=None)
        )

    def release(self, owner: str, ids: Sequence[int]) -> None:
        """Give back claimed events not delivered, for the next try (of any relay)."""
        if ids:
            with self.db.statement("outbox") as conn:
                conn.execute(self._release, {"p_ids": list(ids), "p_owner": owner})

    @cached_property
    def _failed(self) -> Any:
        # A comparison, not a bare boolean parameter: SQL Server wants a predicate in WHEN.
        parked = case((bindparam("p_park", type_=Integer) == 1, self.dialect.clock()), else_=None)
        return (
            update(outbox)
            .where(outbox.c.id == bindparam("p_id"), outbox.c.locked_by == bindparam("p_owner"))
            .values(
                attempts=outbox.c.attempts + 1,
                last_error=bindparam("p_error"),
                parked_at=parked,
                locked_by=None,
                locked_until=None,
            )
        )

    def failed(self, owner: str, event_id: int, error: str, *, park: bool, now: datetime | None = None) -> None:
        """Give back an event whose delivery failed with `error`, counting the try; `park`
        it when the destination refused it for good."""
        params = {**self.dialect.clock_params(now), "p_id": event_id, "p_owner": owner}
        with self.db.statement("outbox") as conn:
            conn.execute(self._failed, {**params, "p_error": error[:500], "p_park": int(park)})

    # -- parked events (an operator's) ------------------------------------------------------

    @cached_property
    def _parked(self) -> Select[Any]:
        return (
            select(
                *(outbox.c.id, outbox.c.job_id, outbox.c.subject, outbox.c.type, outbox.c.created_at),
                *(outbox.c.parked_at, outbox.c.attempts, outbox.c.last_error),
            )
            .where(outbox.c.parked_at.is_not(None))
            .order_by(outbox.c.id)
            .limit(bindparam("p_limit", type_=Integer))
        )

    def parked(self, limit: int) -> list[dict[str, Any]]:
        """The parked events, oldest first: id, job_id, subject, type, created_at, parked_at,
        attempts, last_error."""
        with self.db.read("outbox") as conn:
            return [dict(row._mapping) for row in conn.execute(self._parked, {"p_limit": limit})]

    def _chosen(self, ids: Sequence[int] | None) -> Select[Any]:
        parked = select(outbox.c.id).where(outbox.c.parked_at.is_not(None)).order_by(outbox.c.id)
        chosen = parked if ids is None else parked.where(outbox.c.id.in_(list(ids)))
        return self.dialect.lock_rows(chosen, skip_locked=False, table=outbox)

    def unpark(self, ids: Sequence[int] | None, *, actor: str) -> list[int]:
        """Make the parked events `ids` (None: all of them) deliverable again, their tries
        counted from zero; audited ``events.retry``. Returns the ids that were parked."""
        again = update(outbox).values(parked_at=None, attempts=0, last_error=None)
        return self._operate(again, "events.retry", ids, actor)

    def discard(self, ids: Sequence[int] | None, *, actor: str) -> list[int]:
        """Delete the parked events `ids` (None: all of them), never delivered; audited
        ``events.discard``. Returns the ids that were parked."""
        return self._operate(delete(outbox), "events.discard", ids, actor)

    def _operate(self, change: Any, action: str, ids: Sequence[int] | None, actor: str) -> list[int]:
        with self.db.transaction("outbox") as conn:
            found = list(conn.execute(self._chosen(ids)).scalars())
            if found:
                conn.execute(change.where(outbox.c.id.in_(found)))
            detail = {"chosen": "all parked" if ids is None else list(ids), "count": len(found)}
            outcome = "ok" if found else "unchanged" if ids is None else "not_found"
            self.audit.record(actor, action, target="outbox", outcome=outcome, detail=detail, connection=conn)
        return found

    @cached_property
    def _depth(self) -> Any:
        waiting = outbox.c.parked_at.is_(None)
        return select(
            func.coalesce(func.sum(case((waiting, 1), else_=0)), 0),
            func.min(case((waiting, outbox.c.created_at), else_=None)),
            func.coalesce(func.sum(case((waiting, 0), else_=1)), 0),
        )

    def depth(self, now: datetime | None = None) -> tuple[int, float, int]:
        """How many events wait, the age in seconds of the oldest (0 when none), and how
        many are parked."""
        with self.db.read("outbox") as conn:
            count, oldest, parked = conn.execute(self._depth).one()
        age = 0.0 if oldest is None else max(0.0, ((now or host_clock()) - oldest).total_seconds())
        return int(count), age, int(parked)
