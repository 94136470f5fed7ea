"""Pieces two of the three dialects share, kept in one place."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Insert,
    Table,
    Update,
    and_,
    bindparam,
    insert,
)
from sqlalchemy.exc import IntegrityError

from jobsup.store.chain import Chain, Native, Returning, Sequential
from jobsup.store.insert import insert_rows, values_statement
from jobsup.store.rows import NewJob
from jobsup.store.schema import LIVE_STATUSES, job


class NativeReturning:
    """UPDATE ... RETURNING as the database's own one statement (RETURNING, or OUTPUT on SQL Server)."""

    def returning(self, stmt: Update) -> Returning:
        return Native(stmt)


class SequentialChain:
    """Two dependent writes as two statements in one transaction (no data-modifying CTEs)."""

    def chain(self, first: Update, then: Callable[[Any], Insert], reads: Sequence[Any] = ()) -> Chain:
        return Sequential.of(first, self.returning(first), then, reads)  # type: ignore[attr-defined]


class RowByRowInsert:
    """Jobs inserted with one parameter set each; waking idle workers is `after_enqueue`'s."""

    @cached_property
    def insert_statement(self) -> Insert:
        return values_statement(self.clock())  # type: ignore[attr-defined]

    def insert_jobs(
        self, conn: Connection, jobs: Sequence[NewJob], clock: dict[str, Any]
    ) -> tuple[list[int], set[str]]:
        return insert_rows(conn, self.insert_statement, jobs, clock), set()

    def insert_one_driver(self, new: NewJob, clock: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        return None  # `insert_jobs`, through SQLAlchemy: only PostgreSQL's runs as driver text


class NoDriverText:
    """Its claim and settles run through SQLAlchemy, which compiles them and keeps that on each
    engine: nothing of the dialect's own to compile ahead (`Statements.compile_ahead`)."""

    def compile_ahead(self) -> None:
        return None


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
