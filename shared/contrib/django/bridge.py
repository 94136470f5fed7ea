"""jobsup's enqueue on Django's own connection, so that a job enqueued inside
`transaction.atomic()` commits or rolls back with the view's writes.

`Client.enqueue(connection=...)` writes in a caller's SQLAlchemy transaction. Django's
transaction is not SQLAlchemy's, so the SQLAlchemy connection handed in here wraps Django's
DBAPI connection (`Lent`) without the power to end it: its commit, rollback and close do
nothing, and Django alone commits or rolls back, when its atomic block ends. The engine
that makes these connections keeps none (`NullPool`, no reset on return): each enqueue
wraps the connection Django has in this thread at that moment.

jobsup's own after-commit work on such a transaction (its log line, a SQLite worker's
wakeup; PostgreSQL's NOTIFY is a statement in the transaction and needs nothing) runs from
Django's `transaction.on_commit`, so a rollback, or a savepoint rolled back around the
enqueue, drops it with the row.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from jobsup.errors import DatabaseError
from jobsup.store.database import committed_elsewhere


class Lent:
    """Django's DBAPI connection as SQLAlchemy gets it: for running statements in Django's
    transaction, never for ending it or for changing how Django set the connection up."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def commit(self) -> None:
        """Django commits, when its atomic block ends."""

    def rollback(self) -> None:
        """Django rolls back. (SQLAlchemy calls this when the wrapping connection closes.)"""

    def close(self) -> None:
        """The connection is Django's to close."""

    def add_notice_handler(self, handler: Any) -> None:
        """SQLAlchemy's psycopg dialect adds a handler to each connection it makes; on one
        it is handed again at every enqueue they would pile up. Django's notices stay
        Django's."""

    def create_function(self, *args: Any, **kwargs: Any) -> None:
        """SQLAlchemy's SQLite dialect defines REGEXP and floor on each connection; Django
        defines its own REGEXP, which must stay (jobsup's statements use neither)."""


class Lender:
    """Lends Django's connection `alias` to jobsup's enqueue while a transaction is open on
    it. `url` is jobsup's database URL: the same database, as the backend checked."""

    def __init__(self, alias: str, url: URL) -> None:
        self.alias = alias
        self.url = url
        self._engine: Engine | None = None

    @contextmanager
    def lend(self) -> Iterator[Connection | None]:
        """Django's connection as a SQLAlchemy one, inside an atomic block on it; else None
        (Django autocommits: jobsup's own connection commits the job at once, which is the
        same thing)."""
        from django.db import connections, transaction
        from django.db.transaction import TransactionManagementError

        django = connections[self.alias]
        if not django.in_atomic_block:
            if not django.get_autocommit():
                raise TransactionManagementError(
                    f"an enqueue on Django's database {self.alias!r} with autocommit off and no atomic block: "
                    "jobsup cannot tell when that transaction commits; enqueue inside transaction.atomic()"
                )
            yield None
            return
        django.ensure_connection()
        conn = self.engine.connect()
        try:
            with committed_elsewhere(conn) as callbacks:
                yield conn
        except (DatabaseError, SQLAlchemyError):
            # PostgreSQL aborts the whole transaction on an error: the atomic block must not
            # go on (or commit) as if jobsup's statement had not failed in it.
            transaction.set_rollback(True, using=self.alias)
            raise
        finally:
            conn.close()  # its "rollback" reaches `Lent.rollback`: Django's transaction goes on
        for callback in callbacks:
            transaction.on_commit(functools.partial(_quietly, callback), using=self.alias)

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            engine = create_engine(self.url, creator=self._current, poolclass=NullPool, pool_reset_on_return=None)
            if hasattr(engine.dialect, "use_native_hstore"):
                # PostgreSQL: SQLAlchemy looks the hstore type up with psycopg's TypeInfo,
                # which takes psycopg's own connection class only; jobsup has no hstore.
                engine.dialect.use_native_hstore = False
            self._engine = engine
        return self._engine

    def _current(self) -> Lent:
        """The connection Django holds in this thread (`connections` is thread-local)."""
        from django.db import connections

        return Lent(connections[self.alias].connection)


def _quietly(callback: Callable[[], object]) -> None:
    """Django's commit has happened: a failing announcement must not raise into the view."""
    try:
        callback()
    except Exception:
        logging.getLogger("jobsup").exception("an after-commit callback failed")
