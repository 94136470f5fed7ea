"""Pieces two of the three dialects share, kept in one place."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    Insert,
    Integer,
    Table,
    Update,
    and_,
    bindparam,
    insert,
    tuple_,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.types import TupleType

from jobsup.store.chain import Chain, Native, Returning, Sequential
from jobsup.store.insert import insert_rows, values_statement
from jobsup.store.rows import Lease, NewJob
from jobsup.store.schema import LIVE_STATUSES, job


class NativeReturning:
    """UPDATE ... RETURNING as the database's own one statement (RETURNING, or OUTPUT on SQL Server)."""

    def returning(self, stmt: Update) -> Returning:
        return Native(stmt)


class SequentialChain:
    """Two dependent writes as two statements in one transaction (no data-modifying CTEs)."""

    def chain(self, first: Update, then: Callable[[Any], Update]) -> Chain:
        return Sequential.of(self.returning(first), then)  # type: ignore[attr-defined]


class RowValueFence:
    """A lease fence as expanded lists: id IN (1, ...) AND (id, attempts) IN ((1, 2), ...)."""

    results_per_row = False

    def lease_match(self, *, results: bool = False) -> tuple[ColumnElement[bool], ColumnElement[Any] | None]:
        # Typed, so the driver does not send small ids as smallint and re-plan as they grow.
        fences = bindparam("p_fences", expanding=True, type_=TupleType(BigInteger(), Integer()))
        ids = job.c.id.in_(bindparam("p_fence_ids", expanding=True))
        return and_(ids, tuple_(job.c.id, job.c.attempts).in_(fences)), None

    def lease_params(self, leases: Sequence[Lease], results: Sequence[str | None] | None = None) -> dict[str, Any]:
        return {
            "p_fence_ids": [lease.job_id for lease in leases],
            "p_fences": [(lease.job_id, lease.attempt) for lease in leases],
        }


class RowByRowInsert:
    """Jobs inserted with one parameter set each; waking idle workers is `after_enqueue`'s."""

    @cached_property
    def insert_statement(self) -> Insert:
        return values_statement(self.clock())  # type: ignore[attr-defined]

    def insert_jobs(
        self, conn: Connection, jobs: Sequence[NewJob], clock: dict[str, Any]
    ) -> tuple[list[int], set[str]]:
        return insert_rows(conn, self.insert_statement, jobs, clock), set()


class NoOwnerLocks:
    """Leases lapse on the database's own clock, which every host shares: nothing to hold."""

    def hold_owner(self, db: Any, owner: str) -> None:
        return None

    def owners_alive(self, db: Any, owners: set[str]) -> set[str]:
        return set()


class Polling:
    """No notifications: an enqueue sends nothing and idle workers poll (`poll_interval`)."""

    def after_enqueue(self, conn: Connection, queues: set[str]) -> None:
        """Nothing to send."""

    def listener(self, db: Any, queue: str) -> None:
        return None

    def wakeup_warning(self, db: Any) -> str | None:
        return None  # polling is what these databases always do, as documented


class FilteredKeyIndex:
    """Unique keys of live jobs are indexed by a filtered (partial) index on `unique_key`."""

    def live_key_match(self) -> ColumnElement[bool]:
        return and_(job.c.unique_key == bindparam("p_key"), job.c.status.in_(LIVE_STATUSES))


class SavepointInsert:
    """`insert_missing` as an INSERT in a savepoint that may lose the race: the loser waits
    for the winner's commit, gets a unique violation and goes on. Right where a failed
    INSERT keeps no shared lock on the row that the next UPDATE must upgrade: PostgreSQL,
    and SQLite, whose writers take turns (SQL Server is not tested for it here)."""

    def insert_missing(
        self, conn: Connection, table: Table, values: Mapping[str, Any], params: Mapping[str, Any] | None = None
    ) -> None:
        try:
            with conn.begin_nested():  # losing the race must not abort the caller's transaction
                conn.execute(insert(table).values(dict(values)), dict(params or {}))
        except IntegrityError:
            pass  # another transaction made it first
