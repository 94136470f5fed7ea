"""Connections to the jobsup database, and the one place driver errors become jobsup errors.

jobsup uses three kinds of connection, and each dialect maps them onto its own transaction
rules:

- `read()`: reads that must never take a write lock (SQLite: no BEGIN at all);
- `statement()`: one statement that is atomic by itself (PostgreSQL: autocommit, so it is
  one round trip instead of BEGIN, statement, COMMIT);
- `transaction()`: several statements, all or nothing (SQLite: BEGIN IMMEDIATE, so a
  read-then-write never deadlocks on lock upgrade).

The hottest single statements on PostgreSQL (a plain single enqueue, a claim, a settle) may skip
SQLAlchemy's execution and run on `statement()`'s pooled driver connection directly
(`driver_run`), where nothing watches the engine's statements.
"""

from __future__ import annotations

import logging
import re
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from jobsup.errors import (
    ConstraintViolation,
    DatabaseBusy,
    DatabaseError,
    DatabaseMisconfigured,
    DatabaseUnavailable,
)
from jobsup.settings import DEFAULT_URL
from jobsup.store import faults
from jobsup.store.dialects import DEFAULT_PORTS, Dialect, dialect_for, normalise_url, shown
from jobsup.store.dialects.pooler import check_listen_with
from jobsup.store.faults import OPERATION, OPERATIONS
from jobsup.store.forkguard import ForkGuard

T = TypeVar("T")


