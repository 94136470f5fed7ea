"""SQL Server through pyodbc. No server runs where jobsup is developed: this dialect is
checked offline (compiled statements and generated DDL), and that is all it has been.

Quirks and limits:
- The claim selects the candidates WITH (UPDLOCK, READPAST, ROWLOCK) in an updatable CTE
  (TOP with ORDER BY, which a bare UPDATE TOP cannot honour) and writes the attempt rows
  with OUTPUT ... INTO in the same statement.
- READPAST is refused under SNAPSHOT isolation, so the engine runs READ COMMITTED.
- OUTPUT INTO forbids a foreign key on its target: jobsup_job_attempt has none, and
  retention deletes attempts itself.
- A unique index treats NULLs as equal here, so the unique indexes are filtered to
  non-null keys (on every dialect, for one schema).
- The reference clock is SYSUTCDATETIME().
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Row,
    TextClause,
    Update,
    bindparam,
    create_engine,
    func,
    literal,
    literal_column,
    text,
)
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from jobsup.dialects import Connections
from jobsup.errors import DatabaseError, DatabaseUnavailable, SchemaOutdated
from jobsup.sqltypes import UTCDateTime

# The candidates' CTE names every column the OUTPUT clauses read: an updatable CTE only
# exposes its own columns to `inserted`.
CLAIM_SQL = """\
WITH candidates AS (
    SELECT TOP (:limit) id, name, queue, payload, status, attempts, max_attempts, timeout,
           actor, run_at, lease_owner, lease_expires_at, updated_at
    FROM jobsup_job WITH (UPDLOCK, READPAST, ROWLOCK)
    WHERE status = 'pending' AND queue = :queue AND run_at <= COALESCE(:now, SYSUTCDATETIME())
    ORDER BY priority DESC, run_at, id
)
UPDATE candidates
SET status = 'running', attempts = attempts + 1, lease_owner = :owner,
    lease_expires_at = DATEADD(millisecond, :lease_ms, COALESCE(:now, SYSUTCDATETIME())),
    updated_at = COALESCE(:now, SYSUTCDATETIME())
OUTPUT inserted.id, inserted.attempts, inserted.lease_owner, COALESCE(:now, SYSUTCDATETIME())
    INTO jobsup_job_attempt (job_id, attempt, owner, started_at)
OUTPUT inserted.id, inserted.name, inserted.queue, inserted.payload, inserted.attempts,
    inserted.max_attempts, inserted.timeout, inserted.actor, inserted.lease_owner;
"""


class SQLServerDialect:
    name = "mssql"
    read_options: Mapping[str, Any] = {"isolation_level": "AUTOCOMMIT"}
    statement_options: Mapping[str, Any] = {"isolation_level": "AUTOCOMMIT"}
    default_poll_interval = 1.0
    migration_options: Mapping[str, Any] = {}

    # READPAST is refused under SNAPSHOT isolation.
    engine_options: Mapping[str, Any] = {"isolation_level": "READ COMMITTED"}

    def create_engine(self, url: URL) -> Engine:
        return create_engine(url, **self.engine_options)

    def now(self, at: datetime | None, offset: float = 0.0) -> ColumnElement[datetime]:
        if at is not None:
            return literal(at + timedelta(seconds=offset), UTCDateTime)
        clock: ColumnElement[datetime] = func.sysutcdatetime(type_=UTCDateTime)
        if not offset:
            return clock
        # DATEADD takes an int: whole seconds, then the milliseconds left (so a 30-day
        # offset does not overflow as milliseconds would).
        seconds, millis = int(offset), round((offset - int(offset)) * 1000)
        shifted = func.dateadd(literal_column("second"), seconds, clock, type_=UTCDateTime)
        return func.dateadd(literal_column("millisecond"), millis, shifted, type_=UTCDateTime)

    def claim_statement(
        self, *, queue: str, owner: str, limit: int, lease: float, now: datetime | None = None
    ) -> TextClause:
        return text(CLAIM_SQL).bindparams(
            bindparam("now", now, type_=UTCDateTime),
            limit=limit,
            queue=queue,
            owner=owner,
            lease_ms=round(lease * 1000),
        )

    def claim(
        self,
        db: Connections,
        *,
        queue: str,
        owner: str,
        limit: int,
        lease: float,
        now: datetime | None,
    ) -> Sequence[Row[Any]]:
        stmt = self.claim_statement(queue=queue, owner=owner, limit=limit, lease=lease, now=now)
        with db.transaction("claim") as conn:
            return conn.execute(stmt).all()

    def update_then(
        self, db: Connections, first: Update, then: Callable[[Any], Update], operation: str
    ) -> Sequence[Row[Any]]:
        with db.transaction(operation) as conn:
            rows = conn.execute(first).all()
            if rows:
                conn.execute(then([row[0] for row in rows]))
        return rows

    def after_enqueue(self, conn: Connection, queues: set[str]) -> None:
        """Nothing to send: idle workers poll."""

    def listener(self, db: Any) -> None:
        return None

    def migration_lock(self, conn: Connection) -> None:
        conn.execute(
            text(
                "EXEC sp_getapplock @Resource = 'jobsup_migrate', @LockMode = 'Exclusive', "
                "@LockOwner = 'Transaction', @LockTimeout = -1"
            )
        )

    def classify(self, error: DBAPIError) -> type[DatabaseError]:
        state = str(getattr(error.orig, "args", [""])[0])
        if state == "42S02":
            return SchemaOutdated
        if state.startswith("08") or error.connection_invalidated:
            return DatabaseUnavailable
        return DatabaseError
