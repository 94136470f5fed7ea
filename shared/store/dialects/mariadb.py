"""MariaDB (10.8 or later) through PyMySQL, as ``mariadb://`` (or ``mysql://``) URLs.

Quirks and limits:
- MySQL servers are refused (`check_version`): MySQL evaluates an UPDATE's SET assignments
  left to right, each seeing the columns assigned before it, where jobsup's compare-and-sets
  are written for standard SQL (every assignment reads the row as it was). MariaDB does it
  the standard way in its SIMULTANEOUS_ASSIGNMENT mode, which every connection turns on,
  with STRICT_TRANS_TABLES (a value too long is refused, never cut) and NO_AUTO_VALUE_ON_ZERO
  (a row written with id 0 keeps it).
- No partial indexes: the conditions of the other dialects' filtered indexes are dropped
  here, so the claim index leads with the status instead (status, queue, priority DESC,
  run_at, id), as do the lease index and the index of jobs waiting for a concurrency slot,
  and the live-only unique key is a unique index on a generated column that is NULL for
  jobs no longer live (migrations 0001 and 0006; `mariadb_schema` is that shape as a
  model). Finished rows sit in these indexes, in another status range than the claim seeks.
- No UPDATE ... RETURNING: the claim is a transaction of three statements: the candidates
  SELECTed ... FOR UPDATE SKIP LOCKED in claim order, an UPDATE of those ids (checking the
  pause and breaker again: see `locking_reads_outrun_snapshot`), and a SELECT of what the
  UPDATE took. The other compare-and-sets run
  through the store's emulation of RETURNING (a locking SELECT, the UPDATE, a SELECT).
- SKIP LOCKED came with MariaDB 10.6, and descending index columns with 10.8 (before it
  DESC in an index is parsed and ignored, so the claim's ORDER BY priority DESC would sort
  every due pending row of the queue, locking them all, before its LIMIT): an older server
  is refused when a connection is made (`check_version`), naming its version.
- jobsup's transactions run READ COMMITTED, so the claim and the compare-and-sets lock the
  rows they touch and no gaps between them (REPEATABLE READ, the default, would make
  claimers wait on each other's next-key locks). Single statements run in autocommit.
- The reference clock is the server's UTC_TIMESTAMP(6) (fixed for one statement); times
  are DATETIME(6) holding UTC, independent of the session's time zone.
- No notifications: idle workers poll (every second by default).
- DDL commits implicitly, so a schema upgrade is not one transaction here: the migration
  lock is GET_LOCK, held by the connection across those commits and released when the
  connection goes back to the pool; a failed revision leaves the revisions before it done.
- Text compares exactly (utf8mb4_bin), but as everywhere on these servers trailing spaces
  are ignored in comparisons: unique keys 'a' and 'a ' collide.
"""

from __future__ import annotations

import hashlib
import re
import socket
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import cached_property
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Float,
    Integer,
    Row,
    Select,
    Table,
    Update,
    bindparam,
    cast,
    column,
    create_engine,
    event,
    func,
    literal,
    literal_column,
    select,
    text,
    update,
)
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from jobsup.errors import (
    DatabaseBusy,
    DatabaseError,
    DatabaseUnavailable,
    Deadlock,
    LockBusy,
    SchemaOutdated,
    UnsupportedDatabase,
)
from jobsup.store.claim import CLAIM_COLUMNS, CLAIM_ORDER, claim_values, claimable, decided_elsewhere
from jobsup.store.dialects import AfterClaim, Connections
from jobsup.store.dialects.common import NoDriverText, NoOwnerLocks, Polling, RowByRowInsert, SequentialChain
from jobsup.store.dialects.fences import RowValueFence
from jobsup.store.dialects.returning import EmulatedReturning
from jobsup.store.dialects.types import UTCDateTime
from jobsup.store.schema import job

