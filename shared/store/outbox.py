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
on PostgreSQL, so relays take different rows; SQLite's writers take turns), and a plain
read first keeps an idle relay off SQLite's write lock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from sqlalchemy import Connection, Integer, Select, and_, bindparam, delete, exists, func, insert, or_, select, update

from jobsup.clock import host_clock
from jobsup.store.database import Database
from jobsup.store.schema import job, outbox

# What the events of a settle, cancel or retry need to know about each job.
FACT_COLUMNS = (
    *(job.c.id, job.c.name, job.c.queue, job.c.attempts),
    *(job.c.status, job.c.actor, job.c.last_error, job.c.run_at),
)


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
_FACTS = select(*FACT_COLUMNS).where(job.c.id.in_(bindparam("p_ids", expanding=True)))


def write(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert events on `conn`, in its transaction: each a mapping of o_job, o_subject,
    o_type, o_payload, o_at. One executemany, in order (their ids order them per object)."""
    if rows:
        conn.execute(_INSERT, list(rows))


def facts(conn: Connection, ids: Sequence[int]) -> dict[int, Any]:
    """The jobs `ids` as the transition on `conn` left them, by id."""
    return {row.id: row for row in conn.execute(_FACTS, {"p_ids": list(ids)})}


class Outbox:
    """The relay's side of the outbox on one database."""

    def __init__(self, db: Database) -> None:
        self.db, self.dialect = db, db.dialect

    # -- the relay --------------------------------------------------------------------------

    def _claimable(self) -> Any:
        # Two NOT EXISTS, each served by its own index; a NULL matches neither, so a job's
        # event never waits for an event of no job, nor the other way round.
        earlier = outbox.alias("earlier")
        heads = [
            ~exists().where(earlier.c[key] == outbox.c[key], earlier.c.id < outbox.c.id)
            for key in ("job_id", "subject")
        ]
        free = or_(outbox.c.locked_until.is_(None), outbox.c.locked_until < bindparam("p_now"))
        return and_(free, *heads)

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
    def _lock(self) -> Any:
        return (
            update(outbox)
            .where(outbox.c.id.in_(bindparam("p_ids", expanding=True)))
            .values(locked_by=bindparam("p_owner"), locked_until=bindparam("p_until"))
        )

    @cached_property
    def _claimed(self) -> Select[Any]:
        columns = (outbox.c.id, outbox.c.job_id, outbox.c.type, outbox.c.payload, outbox.c.subject)
        return select(*columns).where(outbox.c.id.in_(bindparam("p_ids", expanding=True))).order_by(outbox.c.id)

    def claim(self, owner: str, *, limit: int, lease: float, now: datetime | None = None) -> list[Pending]:
        """Claim up to `limit` deliverable events for `lease` seconds, oldest first."""
        at = now or host_clock()
        params = {"p_now": at, "p_limit": limit}
        with self.db.read("outbox") as conn:
            if conn.execute(self._any_claimable, params).first() is None:
                return []
        with self.db.transaction("outbox") as conn:
            ids = list(conn.execute(self._candidates, params).scalars())
            if not ids:
                return []
            lock = {"p_ids": ids, "p_owner": owner, "p_until": at + timedelta(seconds=lease)}
            conn.execute(self._lock, lock)
            rows = conn.execute(self._claimed, {"p_ids": ids}).all()
        return [Pending(row.id, row.job_id, row.type, row.payload, row.subject) for row in rows]

    @cached_property
    def _delete(self) -> Any:
        return delete(outbox).where(
            outbox.c.id.in_(bindparam("p_ids", expanding=True)), outbox.c.locked_by == bindparam("p_owner")
        )

    def delivered(self, owner: str, ids: Sequence[int]) -> None:
        """Delete the events `owner` delivered (those still its own)."""
        if ids:
            with self.db.statement("outbox") as conn:
                conn.execute(self._delete, {"p_ids": list(ids), "p_owner": owner})

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
    def _depth(self) -> Any:
        return select(func.count(), func.min(outbox.c.created_at))

    def depth(self, now: datetime | None = None) -> tuple[int, float]:
        """How many events wait, and the age in seconds of the oldest (0 when none)."""
        with self.db.read("outbox") as conn:
            count, oldest = conn.execute(self._depth).one()
        age = 0.0 if oldest is None else max(0.0, ((now or host_clock()) - oldest).total_seconds())
        return int(count), age
