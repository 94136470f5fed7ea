"""PostgreSQL: production, and many hosts sharing one queue.

Quirks and limits:
- The claim is one statement: the candidates are selected FOR UPDATE SKIP LOCKED in a CTE
  (so the planner cannot update more rows than the limit) and updated, in one round trip.
  Single statements run in autocommit: BEGIN and COMMIT would triple the round trips of the
  hot path.
- Two dependent writes (a job's end and its attempt's row) are one statement too:
  data-modifying CTEs make them atomic without a transaction block. The second reads the
  first's RETURNING, not the table: a statement reads every table from one snapshot taken
  when it started, which a row lock waited on (a progress report's) would leave behind.
- Many jobs are inserted from one array per column through ``unnest``, and the insert
  NOTIFYs in the same statement, so a plain enqueue is one round trip in autocommit
  (`jobsup.store.dialects.pginsert`).
- Idle workers LISTEN on their own queue's channel (``jobsup:<queue>``), so an enqueue
  wakes only the workers of its queue. The LISTEN connection gets the same connect timeout,
  keepalives and TCP user timeout as every other connection, so a dead or half-open one
  fails within about 30 s and is replaced. It connects to `listen_url` when that is set.
- Behind a transaction-mode pooler (PgBouncer) every connection is told so when it opens,
  and then prepares no statements on the server; idle workers LISTEN on `listen_url` or
  poll (`jobsup.store.dialects.pooler`).
- The reference clock is the server's `now()`, so clock skew between hosts cannot make one
  host think another's lease has lapsed.
- Partial indexes are only used when the planner sees the literal status; jobsup inlines it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Float,
    Insert,
    Integer,
    Interval,
    Select,
    Table,
    Update,
    bindparam,
    case,
    cast,
    create_engine,
    func,
    null,
    select,
    text,
    update,
)
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from jobsup.errors import DatabaseBusy, DatabaseError, DatabaseUnavailable, Deadlock, LockBusy, SchemaOutdated
from jobsup.store.chain import Chain, Fused
from jobsup.store.claim import CLAIM_COLUMNS, CLAIM_ORDER, claim_values, claimable
from jobsup.store.dialects import AfterClaim, Connections
from jobsup.store.dialects.common import (
    FilteredKeyIndex,
    NativeReturning,
    NoOwnerLocks,
    SavepointInsert,
)
from jobsup.store.dialects.drivertext import DriverText
from jobsup.store.dialects.fences import ArrayFence
from jobsup.store.dialects.pginsert import INSERT_CHUNK, UnnestInsert, channel
from jobsup.store.dialects.pooler import listen_route, polling_warning, unheard_warning, watch
from jobsup.store.dialects.types import UTCDateTime
from jobsup.store.schema import job

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

# pg_advisory_xact_lock key for schema upgrades: the first 8 bytes of sha1("jobsup-migrate").
MIGRATION_LOCK_KEY = 0x4A6F62737570
# A dead server or a half-open connection must surface as an error in seconds, not after
# the kernel's 15-minute TCP timeout (the lease threads would cope, the settle retries not).
CONNECT_ARGS = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30000,
}
_UNAVAILABLE_STATES = {"08", "57"}  # connection exceptions, operator intervention (shutdown)
# Too many connections, and a read-only server (a standby during a failover): wait and retry.
_BUSY_STATES = {"53300", "25006"}
_UNDEFINED_TABLE = "42P01"
_LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout
_DEADLOCK = "40P01"


# `jobsup start` checks a listen_url by sending this channel a notification (no queue can be
# named so: queue names have no spaces) and waiting this long for it.
PROBE_QUEUE, PROBE_WAIT = "listen probe", 3.0


class NotifyListener:
    """A dedicated autocommit connection LISTENing on one queue's channel, to `url`
    (`listen_url`) or else the database's own URL.

    Through a transaction-mode pooler (PgBouncer) notifications never arrive; that is why
    `listen_route` sends workers elsewhere, or lets them poll."""

    early = False  # NOTIFY is delivered after the commit

    def __init__(self, db: Any, queue: str, url: URL | None = None) -> None:
        import psycopg
        from psycopg import sql

        url = db.url if url is None else url
        args, kwargs = db.engine.dialect.create_connect_args(url)
        with db.errors():
            try:
                self.conn = psycopg.connect(*args, **{**kwargs, **CONNECT_ARGS}, autocommit=True)
                self.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel(queue))))
            except psycopg.Error as exc:
                where = url.render_as_string(hide_password=True)
                raise DatabaseUnavailable(f"cannot LISTEN on {where}: {exc}") from None

    def fileno(self) -> int:
        return int(self.conn.fileno())

    def drain(self) -> None:
        import psycopg

        try:
            for _ in self.conn.notifies(timeout=0):
                pass
        except psycopg.Error as exc:
            self.close()
            raise DatabaseUnavailable(f"LISTEN connection lost: {exc}") from None

    def close(self) -> None:
        self.conn.close()

    @property
    def present(self) -> bool:
        return not self.conn.closed


class PostgreSQLDialect(NativeReturning, ArrayFence, NoOwnerLocks, UnnestInsert, FilteredKeyIndex, SavepointInsert):
    name = "postgresql"
    atomic_insert_rows = INSERT_CHUNK
    bulk_chunk = INSERT_CHUNK
    read_options: Mapping[str, Any] = {}
    statement_options: Mapping[str, Any] = {}
    transaction_options: Mapping[str, Any] = {}
    migration_options: Mapping[str, Any] = {}
    one_writer = False
    # A claim and the write of the claim before it (sent behind it, or written beside it by
    # the settler's thread) are under way at once, each on a connection of this pool.
    connections_ahead = 2
    locking_reads_outrun_snapshot = False
    locks_in_process = False
    default_poll_interval = 5.0  # LISTEN/NOTIFY wakes idle workers; polling is the fallback

    def create_engine(self, url: URL) -> Engine:
        return watch(create_engine(url, pool_size=4, max_overflow=4, connect_args=CONNECT_ARGS))

    def create_async_engine(self, url: URL) -> AsyncEngine:
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(url, pool_size=4, max_overflow=4, connect_args=CONNECT_ARGS)
        watch(engine.sync_engine)
        return engine

    def single_statement_engine(self, engine: Engine) -> Engine:
        # One statement is atomic by itself: autocommit saves the BEGIN and COMMIT round trips.
        # The connection given back last is lent first: a worker's claim and the write it sent
        # behind the claim before (`jobsup.store.dialects.sent`) each keep to a connection, so
        # each is prepared, and planned for its first values (on a young table the settle's
        # first plans scan it: 2.5-3 ms against 1.2), on one connection rather than on both in
        # turn, as a first-in-first-out pool had them. The price: a connection beyond those in
        # use sits idle at the bottom, where a server's idle timeout may close it; its next use
        # then fails as a lost connection does, and is retried as one is.
        return watch(
            create_engine(
                engine.url,
                isolation_level="AUTOCOMMIT",
                pool_size=4,
                max_overflow=4,
                pool_use_lifo=True,
                connect_args=CONNECT_ARGS,
            )
        )

    def compile_ahead(self) -> None:
        self.claim_text  # noqa: B018 (made and kept: a cached property, 4 ms of compiling)

    def clock(self, offset: str | None = None) -> ColumnElement[datetime]:
        # The server's now() unless a `p_now` is bound (tests); offsets are bound intervals.
        clock = func.coalesce(bindparam("p_now", type_=UTCDateTime), func.now(type_=UTCDateTime))
        return clock if offset is None else clock + bindparam(f"p_off_{offset}", type_=Interval)

    def instant(self, conn: Connection) -> datetime:
        return conn.execute(select(func.clock_timestamp(type_=UTCDateTime))).scalar_one()

    def clock_params(self, now: datetime | None, **offsets: float) -> dict[str, Any]:
        return {"p_now": now, **{f"p_off_{name}": timedelta(seconds=s) for name, s in offsets.items()}}

    def seconds_between(self, start: ColumnElement[Any], end: ColumnElement[Any]) -> ColumnElement[float]:
        return cast(func.extract("epoch", end - start), Float)

    @cached_property
    def claim_statement(self) -> Select[Any]:
        clock = self.clock()
        candidates = (
            select(job.c.id)
            .where(claimable(clock))
            .order_by(*CLAIM_ORDER)
            .limit(bindparam("p_limit", type_=Integer))
            .with_for_update(skip_locked=True)
            .cte("candidates")
        )
        claimed = (
            update(job)
            .where(job.c.id == candidates.c.id)
            .values(claim_values(clock, self.clock("lease")))
            .returning(*CLAIM_COLUMNS, job.c.priority, job.c.run_at)
            .cte("claimed")
        )
        # RETURNING has no order; the batch is run in claim order, so sort it here. An
        # infinite run_at ('-infinity' is due) has no time to wait from: None instead.
        # The due time as seconds since the epoch (`ClaimedJob.due`): a timestamptz cost the
        # worker 0.5 µs a row to read in a session zone such as 'Etc/UTC' (psycopg makes a
        # ZoneInfo datetime) and 0.5 µs more to turn into seconds; a float8 costs 0.2.
        seconds = cast(func.extract("epoch", claimed.c.run_at), Float)
        due = case((func.isfinite(claimed.c.run_at), seconds), else_=null()).label("due")
        returned = [*(claimed.c[column.name] for column in CLAIM_COLUMNS), due]
        order = (claimed.c.priority.desc(), claimed.c.run_at, claimed.c.id)
        return select(*returned).order_by(*order)

    def claim(self, db: Connections, params: Mapping[str, Any], after: AfterClaim | None) -> Sequence[Sequence[Any]]:
        if after is None:  # on the driver where it may: an idle worker's wake-up paid 0.6 ms of Python
            return self.claim_text.run_alone(db, "claim", params)
        with db.transaction("claim") as conn:
            rows = conn.execute(self.claim_statement, params).all()
            return after(conn, rows) if rows else rows

    @cached_property
    def claim_text(self) -> DriverText:
        return DriverText.of(self.claim_statement)

    def chain(self, first: Update, then: Callable[[Any], Insert], reads: Sequence[Any] = ()) -> Chain:
        """Both writes in one statement: data-modifying CTEs make them atomic."""
        return Fused.of(first, then, reads)

    def after_enqueue(self, conn: Connection, queues: set[str]) -> None:
        # Delivered when the enqueue commits (with the caller's transaction, if it is theirs).
        for queue in sorted(queues):
            conn.execute(self.notify_statement, {"p_channel": channel(queue)})

    @cached_property
    def notify_statement(self) -> Select[Any]:
        return select(func.pg_notify(bindparam("p_channel"), ""))

    def listener(self, db: Any, queue: str) -> NotifyListener | None:
        route = listen_route(db)
        return None if route is None else NotifyListener(db, queue, route)

    def wakeup_warning(self, db: Any) -> str | None:
        route = listen_route(db)
        if route is None:
            return polling_warning(db)
        if not db.listen_url:
            return None
        # A listen_url of the operator's: check that it hears what the database URL sends.
        import psycopg

        try:
            listener = NotifyListener(db, PROBE_QUEUE, route)
        except DatabaseError as exc:
            return unheard_warning(db, route, f"cannot be reached ({exc})")
        try:
            with db.statement() as conn:
                conn.execute(self.notify_statement, {"p_channel": channel(PROBE_QUEUE)})
            heard = bool(list(listener.conn.notifies(timeout=PROBE_WAIT, stop_after=1)))
        except (DatabaseError, psycopg.Error) as exc:
            return unheard_warning(db, route, f"could not be checked ({exc})")
        finally:
            listener.close()
        if not heard:
            return unheard_warning(
                db, route, f"did not hear a notification sent through the database URL within {PROBE_WAIT:g}s"
            )
        return None

    def lock_rows(self, stmt: Select[Any], *, skip_locked: bool, table: Table | None = None) -> Select[Any]:
        # Skipping: FOR NO KEY UPDATE, so that two checks lock two different siblings (a
        # shared lock would let every check pile onto one row). Waiting: FOR SHARE.
        if skip_locked:
            return stmt.with_for_update(key_share=True, skip_locked=True)  # FOR NO KEY UPDATE SKIP LOCKED
        return stmt.with_for_update(read=True)

    def migration_lock(self, conn: Connection) -> None:
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})

    @contextmanager
    def lock_within(self, conn: Connection, seconds: float) -> Iterator[None]:
        # For this transaction only (set_config's `true`: SET LOCAL), back to the session's
        # own after the block. A statement that timed out aborts the transaction, which
        # undoes the setting with it.
        conn.execute(text("SELECT set_config('lock_timeout', :ms, true)"), {"ms": f"{max(1, int(seconds * 1000))}ms"})
        yield
        conn.execute(text("SET LOCAL lock_timeout TO DEFAULT"))

    def classify(self, error: DBAPIError) -> type[DatabaseError]:
        state = getattr(error.orig, "sqlstate", None) or ""
        if state == _UNDEFINED_TABLE:
            return SchemaOutdated
        lost = isinstance(error, OperationalError | InterfaceError) and not state  # refused, reset
        if state in _BUSY_STATES:
            return DatabaseBusy
        if state == _LOCK_NOT_AVAILABLE:
            return LockBusy
        if state == _DEADLOCK:
            return Deadlock
        if error.connection_invalidated or state[:2] in _UNAVAILABLE_STATES or lost:
            return DatabaseUnavailable
        return DatabaseError