class Database:
    """An engine for one jobsup database, and the dialect that knows its quirks."""

    # Where idle workers LISTEN (the `listen_url` setting): empty for the database URL.
    listen_url = ""

    def __init__(self, url: str | URL = DEFAULT_URL, *, role: str | None = None, listen_url: str = "") -> None:
        """`role` (``worker``, ``supervisor``) arms the fault injection configured for it;
        `listen_url` is the setting, for a PostgreSQL database behind a pooler."""
        self.url = normalise_url(url)
        check_listen_with(self.url, listen_url)
        self.listen_url = listen_url
        self.dialect: Dialect = dialect_for(self.url)
        self.engine = self.dialect.create_engine(self.url)
        # Single statements and reads; on PostgreSQL and SQL Server an autocommit engine of
        # its own, so no connection switches isolation level on every checkout.
        self.single = self.dialect.single_statement_engine(self.engine)
        if role is not None:
            for engine in {self.engine, self.single}:
                faults.install(engine, role)
        self.fork_guard: ForkGuard | None = None

    def guard_forks(self) -> None:
        """This process forks while other threads use the database: on a database whose
        locks live in the process (`Dialect.locks_in_process`), make `forking()` wait for them."""
        if self.dialect.locks_in_process:
            self.fork_guard = ForkGuard()

    @contextmanager
    def forking(self) -> Iterator[None]:
        """Around `os.fork()`: no thread of this process is using the database meanwhile
        (where that matters; see `guard_forks`)."""
        if self.fork_guard is None:
            yield
            return
        with self.fork_guard.forking():
            yield

    @contextmanager
    def _in_use(self) -> Iterator[None]:
        if self.fork_guard is None:
            yield
            return
        with self.fork_guard.using():
            yield

    @property
    def safe_url(self) -> str:
        return shown(self.url)

    # Each takes the name of the operation, which fault injection and error counts use.

    @contextmanager
    def read(self, operation: str = "read") -> Iterator[Connection]:
        assert operation in OPERATIONS, f"add {operation!r} to faults.OPERATIONS"
        with self._in_use(), self.errors(), self.single.connect() as conn:
            yield conn.execution_options(**self.dialect.read_options, **{OPERATION: operation})

    @contextmanager
    def statement(self, operation: str = "write") -> Iterator[Connection]:
        assert operation in OPERATIONS, f"add {operation!r} to faults.OPERATIONS"
        with self._in_use(), self.errors(), self.single.connect() as conn:
            conn = conn.execution_options(**self.dialect.statement_options, **{OPERATION: operation})
            with _committing(conn):
                yield conn

    @contextmanager
    def transaction(self, operation: str = "write") -> Iterator[Connection]:
        assert operation in OPERATIONS, f"add {operation!r} to faults.OPERATIONS"
        with self._in_use(), self.errors(), self.engine.connect() as conn:
            conn = conn.execution_options(**{OPERATION: operation})
            with _committing(conn):
                yield conn

    def may_run_on_driver(self) -> bool:
        """Whether `driver_run` may run a statement: nothing but SQLAlchemy's own execution
        would see this database's statements (no event listener, such as fault injection's or
        a tracer's, and no `echo`)."""
        return not _watched(self.single)

    def driver_value(self, operation: str, text: str, params: Mapping[str, Any]) -> Any:
        """The first column of the first row of `text`, run by `driver_run`."""
        row = self.driver_run(operation, text, params, lambda cursor: cursor.fetchone())
        if row is None:
            raise DatabaseError(f"{operation}: the statement returned no row")
        return row[0]

    def driver_run(self, operation: str, text: str, params: Mapping[str, Any], read: Callable[[Any], T]) -> T:
        """`read(cursor)` of `text`, one statement committed by itself, run on a pooled
        connection of `statement()`'s engine without SQLAlchemy's execution around it. Only
        where `may_run_on_driver()`: what watches statements would not see it.

        For the hot statements whose Python is mostly that execution (PostgreSQL's single
        enqueue and claim, 0.4-0.6 ms of an idle call; a worker's settle). Errors become jobsup's
        as `statement()`'s do; a lost connection invalidates the pool as SQLAlchemy's would."""
        assert operation in OPERATIONS, f"add {operation!r} to faults.OPERATIONS"
        engine = self.single
        driver_error = engine.dialect.loaded_dbapi.Error
        with self._in_use(), self.errors():
            try:
                pooled = engine.raw_connection()
            except driver_error as exc:
                raise wrapped_as_sqlalchemy_would(engine, exc, None, None, None) from exc
            try:
                cursor = pooled.cursor()
                try:
                    cursor.execute(text, params, prepare=True)  # type: ignore[call-arg]  # psycopg's: see drivertext.py
                    result = read(cursor)
                finally:
                    cursor.close()
                pooled.commit()  # nothing to send in autocommit; elsewhere the pool's reset would undo it
            except driver_error as exc:
                raise wrapped_as_sqlalchemy_would(engine, exc, text, params, pooled) from exc
            except BaseException as exc:  # interrupted (Ctrl-C, a timeout): where the server is, unknown
                pooled.invalidate(exc)
                raise
            finally:
                pooled.close()
        return result

    @contextmanager
    def unit(self, connection: Connection | None, operation: str) -> Iterator[Connection]:
        """The caller's connection (its transaction), else a transaction of our own."""
        if connection is not None:
            with self.errors():
                yield connection
            return
        with self.transaction(operation) as conn:
            yield conn

    @contextmanager
    def errors(self) -> Iterator[None]:
        """Translate driver errors once, here, with the password hidden."""
        try:
            yield
        except IntegrityError as exc:
            raise ConstraintViolation(describe(exc, self.url, ConstraintViolation)) from None
        except PoolTimeout as exc:
            raise DatabaseUnavailable(
                f"no free connection to {self.safe_url} in jobsup's pool ({exc}); fewer calls at once, or a larger pool"
            ) from None
        except DBAPIError as exc:
            kind = DatabaseMisconfigured if refused_login(exc) else self.dialect.classify(exc)
            raise kind(describe(exc, self.url, kind)) from None

    def dispose(self, close: bool = True) -> None:
        """Drop pooled connections; after fork pass close=False (the parent still owns them)."""
        for engine in {self.engine, self.single}:
            engine.dispose(close=close)


def _watched(engine: Engine) -> bool:
    """Whether SQLAlchemy's execution on `engine` would tell anyone of a statement: the
    flags it checks itself before dispatching any event (set by a listener on this engine,
    on every Engine or Connection, or on the dialect: fault injection, tracing), and `echo`."""
    return bool(
        engine._has_events
        or Connection._has_events
        or engine.dialect._has_events
        or engine.logger.isEnabledFor(logging.INFO)
    )


