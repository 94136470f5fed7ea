"""The store on one connection handed over by SQLAlchemy's asyncio engine.

`jobsup.AsyncClient` runs the same store code as `jobsup.Client` (the same transitions, the
same statements) inside `AsyncConnection.run_sync`, which lends that code a synchronous
`Connection` driven by the async driver. `BoundDatabase` is a `Database` whose three kinds
of connection (see `jobsup.store.database`) are all that lent connection, each set up as its
kind needs: a read ends its implicit transaction, a statement or a transaction is one
`begin()`, and after-commit callbacks run once the COMMIT has returned. When the lent
connection is the caller's own (``connection=``), jobsup's own reads (the schema check, the
job definitions) take a connection of their own instead: they must neither change the
caller's connection nor join, or abort, the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL

from jobsup.store.database import Database, _committing
from jobsup.store.dialects import Dialect
from jobsup.store.faults import OPERATION, OPERATIONS

# The connection of the run_sync call under way. A context variable, so asyncio tasks that
# interleave at the driver's awaits each see their own (SQLAlchemy runs run_sync's greenlet
# in the calling task's context).
_lent: ContextVar[tuple[Connection, bool]] = ContextVar("jobsup_lent_connection")  # (it, the caller's)


class BoundDatabase(Database):
    def __init__(self, url: URL, dialect: Dialect, engine: Engine) -> None:
        # `engine`: the asyncio engine's sync face, usable inside run_sync.
        self.url, self.dialect, self.engine = url, dialect, engine

    def may_run_on_driver(self) -> bool:
        return False  # `driver_run` takes a pooled connection: here the one is lent, inside run_sync

    @contextmanager
    def lent(self, conn: Connection, *, theirs: bool) -> Iterator[None]:
        """Make `conn` this database's connection for the code run inside; `theirs`: the
        caller's own connection."""
        token = _lent.set((conn, theirs))
        try:
            yield
        finally:
            _lent.reset(token)

    @contextmanager
    def read(self, operation: str = "read") -> Iterator[Connection]:
        assert operation in OPERATIONS, f"add {operation!r} to faults.OPERATIONS"
        conn, theirs = _lent.get()
        with self.errors():
            if theirs:
                with self.engine.connect() as own:
                    yield own.execution_options(**self.dialect.read_options, **{OPERATION: operation})
                return
            conn.execution_options(**self.dialect.read_options, **{OPERATION: operation})
            try:
                yield conn
            finally:
                if conn.in_transaction():
                    conn.rollback()  # the read's implicit transaction

    @contextmanager
    def statement(self, operation: str = "write") -> Iterator[Connection]:
        with self.transaction(operation) as conn:
            yield conn

    @contextmanager
    def transaction(self, operation: str = "write") -> Iterator[Connection]:
        assert operation in OPERATIONS, f"add {operation!r} to faults.OPERATIONS"
        conn, theirs = _lent.get()
        assert not theirs, "a write given connection= runs on it directly, in the caller's transaction"
        with self.errors():
            conn.execution_options(**self.dialect.transaction_options, **{OPERATION: operation})
            with _committing(conn):
                yield conn

    def dispose(self, close: bool = True) -> None:
        """Nothing to drop: the connections are the asyncio engine's."""
