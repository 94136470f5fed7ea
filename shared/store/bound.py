"""The store on one connection handed over by SQLAlchemy's asyncio engine.

`jobsup.AsyncClient` runs the same store code as `jobsup.Client` (the same transitions, the
same statements) inside `AsyncConnection.run_sync`, which lends that code a synchronous
`Connection` driven by the async driver. `BoundDatabase` is a `Database` whose three kinds
of connection (see `jobsup.store.database`) are all that lent connection, each set up as its
kind needs: a read ends its implicit transaction, a statement or a transaction is one
`begin()`, and after-commit callbacks run once the COMMIT has returned.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from sqlalchemy import Connection
from sqlalchemy.engine import URL

from jobsup.store.database import Database, _committing
from jobsup.store.dialects import Dialect
from jobsup.store.faults import OPERATION

# The connection of the run_sync call under way. A context variable, so asyncio tasks that
# interleave at the driver's awaits each see their own (SQLAlchemy runs run_sync's greenlet
# in the calling task's context).
_lent: ContextVar[Connection] = ContextVar("jobsup_lent_connection")


class BoundDatabase(Database):
    def __init__(self, url: URL, dialect: Dialect) -> None:  # no engines of its own
        self.url, self.dialect = url, dialect

    @contextmanager
    def lent(self, conn: Connection) -> Iterator[None]:
        """Make `conn` this database's connection for the code run inside."""
        token = _lent.set(conn)
        try:
            yield
        finally:
            _lent.reset(token)

    @contextmanager
    def read(self, operation: str = "read") -> Iterator[Connection]:
        conn = _lent.get()
        began = not conn.in_transaction()  # else the caller's transaction: theirs to end
        with self.errors():
            if began:
                conn.execution_options(**self.dialect.read_options, **{OPERATION: operation})
            try:
                yield conn
            finally:
                if began and conn.in_transaction():
                    conn.rollback()  # the read's own implicit transaction

    @contextmanager
    def statement(self, operation: str = "write") -> Iterator[Connection]:
        with self.transaction(operation) as conn:
            yield conn

    @contextmanager
    def transaction(self, operation: str = "write") -> Iterator[Connection]:
        conn = _lent.get()
        with self.errors():
            conn.execution_options(**self.dialect.transaction_options, **{OPERATION: operation})
            with _committing(conn):
                yield conn

    def dispose(self, close: bool = True) -> None:
        """Nothing to drop: the connections are the asyncio engine's."""