MINIMUM_MARIADB = (10, 8)  # SKIP LOCKED (10.6) and a descending claim index (10.8)
MIGRATION_LOCK = "jobsup_migrate"  # and the database's name: a server's named locks span its databases
MIGRATION_LOCK_WAIT = 600  # seconds: longer than any jobsup upgrade has taken
_LOCK_HELD = "jobsup_migration_lock"  # in a pooled connection's info while it holds the lock
# A dead server or a half-open connection must surface in seconds (the lease threads and
# settle retries count on it), not after the kernel's 15-minute TCP timeout.
CONNECT_ARGS = {
    "connect_timeout": 10,
    "charset": "utf8mb4",
}
# Run on each new connection once the server is known to be a MariaDB jobsup supports.
# Pooled connections are recycled hourly: the server must not drop them sooner.
SESSION = (
    "SET SESSION wait_timeout = GREATEST(@@SESSION.wait_timeout, 7200), "
    "sql_mode = CONCAT_WS(',', NULLIF(@@SESSION.sql_mode, ''), 'SIMULTANEOUS_ASSIGNMENT', 'STRICT_TRANS_TABLES', "
    "'NO_AUTO_VALUE_ON_ZERO')"
)
POOL = {"pool_size": 4, "max_overflow": 4, "pool_recycle": 3600}
_KEEPALIVE = (
    (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
    (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 10),
    (socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 5),
    (socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3),
    (socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, 30000),
)
# Server error numbers: no such table; the connection failed, was lost, or the server is
# shutting down; the server is full (1040) or takes no writes for now, as in a failover
# (1290, 1836), in a read-only transaction (1792, PostgreSQL's 25006 too) or on a Galera
# node out of its cluster (1047): each a wait-and-retry, never a refusal of the write
# itself. A deadlock is `Deadlock` and a lock wait timeout `LockBusy`, as on PostgreSQL.
_NO_TABLE = 1146
_UNAVAILABLE = {1053, 1927, 2002, 2003, 2006, 2013, 2055, 4031}
_BUSY = {1040, 1047, 1290, 1792, 1836}
_LOCK_WAIT_TIMEOUT = 1205
_DEADLOCK = 1213


def check_version(version: str) -> None:
    """Refuse a server jobsup cannot run on, naming its version (`SELECT VERSION()`)."""
    found = re.match(r"(?:5\.5\.5-)?(\d+)\.(\d+)\.(\d+)", version)
    if found is None:
        raise UnsupportedDatabase(f"cannot read the database server's version {version!r}")
    number = ".".join(found.groups())
    minimum = ".".join(map(str, MINIMUM_MARIADB))
    if "mariadb" not in version.lower():
        raise UnsupportedDatabase(
            f"MySQL {number} is not supported: jobsup needs MariaDB {minimum} or later (MySQL evaluates an "
            "UPDATE's assignments left to right, and before 8.0.1 has no FOR UPDATE SKIP LOCKED)"
        )
    if tuple(int(part) for part in found.groups()) < MINIMUM_MARIADB:
        raise UnsupportedDatabase(
            f"MariaDB {number} is too old for jobsup, which needs FOR UPDATE SKIP LOCKED and descending "
            f"indexes: upgrade to MariaDB {minimum} or later"
        )


def _configure(engine: Engine) -> Engine:
    @event.listens_for(engine, "connect")
    def connect(dbapi_connection: Any, _record: Any) -> None:
        sock = getattr(dbapi_connection, "_sock", None)  # PyMySQL's socket; absent on a Unix socket
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            for level, option, value in _KEEPALIVE:
                sock.setsockopt(level, option, value)

        # A failure here leaves the connection to the pool, which closes it (SQLAlchemy
        # 2.1; closing it here too made the pool log a traceback for "Already closed").
        cursor = dbapi_connection.cursor()
        cursor.execute("SELECT VERSION()")
        (version,) = cursor.fetchone()
        check_version(str(version))
        cursor.execute(SESSION)
        cursor.close()

    @event.listens_for(engine, "checkin")
    def checkin(dbapi_connection: Any, record: Any) -> None:
        held = record.info.pop(_LOCK_HELD, None) if dbapi_connection is not None else None
        if held:
            cursor = dbapi_connection.cursor()
            cursor.execute("SELECT RELEASE_LOCK(%s)", (held,))
            cursor.close()

    return engine


def migration_lock_name(database: object) -> str:
    """The migration lock of one database: two databases on a server upgrade side by side.
    A lock name is at most 64 characters; a long database name is hashed into it."""
    name = f"{MIGRATION_LOCK}.{database}"
    if len(name) <= 64:
        return name
    return f"{MIGRATION_LOCK}.{hashlib.sha256(str(database).encode()).hexdigest()[:40]}"


class MariaDBDialect(
    EmulatedReturning, SequentialChain, RowValueFence, NoOwnerLocks, RowByRowInsert, Polling, NoDriverText
):
    name = "mariadb"
    atomic_insert_rows = 1  # its statement() is autocommit, and a bulk insert may be several statements
    bulk_chunk = 0  # built whole, then inserted (not measured side by side here)
    read_options: Mapping[str, Any] = {}
    statement_options: Mapping[str, Any] = {}
    transaction_options: Mapping[str, Any] = {}  # the engine runs READ COMMITTED already
    migration_options: Mapping[str, Any] = {}
    one_writer = False
    connections_ahead = 0  # its claims and their writes run in transactions, or one at a time
    locking_reads_outrun_snapshot = True
    locks_in_process = False
    default_poll_interval = 1.0

    def create_engine(self, url: URL) -> Engine:
        return _configure(create_engine(url, isolation_level="READ COMMITTED", connect_args=CONNECT_ARGS, **POOL))

    def create_async_engine(self, url: URL) -> Any:
        raise UnsupportedDatabase("jobsup.AsyncClient supports SQLite and PostgreSQL; on MariaDB use jobsup.Client")

    def single_statement_engine(self, engine: Engine) -> Engine:
        # One statement is atomic by itself: autocommit saves the BEGIN and COMMIT round trips.
        return _configure(create_engine(engine.url, isolation_level="AUTOCOMMIT", connect_args=CONNECT_ARGS, **POOL))

    def clock(self, offset: str | None = None) -> ColumnElement[datetime]:
        clock = func.coalesce(bindparam("p_now", type_=UTCDateTime), func.utc_timestamp(6, type_=UTCDateTime))
        if offset is None:
            return clock
        micros = bindparam(f"p_off_{offset}", type_=Integer)
        return func.timestampadd(literal_column("MICROSECOND"), micros, clock, type_=UTCDateTime)

    def clock_params(self, now: datetime | None, **offsets: float) -> dict[str, Any]:
        return {"p_now": now, **{f"p_off_{name}": round(seconds * 1e6) for name, seconds in offsets.items()}}

    def instant(self, conn: Connection) -> datetime:
        return conn.execute(select(func.utc_timestamp(6, type_=UTCDateTime))).scalar_one()

    def seconds_between(self, start: ColumnElement[Any], end: ColumnElement[Any]) -> ColumnElement[float]:
        micros = func.timestampdiff(literal_column("MICROSECOND"), start, end)
        return cast(micros / literal(1e6, Float), Float)

    @cached_property
    def candidates_statement(self) -> Select[Any]:
        return (
            select(job.c.id)
            .where(claimable(self.clock()))
            .order_by(*CLAIM_ORDER)
            .limit(bindparam("p_limit", type_=Integer))
            .with_for_update(skip_locked=True)
        )

    @cached_property
    def claim_update_statement(self) -> Update:
        clock = self.clock()
        return (
            update(job)
            .where(job.c.id.in_(bindparam("p_ids", expanding=True)), decided_elsewhere(clock))
            .values(claim_values(clock, self.clock("lease")))
        )

    @cached_property
    def claimed_statement(self) -> Select[Any]:
        # Those the update took: a candidate a pause or breaker holds back now is left pending.
        claimed = job.c.id.in_(bindparam("p_ids", expanding=True)), job.c.lease_owner == bindparam("p_owner")
        return select(*CLAIM_COLUMNS, job.c.run_at.label("due")).where(*claimed)

    def claim(self, db: Connections, params: Mapping[str, Any], after: AfterClaim | None) -> Sequence[Sequence[Any]]:
        with db.transaction("claim") as conn:
            ids = list(conn.execute(self.candidates_statement, params).scalars())
            if not ids:
                return []
            # The rows are locked until the commit: nothing changes them between these statements.
            conn.execute(self.claim_update_statement, {**params, "p_ids": ids})
            position = {job_id: index for index, job_id in enumerate(ids)}
            taken = {"p_ids": ids, "p_owner": params["p_owner"]}
            rows: Sequence[Row[Any]] = sorted(
                conn.execute(self.claimed_statement, taken).all(), key=lambda row: position[row.id]
            )
            if after is not None and rows:
                rows = after(conn, rows)
        return rows

    def insert_missing(
        self, conn: Connection, table: Table, values: Mapping[str, Any], params: Mapping[str, Any] | None = None
    ) -> None:
        # A duplicate INSERT leaves InnoDB's shared lock on the row, and two transactions that
        # then update it each wait for the other's (a deadlock: two pauses of a new queue did).
        # ON DUPLICATE KEY UPDATE takes the exclusive lock at once, so they queue instead. (Three
        # at once whose first rolls back can still deadlock on gap locks: rare, and an error.)
        (key,) = table.primary_key.columns
        stmt = mysql_insert(table).values(dict(values))
        # `key = key`: nothing changes, not even the spelling (utf8mb4_bin ignores trailing spaces).
        conn.execute(stmt.on_duplicate_key_update({key.name: key}), dict(params or {}))

    @contextmanager
    def lock_within(self, conn: Connection, seconds: float) -> Iterator[None]:
        # A session setting (whole seconds, at least one), put back on the way out whatever
        # happened: the connection goes back to the pool. A timed-out statement leaves the
        # transaction open (only that statement is rolled back).
        conn.execute(text("SET SESSION innodb_lock_wait_timeout = :s"), {"s": max(1, round(seconds))})
        try:
            yield
        finally:
            try:
                conn.execute(text("SET SESSION innodb_lock_wait_timeout = DEFAULT"))
            except DBAPIError:  # never back to the pool with a one-second lock wait
                conn.invalidate()

    def live_key_match(self) -> ColumnElement[bool]:
        # The generated column under the unique index (`mariadb_schema`): the server does not
        # rewrite a condition on unique_key and status into one on it, and would scan every
        # live job instead.
        return column("live_unique_key", job.c.unique_key.type) == bindparam("p_key")

    def lock_rows(self, stmt: Select[Any], *, skip_locked: bool, table: Table | None = None) -> Select[Any]:
        if skip_locked:
            return stmt.with_for_update(skip_locked=True)
        return stmt.with_for_update(read=True)  # LOCK IN SHARE MODE: waits for a writer to end

    def migration_lock(self, conn: Connection) -> None:
        name = migration_lock_name(conn.execute(text("SELECT DATABASE()")).scalar())
        got = conn.execute(text("SELECT GET_LOCK(:name, :wait)"), {"name": name, "wait": MIGRATION_LOCK_WAIT}).scalar()
        if got != 1:
            raise DatabaseError(
                f"another process held jobsup's migration lock ({name}) for {MIGRATION_LOCK_WAIT} s: "
                "look for a stuck `jobsup db upgrade`"
            )
        # A session lock outlives the DDL's implicit commits; it goes when the connection is checked in.
        conn.connection.info[_LOCK_HELD] = name

    def classify(self, error: DBAPIError) -> type[DatabaseError]:
        args = getattr(error.orig, "args", ())
        number = args[0] if args and isinstance(args[0], int) else None
        if number == _NO_TABLE:
            return SchemaOutdated
        if number in _BUSY:
            return DatabaseBusy
        if number == _LOCK_WAIT_TIMEOUT:
            return LockBusy
        if number == _DEADLOCK:
            return Deadlock
        if error.connection_invalidated or number in _UNAVAILABLE:
            return DatabaseUnavailable
        return DatabaseError
