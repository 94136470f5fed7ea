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

from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cached_property
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Row,
    TextClause,
    bindparam,
    create_engine,
    func,
    literal_column,
    text,
)
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from jobsup.errors import DatabaseError, DatabaseUnavailable, SchemaOutdated
from jobsup.store.dialects import Connections
from jobsup.store.dialects.common import SequentialChain
from jobsup.store.dialects.types import UTCDateTime
from jobsup.store.rows import Lease
from jobsup.store.schema import job

# The candidates' CTE names every column the OUTPUT clauses read: an updatable CTE only
# exposes its own columns to `inserted`.
CLAIM_SQL = """\
WITH candidates AS (
    SELECT TOP (:p_limit) id, name, queue, payload, status, attempts, max_attempts, timeout,
           actor, run_at, lease_owner, lease_expires_at, updated_at
    FROM jobsup_job WITH (UPDLOCK, READPAST, ROWLOCK)
    WHERE status = 'pending' AND queue = :p_queue AND run_at <= COALESCE(:p_now, SYSUTCDATETIME())
    ORDER BY priority DESC, run_at, id
)
UPDATE candidates
SET status = 'running', attempts = attempts + 1, lease_owner = :p_owner,
    lease_expires_at = DATEADD(millisecond, :p_off_ms_lease,
        DATEADD(second, :p_off_s_lease, COALESCE(:p_now, SYSUTCDATETIME()))),
    updated_at = COALESCE(:p_now, SYSUTCDATETIME())
OUTPUT inserted.id, inserted.attempts, inserted.lease_owner, COALESCE(:p_now, SYSUTCDATETIME())
    INTO jobsup_job_attempt (job_id, attempt, owner, started_at)
OUTPUT inserted.id, inserted.name, inserted.queue, inserted.payload, inserted.attempts,
    inserted.max_attempts, inserted.timeout, inserted.actor, inserted.lease_owner, inserted.run_at;
"""


class SQLServerDialect(SequentialChain):
    name = "mssql"
    read_options: Mapping[str, Any] = {}
    statement_options: Mapping[str, Any] = {}
    default_poll_interval = 1.0
    migration_options: Mapping[str, Any] = {}

    # READPAST is refused under SNAPSHOT isolation.
    engine_options: Mapping[str, Any] = {"isolation_level": "READ COMMITTED"}

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

    def clock_params(self, now: datetime | None, **offsets: float) -> dict[str, Any]:
        params: dict[str, Any] = {"p_now": now}
        for name, seconds in offsets.items():
            params[f"p_off_s_{name}"] = int(seconds)
            params[f"p_off_ms_{name}"] = round((seconds - int(seconds)) * 1000)
        return params

    def attempt_match(self) -> ColumnElement[bool]:
        # SQL Server has no row-value IN: match "id:attempt" keys instead.
        key = func.concat(job.c.id, literal_column("':'"), job.c.attempts)
        return key.in_(bindparam("p_fence_keys", expanding=True))

    def attempt_params(self, leases: Sequence[Lease]) -> dict[str, Any]:
        return {"p_fence_keys": [f"{lease.job_id}:{lease.attempt}" for lease in leases]}

    @cached_property
    def claim_statement(self) -> TextClause:
        return text(CLAIM_SQL).bindparams(bindparam("p_now", type_=UTCDateTime))

    def claim(self, db: Connections, params: Mapping[str, Any]) -> Sequence[Row[Any]]:
        with db.transaction("claim") as conn:
            return conn.execute(self.claim_statement, params).all()

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
