"""The one seam for database differences.

Everything that truly differs between SQLite, PostgreSQL, MariaDB/MySQL and SQL Server lives in one module
per database behind the `Dialect` protocol: how an engine is set up, the reference clock,
the claim statement, how an update reads back the rows it changed, how two dependent writes
are made atomic, how idle workers are woken, how a lease owner is known alive, the migration
lock, and how driver errors read. Every other statement is written once, dialect-neutral, in
`jobsup.store`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol, TypeVar

from sqlalchemy import ColumnElement, Connection, Engine, Insert, Row, Select, Table, Update
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from jobsup.errors import DatabaseError, DriverMissing, UnsupportedDatabase
from jobsup.store.chain import Chain, Returning
from jobsup.store.rows import Lease, NewJob

SUPPORTED_URLS = (
    "sqlite:///PATH, postgresql+psycopg://USER@HOST/DB, mariadb+pymysql://USER:PASSWORD@HOST/DB, "
    "mysql+pymysql://USER:PASSWORD@HOST/DB, mssql+pyodbc://USER:PASSWORD@DSN"
)


T = TypeVar("T")


class Connections(Protocol):
    """The three kinds of connection jobsup uses, and the driver's own for its hottest
    statements (see `jobsup.store.database.Database`)."""

    def read(self, operation: str = ...) -> AbstractContextManager[Connection]: ...
    def statement(self, operation: str = ...) -> AbstractContextManager[Connection]: ...
    def transaction(self, operation: str = ...) -> AbstractContextManager[Connection]: ...
    def may_run_on_driver(self) -> bool: ...
    def driver_run(self, operation: str, text: str, params: Mapping[str, Any], read: Callable[[Any], T]) -> T: ...


class Listener(Protocol):
    """Something an idle worker can `select` on that becomes readable when work arrives."""

    # The last `drain` found a wakeup sent just before the commit it announces (the worker
    # then looks again shortly, in case its claim ran before that commit).
    early: bool

    def fileno(self) -> int: ...
    def drain(self) -> None: ...
    def close(self) -> None: ...
    @property
    def present(self) -> bool:
        """False once it can no longer be woken (it is then made anew)."""


class OwnerLock(Protocol):
    """Held by a live lease owner for its whole life (see `Dialect.hold_owner`)."""

    def release(self) -> None: ...


# Runs inside a claim's transaction with the claimed rows (the claim's in-transaction steps).
AfterClaim = Callable[[Connection, Sequence[Row[Any]]], Sequence[Row[Any]]]


class Dialect(Protocol):
    """What one database does differently. Implementations are stateless."""

    name: str
    # Execution options for `Database.read()` and `Database.statement()` connections.
    read_options: Mapping[str, Any]
    statement_options: Mapping[str, Any]
    # Execution options of a `Database.transaction()` connection met mid-way (`AsyncClient`
    # runs every kind of work on one connection, so each sets what it needs).
    transaction_options: Mapping[str, Any]
    # Execution options of the connection that runs a schema upgrade.
    migration_options: Mapping[str, Any]
    # How often an idle worker looks for work when nothing wakes it sooner.
    default_poll_interval: float
    # One writer at a time (SQLite): a worker writes its outcomes before it claims again,
    # rather than beside the claim, which would only queue the two on the write lock.
    one_writer: bool
    # How many connections of the single statements' pool a worker opens while it boots
    # (`jobsup.worker.boot.open_ahead`): those its claims and their writes use at once.
    connections_ahead: int
    # A locking read (FOR UPDATE SKIP LOCKED) sees rows committed after the snapshot its
    # statement's subqueries read (MariaDB; SQL Server): what a subquery decided must be
    # confirmed by a later statement (the outbox relay's claim; MariaDB's job claim,
    # `claim.decided_elsewhere`). Why: docs/explanation/internals.md, "A locking read
    # outruns its snapshot".
    locking_reads_outrun_snapshot: bool
    # Its connections keep their locks in the process's memory (SQLite): a child forked
    # while another thread is using one inherits a lock that nobody will release, and every
    # write of the child then waits out the busy timeout. A forking process waits for such
    # use to end (`Database.guard_forks`).
    locks_in_process: bool
    # How many jobs one `insert_jobs` call writes atomically on a `statement()` connection
    # (outside a transaction block): more need a transaction.
    atomic_insert_rows: int
    # A bulk enqueue longer than this many jobs is built and inserted side by side, a chunk
    # at a time (`jobsup.client.bulk`); 0: built whole, then inserted. Not where the insert
    # holds back every other writer: SQLite's one write lock would be held while Python
    # builds.
    bulk_chunk: int

    def create_engine(self, url: URL) -> Engine:
        """An engine configured for jobsup's transaction discipline on this database."""

    def create_async_engine(self, url: URL) -> Any:
        """An asyncio engine set up like `create_engine`'s (`UnsupportedDatabase` where the
        database has no async driver)."""

    def single_statement_engine(self, engine: Engine) -> Engine:
        """The engine for `Database.read()` and `Database.statement()` (may be `engine`)."""

    def compile_ahead(self) -> None:
        """Compile now what a worker compiles at its first claim (a supervisor, before it forks)."""

    def clock(self, offset: str | None = None) -> ColumnElement[datetime]:
        """The reference clock as an expression of bound parameters: the database's clock
        (the host's on SQLite) unless `clock_params` bound a fixed `now`; with `offset`, that
        instant plus the seconds `clock_params` was given under that name."""

    def clock_params(self, now: datetime | None, **offsets: float) -> dict[str, Any]:
        """The parameters of `clock()`: a fixed instant (None: the clock) and named offsets."""

    def instant(self, conn: Connection) -> datetime:
        """The clock's reading at this moment, inside a transaction that may have waited for
        a lock (PostgreSQL's now() is the transaction's start)."""

    def seconds_between(self, start: ColumnElement[Any], end: ColumnElement[Any]) -> ColumnElement[float]:
        """`end - start` in seconds, as a number the database can sum."""

    def insert_missing(
        self, conn: Connection, table: Table, values: Mapping[str, Any], params: Mapping[str, Any] | None = None
    ) -> None:
        """Insert one row of `table` unless its primary key is taken (by a row another
        transaction inserted too, once that commits), so that the caller can lock and change
        the row next, in its transaction, without waiting in a way that could deadlock."""

    def lock_within(self, conn: Connection, seconds: float) -> AbstractContextManager[None]:
        """In the block, a statement waiting for a row lock gives up after about `seconds`
        and raises `LockBusy` (the transaction is then to be rolled back), so that one held
        row cannot hold up a settle, and with it every lease its worker renews."""

    def live_key_match(self) -> ColumnElement[bool]:
        """The live job holding the unique key bound as `p_key`, in the shape the database's
        index of live keys answers."""

    def lease_match(self, *, results: bool = False) -> tuple[ColumnElement[bool], ColumnElement[Any] | None]:
        """The lease half of a fence, (id, attempts) among the bound leases, in a shape
        whose text does not change with their number where the database allows; with
        `results`, also the expression of each row's result (None where the dialect binds one
        result for every lease, as `p_result`)."""

    def lease_params(self, leases: Sequence[Lease], results: Sequence[str | None] | None = None) -> dict[str, Any]:
        """The parameters of `lease_match` for `leases` (and their `results`, in order)."""

    def claim(self, db: Connections, params: Mapping[str, Any], after: AfterClaim | None) -> Sequence[Sequence[Any]]:
        """Take up to `p_limit` claimable jobs (see `jobsup.store.claim`): mark them running
        under `p_owner`'s lease, count the attempt and note its start, and run `after`
        on the claimed rows, all or nothing. Returns the claimed rows `after` kept (it may
        put some back): `CLAIM_COLUMNS`, then the due time, in claim order (read by position:
        a claim run as `DriverText` returns tuples)."""

    def returning(self, stmt: Update) -> Returning:
        """Prepare, once, the compare-and-set `stmt` (an UPDATE with RETURNING of one table,
        whose WHERE names the state it expects): the database's own statement where it has
        one, else an emulation that needs a transaction (`Returning.single` is then False;
        see `jobsup.store.dialects.returning`)."""

    def chain(self, first: Update, then: Callable[[Any], Insert], reads: Sequence[Any] = ()) -> Chain:
        """Prepare, once, a compare-and-set `first` (an UPDATE with RETURNING whose first
        columns are the job id and its status) and the write `then(changed)` that depends on
        it (`changed`: the rows `first` changed, as it left them, with its RETURNING's columns
        and those of `reads`; the caller gets back only the RETURNING's, or, run alone, only
        the id and the status: `Chain.run_alone`)."""

    def insert_jobs(
        self, conn: Connection, jobs: Sequence[NewJob], clock: dict[str, Any]
    ) -> tuple[list[int], set[str]]:
        """Insert `jobs` (no unique keys among them) at `clock` (`clock_params`); return their
        ids in order, and the queues whose idle workers the insert itself wakes on commit."""

    def insert_one_driver(self, new: NewJob, clock: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """One job's insert, waking its queue, as the driver's own text and parameters; None
        where the dialect has none. `Transitions.enqueue` runs it with `Database.driver_value`
        for a plain job enqueued alone (no unique key, nothing sealed, no concurrency key, no
        enqueue step), so it must be one statement, whole by itself."""

    def after_enqueue(self, conn: Connection, queues: set[str]) -> None:
        """Inside a transaction that made jobs of `queues` pending and due (an enqueue, a
        resume, a release, a retry, a step unblocked): wake their idle workers when it commits."""

    def listener(self, db: Any, queue: str) -> Listener | None:
        """A connection that idle workers of `queue` wait on to be woken by `after_enqueue`,
        or None (they poll)."""

    def wakeup_warning(self, db: Any) -> str | None:
        """Said once at `jobsup start` when idle workers cannot be woken as this database
        normally would (PostgreSQL behind a pooler without `listen_url`, or a `listen_url`
        that does not hear the database's notifications): they poll."""

    def hold_owner(self, db: Any, owner: str) -> OwnerLock | None:
        """Mark `owner` alive for as long as this process lives, where the lease sweep needs
        to know (SQLite); None elsewhere."""

    def owners_alive(self, db: Any, owners: set[str]) -> set[str]:
        """Which of `owners` are known alive (`hold_owner`): the sweep leaves their leases
        alone whatever the clock says. Empty where the database clock decides alone."""

    def migration_lock(self, conn: Connection) -> None:
        """Inside `conn`'s open transaction, wait for the lock that serialises upgrades."""

    def lock_rows(self, stmt: Select[Any], *, skip_locked: bool, table: Table | None = None) -> Select[Any]:
        """`stmt` (a SELECT of `table`'s rows, job rows unless said) locking what it returns until the transaction ends,
        so that no other transaction changes them meanwhile: skipping rows another
        transaction is changing (`skip_locked`), or waiting for it to end and reading what
        it left. Where writers take turns (SQLite) there is nothing to lock."""

    def classify(self, error: DBAPIError) -> type[DatabaseError]:
        """Which jobsup error a driver error is."""


def dialect_for(url: URL) -> Dialect:
    """The dialect for a normalised URL (see `normalise_url`): one per database kind and
    process, so what it compiles once (its claim as driver text) serves every `Database` of
    the process, and the workers a supervisor forks inherit it (`Dialect.compile_ahead`)."""
    backend = url.get_backend_name()
    made = _made.get(backend)
    if made is None:
        made = _made[backend] = _new_dialect(url, backend)
    return made


def _new_dialect(url: URL, backend: str) -> Dialect:
    if backend == "sqlite":
        from jobsup.store.dialects.sqlite import SQLiteDialect

        return SQLiteDialect()
    if backend == "postgresql":
        from jobsup.store.dialects.postgresql import PostgreSQLDialect

        return PostgreSQLDialect()
    if backend == "mssql":
        from jobsup.store.dialects.mssql import SQLServerDialect

        return SQLServerDialect()
    if backend in ("mariadb", "mysql"):
        from jobsup.store.dialects.mariadb import MariaDBDialect

        return MariaDBDialect()
    raise UnsupportedDatabase(f"unsupported database URL scheme {url.drivername!r}; use {SUPPORTED_URLS}")


_made: dict[str, Dialect] = {}


# The one driver jobsup supports per database, and the extra that installs it.
_DRIVERS = {
    "sqlite": ("pysqlite", None),
    "postgresql": ("psycopg", "postgresql"),
    "mssql": ("pyodbc", "mssql"),
    # MariaDB and MySQL share a dialect; SQLAlchemy's mariadb:// refuses a MySQL server, so
    # each scheme keeps its name.
    "mariadb": ("pymysql", "mariadb"),
    "mysql": ("pymysql", "mariadb"),
}
# What to install besides the extra, per database.
_SYSTEM_NEEDS = {
    "mssql": ", and install the system's ODBC driver manager (unixODBC) and Microsoft's ODBC Driver for SQL Server",
}
# Schemes people write for these databases that SQLAlchemy itself does not accept.
_ALIASES = {"postgres": "postgresql"}
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


def backend_name(url: str | URL) -> str:
    """The database `url` is for, whatever driver it names and without importing one: all
    that writing its DDL offline needs (SQLAlchemy's dialect, never the driver)."""
    return _parse(url)[1]


def normalise_url(url: str | URL) -> URL:
    """Parse `url`, pick jobsup's driver for a bare scheme, and refuse anything else clearly,
    never showing the password."""
    parsed, backend, driver = _parse(url)
    wanted, extra = _DRIVERS[backend]
    if driver and driver != wanted:
        raise UnsupportedDatabase(f"driver {driver!r} is not supported for {backend}; use {backend}+{wanted}://...")
    parsed = parsed.set(drivername=f"{backend}+{wanted}")
    if extra is not None:
        try:
            __import__(wanted)
        except ImportError as exc:
            raise DriverMissing(
                f"{backend} needs the {wanted} driver, which did not import ({exc}): "
                f"pip install 'jobsup[{extra}]'{_SYSTEM_NEEDS.get(backend, '')}"
            ) from None
    return parsed


def same_database(a: str | URL, b: str | URL) -> bool:
    """Whether two URLs name one database, whatever their drivers and credentials: the same
    server (host and port as written: ``localhost`` and ``127.0.0.1`` differ) and database
    name, or for SQLite the same file however it was reached. For a framework that hands
    jobsup its own connection to that database (`jobsup.contrib.django`)."""
    return _identity(a) == _identity(b)


def _identity(url: str | URL) -> tuple[object, ...]:
    parsed, backend, _ = _parse(url)
    if backend == "sqlite":
        from jobsup.store.dialects.sqlite import database_path

        path = database_path(parsed)
        # An in-memory database is each connection's own: never the same as another.
        return (backend, str(path) if path is not None else object())
    return (backend, parsed.host or None, parsed.port or DEFAULT_PORTS.get(backend), parsed.database)


# The port a server URL means when it names none (its driver's default).
DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306, "mssql": 1433}
# The databases whose connection a framework may lend jobsup for a transactional enqueue
# (`jobsup.contrib.django`): the ones tested with a lent connection.
LENDABLE = frozenset({"sqlite", "postgresql"})