def wrapped_as_sqlalchemy_would(
    engine: Engine, exc: Any, text: str | None, params: Mapping[str, Any] | None, pooled: Any
) -> DBAPIError:
    """The driver's `exc` (on `pooled`, else while connecting) as SQLAlchemy's execution
    reports it. A lost connection is invalidated with every older one of the pool (each is
    replaced at its next checkout), as SQLAlchemy does; `Pool._invalidate` is how it does."""
    dialect = engine.dialect
    lost = dialect.is_disconnect(exc, None if pooled is None else pooled.dbapi_connection, None)
    if lost and pooled is not None:
        engine.pool._invalidate(pooled, exc)
    driver_error = dialect.loaded_dbapi.Error
    wrapped = DBAPIError.instance(
        text,
        params,
        exc,
        driver_error,
        hide_parameters=engine.hide_parameters,
        connection_invalidated=lost,
        dialect=dialect,
    )
    assert isinstance(wrapped, DBAPIError)  # a driver error always is one
    return wrapped


def after_commit(conn: Connection | None, callback: Callable[[], object]) -> None:
    """Run `callback` when the transaction on `conn` commits (at once when `conn` has none
    open, or is None: a change jobsup committed itself); never when it rolls back. On
    jobsup's own connections (`Database.statement`, `Database.transaction`) that is once the
    COMMIT has returned.

    On the caller's connection it is SQLAlchemy's `commit` event, which Core only has just
    before the driver's COMMIT: a COMMIT that then fails still runs it (announcements and
    wakeups only; the row is the record). A callback registered inside a savepoint the
    caller rolls back is dropped with it. One set of listeners per connection serves every
    callback, so a long-lived connection does not collect listeners."""
    if conn is None or not conn.in_transaction():
        callback()
        return
    deferred = _own.get(conn)
    if deferred is not None:
        deferred.append(callback)
        return
    waiting = _after_commit.get(conn)
    if waiting is None:
        waiting = _after_commit[conn] = []
        event.listen(conn, "commit", _committed)
        event.listen(conn, "rollback", _rolled_back)
        event.listen(conn, "rollback_savepoint", _rolled_back_to)
    waiting.append((_savepoints(conn), callback))


@contextmanager
def committed_elsewhere(conn: Connection) -> Iterator[list[Callable[[], object]]]:
    """For a transaction on `conn` that its owner commits without SQLAlchemy (a framework's
    own connection, lent to jobsup: `jobsup.contrib.django`): the `after_commit` callbacks
    registered inside are collected in the list it yields instead of waiting for a commit
    event that never comes, for the owner to run once its COMMIT has returned."""
    deferred: list[Callable[[], object]] = []
    _own[conn] = deferred
    try:
        yield deferred
    finally:
        del _own[conn]


def now_or_after_commit(
    conn: Connection, dialect: Dialect, now: Callable[[], object], later: Callable[[], object]
) -> None:
    """`now()` where writers take turns (SQLite), else `later()` after the commit. For a
    transaction that ended the last member of a workflow or batch it can see: with one
    writer no sibling can be ending beside it, so it finishes the group itself; elsewhere a
    sibling's uncommitted end is invisible to it (skipped, not waited for), so the group is
    looked at again after the commit, waiting."""
    if dialect.one_writer:
        now()
    else:
        after_commit(conn, later)


def _savepoints(conn: Connection) -> frozenset[str]:
    """The names of the savepoints open on `conn`, innermost first. SQLAlchemy keeps the
    chain on each NestedTransaction (`_savepoint`, `_previous_nested`) and names a
    connection's savepoints uniquely, so a rollback to one names the callbacks it drops."""
    names = set()
    nested = conn.get_nested_transaction()
    while nested is not None:
        names.add(getattr(nested, "_savepoint", None))
        nested = getattr(nested, "_previous_nested", None)
    return frozenset(name for name in names if name)


