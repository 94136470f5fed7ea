"""SQL Server through pyodbc. No server runs where jobsup is developed: this dialect is
checked offline (compiled statements and generated DDL), and that is all it has been.

Quirks and limits:
- The claim updates the rows a subquery selects WITH (UPDLOCK, READPAST, ROWLOCK) with TOP
  and ORDER BY (which a bare UPDATE TOP cannot honour) and returns them with OUTPUT. It is
  built from the shared claim predicate (`jobsup.store.claim`), like every other dialect's.
- READPAST is refused under SNAPSHOT isolation, so the engine runs READ COMMITTED.
- A unique index treats NULLs as equal here, so the unique indexes are filtered to
  non-null keys (on every dialect, for one schema).
- The reference clock is SYSUTCDATETIME().
- Its locking reads are taken to outrun what the statement's subqueries read
  (`locking_reads_outrun_snapshot`; so under READ_COMMITTED_SNAPSHOT, and a subquery read
  before a row's commit is the same gap under plain READ COMMITTED): the outbox relay
  confirms its candidates in a second statement, but the claim, one statement, does not
  check the pause and breaker again as MariaDB's does. A job failed with no retry delay whose
  failure opened its breaker may be claimed once more by a claim under way at that commit
  (docs/explanation/internals.md, "A locking read outruns its snapshot").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Float,
    Select,
    Table,
    Update,
    bindparam,
    cast,
    create_engine,
    func,
    literal,
    literal_column,
    select,
    text,
    update,
)
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from jobsup.errors import DatabaseError, DatabaseUnavailable, Deadlock, LockBusy, SchemaOutdated, UnsupportedDatabase
from jobsup.store.claim import CLAIM_COLUMNS, CLAIM_ORDER, claim_values, claimable
from jobsup.store.dialects import AfterClaim, Connections
from jobsup.store.dialects.common import (
    FilteredKeyIndex,
    NativeReturning,
    NoDriverText,
    NoOwnerLocks,
    Polling,
    RowByRowInsert,
    SavepointInsert,
    SequentialChain,
)
from jobsup.store.dialects.fences import KeyFence
from jobsup.store.dialects.types import UTCDateTime
from jobsup.store.schema import job

LOCK_HINTS = "WITH (UPDLOCK, READPAST, ROWLOCK)"


class SQLServerDialect(
    NativeReturning,
    SequentialChain,
    KeyFence,
    NoOwnerLocks,
    RowByRowInsert,
    Polling,
    FilteredKeyIndex,
    SavepointInsert,
    NoDriverText,
):
    name = "mssql"
    atomic_insert_rows = 1  # its statement() is autocommit: one row per statement
    bulk_chunk = 0  # built whole, then inserted: it inserts row by row
    read_options: Mapping[str, Any] = {}
    statement_options: Mapping[str, Any] = {}
    transaction_options: Mapping[str, Any] = {}
    one_writer = False
    connections_ahead = 0  # its claims and their writes run in transactions, or one at a time
    locking_reads_outrun_snapshot = True
    locks_in_process = False
    default_poll_interval = 1.0
    migration_options: Mapping[str, Any] = {}

    # READPAST is refused under SNAPSHOT isolation.
    engine_options: Mapping[str, Any] = {"isolation_level": "READ COMMITTED"}

    def create_async_engine(self, url: URL) -> Any:
        raise UnsupportedDatabase("jobsup.AsyncClient supports SQLite and PostgreSQL; on SQL Server use jobsup.Client")

    def create_engine(self, url: URL) -> Engine:
        return create_engine(url, **self.engine_options)

    def single_statement_engine(self, engine: Engine) -> Engine:
        # One statement is atomic by itself: autocommit saves the BEGIN and COMMIT round trips.
        return create_engine(engine.url, isolation_level="AUTOCOMMIT")

    def clock(self, offset: str | None = None) -> ColumnElement[datetime]:
        clock = func.coalesce(bindparam("p_now", type_=UTCDateTime), func.sysutcdatetime(type_=UTCDateTime))
        if offset is None:
            return clock
        # DATEADD takes an int: whole seconds, then the milliseconds left over.
        seconds = func.dateadd(literal_column("second"), bindparam(f"p_off_s_{offset}"), clock, type_=UTCDateTime)
        return func.dateadd(literal_column("millisecond"), bindparam(f"p_off_ms_{offset}"), seconds, type_=UTCDateTime)

    def instant(self, conn: Connection) -> datetime:
        return conn.execute(select(func.sysutcdatetime(type_=UTCDateTime))).scalar_one()

    def seconds_between(self, start: ColumnElement[Any], end: ColumnElement[Any]) -> ColumnElement[float]:
        millis = func.datediff_big(literal_column("millisecond"), start, end)
        return cast(cast(millis, Float) / literal(1000.0, Float), Float)

    def clock_params(self, now: datetime | None, **offsets: float) -> dict[str, Any]:
        params: dict[str, Any] = {"p_now": now}
        for name, seconds in offsets.items():
            params[f"p_off_s_{name}"] = int(seconds)
            params[f"p_off_ms_{name}"] = round((seconds - int(seconds)) * 1000)
        return params

    def claim_statement(self, limit: int) -> Update:
        """The claim of up to `limit` jobs. The limit is part of the statement, so SQLAlchemy
        renders TOP and keeps the subquery's ORDER BY; for a bound limit it would fall back
        to a ROW_NUMBER() window over every pending row, each of them locked UPDLOCK."""
        clock = self.clock()
        candidates = (
            select(job.c.id).with_hint(job, LOCK_HINTS).where(claimable(clock)).order_by(*CLAIM_ORDER).limit(limit)
        )
        return (
            update(job)
            .where(job.c.id.in_(candidates.scalar_subquery()))
            .values(claim_values(clock, self.clock("lease")))
            .returning(*CLAIM_COLUMNS, job.c.run_at.label("due"), job.c.priority)
        )

    def claim(self, db: Connections, params: Mapping[str, Any], after: AfterClaim | None) -> Sequence[Sequence[Any]]:
        with db.transaction("claim") as conn:
            claimed = conn.execute(self.claim_statement(params["p_limit"]), params).all()
            if not claimed:
                return []
            if after is not None:
                claimed = after(conn, claimed)
        return sorted(claimed, key=lambda row: (-row.priority, row.due, row.id))

    def lock_rows(self, stmt: Select[Any], *, skip_locked: bool, table: Table | None = None) -> Select[Any]:
        # The update lock is held to the end of the transaction (a shared one would not be).
        # Waiting: a plain read, which under locking READ COMMITTED waits for a writer to end;
        # under READ_COMMITTED_SNAPSHOT it reads the last committed rows instead, and the
        # look of whichever transaction commits last still sees every child ended.
        return stmt.with_hint(job if table is None else table, LOCK_HINTS) if skip_locked else stmt

    def migration_lock(self, conn: Connection) -> None:
        conn.execute(
            text(
                "EXEC sp_getapplock @Resource = 'jobsup_migrate', @LockMode = 'Exclusive', "
                "@LockOwner = 'Transaction', @LockTimeout = -1"
            )
        )

    @contextmanager
    def lock_within(self, conn: Connection, seconds: float) -> Iterator[None]:
        # SET takes no bound parameter here: the milliseconds are a whole number made here.
        conn.execute(text(f"SET LOCK_TIMEOUT {max(1, int(seconds * 1000)):d}"))
        try:
            yield
        finally:
            with suppress(DBAPIError):
                conn.execute(text("SET LOCK_TIMEOUT -1"))

    def classify(self, error: DBAPIError) -> type[DatabaseError]:
        state = str(getattr(error.orig, "args", [""])[0])
        if "(1222)" in str(error.orig):  # lock request time out period exceeded
            return LockBusy
        if "(1205)" in str(error.orig):  # chosen as a deadlock's victim
            return Deadlock
        if state == "42S02":
            return SchemaOutdated
        if state.startswith("08") or error.connection_invalidated:
            return DatabaseUnavailable
        return DatabaseError