def shown(url: URL) -> str:
    """`url` as people see it: no password, and a relative SQLite file as its absolute path
    (relative, it names another file in each working directory, and a user who follows an
    error's advice from elsewhere makes a second, empty database)."""
    name = url.database
    if url.get_backend_name() == "sqlite" and name and name != ":memory:" and not name.startswith("file:"):
        url = url.set(database=os.path.abspath(name))
    return url.render_as_string(hide_password=True)


def _parse(url: str | URL) -> tuple[URL, str, str]:
    """`url` parsed, with its database (aliases resolved; refused unless supported) and driver."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        shown = hide_password(str(url))
        reason = f" ({hide_password(str(exc))})" if isinstance(exc, ValueError) else ""
        raise UnsupportedDatabase(f"{shown!r} is not a database URL{reason}; use {SUPPORTED_URLS}") from None
    backend, _, driver = parsed.drivername.partition("+")
    backend = _ALIASES.get(backend, backend)
    if backend not in _DRIVERS:
        raise UnsupportedDatabase(f"unsupported database URL scheme {parsed.drivername!r}; use {SUPPORTED_URLS}")
    return parsed, backend, driver


def hide_password(text: str) -> str:
    """`text` with the password of any URL in it replaced by ***."""
    return _PASSWORD.sub(r"\1***@", text)