# Callbacks waiting for each connection's commit (the connection's own, so they go with it),
# each with the savepoints open when it was registered.
_after_commit: weakref.WeakKeyDictionary[Connection, list[tuple[frozenset[str], Callable[[], object]]]] = (
    weakref.WeakKeyDictionary()
)


def runs_after_commit(conn: Connection) -> bool:
    """Whether `after_commit` on `conn` runs its callback once the COMMIT has returned
    (jobsup's own transactions, or none), rather than just before it (the caller's)."""
    return not conn.in_transaction() or conn in _own


# Callbacks waiting for the end of a jobsup transaction (see `_committing`).
_own: weakref.WeakKeyDictionary[Connection, list[Callable[[], object]]] = weakref.WeakKeyDictionary()


@contextmanager
def _committing(conn: Connection) -> Iterator[None]:
    """`conn.begin()`, then the `after_commit` callbacks registered inside, once the COMMIT
    returned."""
    deferred: list[Callable[[], object]] = []
    _own[conn] = deferred
    try:
        with conn.begin():
            yield
    finally:
        del _own[conn]
    for callback in deferred:
        _quietly(callback)


def _quietly(callback: Callable[[], object]) -> None:
    """After the COMMIT, a failing callback must not make the committed change look failed."""
    try:
        callback()
    except Exception:
        logging.getLogger("jobsup").exception("an after-commit callback failed")


def _committed(conn: Connection) -> None:
    callbacks, _after_commit[conn] = _after_commit.get(conn, []), []
    _before_commit.on = True
    try:
        for _, callback in callbacks:
            callback()
    finally:
        _before_commit.on = False


_before_commit = threading.local()  # a caller's COMMIT is about to be sent: see `before_callers_commit`


def before_callers_commit() -> bool:
    """Whether this thread runs `after_commit` callbacks of a caller's transaction, just
    before its COMMIT (what they announce is not yet visible to other connections)."""
    return bool(getattr(_before_commit, "on", False))


def _rolled_back(conn: Connection) -> None:
    _after_commit[conn] = []


def _rolled_back_to(conn: Connection, name: str, context: object) -> None:
    _after_commit[conn] = [(inside, callback) for inside, callback in _after_commit.get(conn, []) if name not in inside]


# What the servers say when they answer but refuse the login: a wrong URL, not an outage.
# PostgreSQL's come before a connection exists, so with no SQLSTATE: its (English) words.
_REFUSED_LOGIN_WORDS = re.compile(
    r"FATAL:\s+(database \"[^\"]*\" does not exist|role \"[^\"]*\" does not exist|password authentication failed)"
)
_REFUSED_LOGIN_NUMBERS = {1044, 1045, 1049, 1698}  # MariaDB: access denied (db, user), unknown database


def refused_login(exc: DBAPIError) -> bool:
    args = getattr(exc.orig, "args", ())
    if args and isinstance(args[0], int):
        return args[0] in _REFUSED_LOGIN_NUMBERS
    return _REFUSED_LOGIN_WORDS.search(str(exc.orig)) is not None


def describe(exc: DBAPIError, url: URL, kind: type[DatabaseError]) -> str:
    reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc)
    where = shown(url)
    if kind is DatabaseMisconfigured:
        return (
            f"the database {where} refuses jobsup: {reason}; correct the URL's database name, user or password "
            "(a database jobsup uses must exist first: createdb NAME, or CREATE DATABASE NAME)"
        )
    if kind is DatabaseBusy:
        return f"the database {where} takes no work for now: {reason}"
    if kind is DatabaseUnavailable and url.host:
        port = url.port or DEFAULT_PORTS.get(url.get_backend_name()) or "default"
        return f"cannot reach the database {where} (host {url.host}, port {port}): {reason}"
    if kind is DatabaseUnavailable:
        return f"cannot use the database {where}: {reason}"
    return f"{(kind.__doc__ or '').strip()} ({where}: {reason})"
