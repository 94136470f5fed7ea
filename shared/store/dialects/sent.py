"""A statement sent now and its reply read later, on a pooled connection set aside meanwhile:
a worker's settle of a large claim, written while its next claim's jobs run
(`jobsup.worker.settler`, "behind").

`Database.driver_run` waits for the reply before it returns, and a worker that waits for its
settle's commit (the flush of the write-ahead log: a quarter of its backend's time at claim
batch 100) leaves its core idle meanwhile. Here libpq's asynchronous calls send the statement
(``PQsendQueryPrepared``) and return at once; `Sent.rows` waits for the reply and reads it,
and only then does the connection go back to the pool. psycopg's cursor has no such call (its
pipeline mode waits for the results at each sync), so this talks to psycopg's libpq wrapper
(`psycopg.pq`) directly, with psycopg's own adaptation of the values and of the rows.

The statement is prepared on the server once per connection under a name of this module's
(``jobsup_sent_N``; psycopg names its own ``_pg3_N``, so the two never meet), as
`DriverText` has psycopg prepare the others. Hence only where a statement may run on the
driver (nothing watches the statements) and no pooler answered the connection (it would lend
the session, and its prepared statements, to others): elsewhere `send` returns None, and the
caller runs the statement in line.
"""

from __future__ import annotations

import select
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from psycopg import abc, errors, pq
from psycopg.adapt import PyFormat, Transformer

from jobsup.errors import DatabaseUnavailable
from jobsup.store.dialects.pooler import POOLED
from jobsup.store.faults import OPERATIONS

if TYPE_CHECKING:
    from jobsup.store.database import Database
    from jobsup.store.dialects.drivertext import DriverText

Numbered = tuple[str, tuple[str, ...]]  # a statement's text with $1, $2... and its parameters' names in that order
PREPARED = "jobsup_sent"  # in a pooled connection's `info`: its statements prepared here, by text and types


class Sent:
    """One statement sent on a connection of the pool, its reply not read yet."""

    def __init__(
        self, db: Database, operation: str, pooled: Any, transformer: abc.Transformer, text: str, params: Any
    ) -> None:
        self.db, self.operation, self.pooled, self.transformer = db, operation, pooled, transformer
        self.text, self.params = text, params  # for the errors, as `driver_run` reports them

    def rows(self, deadline: float | None = None) -> list[tuple[Any, ...]]:
        """Wait for the reply (until `deadline`, on the monotonic clock, if given); its rows,
        each a tuple. An error is raised as `driver_run` raises it: the statement's own, a
        lost connection's, or `DatabaseUnavailable` once the deadline has passed; after any
        of them whether the statement committed is unknown. The connection goes back to the
        pool either way; after an error, closed."""
        from jobsup.store.database import wrapped_as_sqlalchemy_would

        engine, pooled = self.db.single, self.pooled
        pgconn = pooled.driver_connection.pgconn
        with self.db.errors():
            try:
                while True:
                    pgconn.consume_input()
                    if not pgconn.is_busy():
                        break
                    wait = None if deadline is None else deadline - time.monotonic()
                    if wait is not None and wait <= 0:
                        raise DatabaseUnavailable(f"{self.operation}: no reply in the time given (perhaps written)")
                    select.select([pgconn.socket], [], [], wait)  # waits without the interpreter's lock
                results = []
                while (result := pgconn.get_result()) is not None:
                    results.append(result)
                if len(results) != 1:
                    raise errors.InterfaceError(f"{self.operation}: {len(results)} results for one statement")
                result = results[0]
                if result.status != pq.ExecStatus.TUPLES_OK:
                    raise errors.error_from_result(result, encoding=self.transformer.encoding)
                self.transformer.set_pgresult(result)
                rows: list[tuple[Any, ...]] = self.transformer.load_rows(0, result.ntuples, tuple)
                return rows
            except engine.dialect.loaded_dbapi.Error as exc:
                wrapped = wrapped_as_sqlalchemy_would(engine, exc, self.text, self.params, pooled)
                _invalidate(pooled, exc)  # whatever the error: the state of the session is ours alone to know
                raise wrapped from exc
            except BaseException as exc:  # interrupted, or no reply in time: where the server is, unknown
                _invalidate(pooled, exc)
                raise
            finally:
                pooled.close()


def send(db: Database, operation: str, text: DriverText, numbered: Numbered, params: Mapping[str, Any]) -> Sent | None:
    """Send `text` (as `numbered`: `DriverText.numbered`) with `params` on a connection of
    `db`'s pool, set aside until its `Sent.rows` is read; None where it cannot be sent so (see
    the module), and then nothing was sent."""
    from jobsup.store.database import wrapped_as_sqlalchemy_would

    assert operation in OPERATIONS, f"add {operation!r} to faults.OPERATIONS"
    if not db.may_run_on_driver():
        return None
    engine = db.single
    driver_error = engine.dialect.loaded_dbapi.Error
    positional, names = numbered
    _, bound = text.bind(params)  # before a connection is taken: a bad value leaves none out
    with db.errors():
        try:
            pooled = engine.raw_connection()
        except driver_error as exc:
            raise wrapped_as_sqlalchemy_would(engine, exc, None, None, None) from exc
        if pooled.info.get(POOLED):
            pooled.close()
            return None
        try:
            connection: Any = pooled.driver_connection
            transformer = Transformer(connection)
            values = transformer.dump_sequence([bound[name] for name in names], [PyFormat.AUTO] * len(names))
            pgconn = connection.pgconn
            # Per list of types: psycopg sends a list of small ints as int2[], of large ones as int8[].
            prepared: dict[tuple[str, tuple[int, ...]], bytes] = pooled.info.setdefault(PREPARED, {})
            types = transformer.types or ()
            key = (positional, tuple(types))
            name = prepared.get(key)
            if name is None:
                name = f"{PREPARED}_{len(prepared)}".encode()
                result = pgconn.prepare(name, positional.encode(transformer.encoding), types)
                if result.status != pq.ExecStatus.COMMAND_OK:
                    raise errors.error_from_result(result, encoding=transformer.encoding)
                prepared[key] = name
            pgconn.send_query_prepared(name, values, transformer.formats)
            while pgconn.flush():  # psycopg's connections are nonblocking: the rest of what was sent
                select.select([], [pgconn.socket], [])
        except driver_error as exc:
            wrapped = wrapped_as_sqlalchemy_would(engine, exc, positional, bound, pooled)
            _invalidate(pooled, exc)
            pooled.close()
            raise wrapped from exc
        except BaseException as exc:
            _invalidate(pooled, exc)
            pooled.close()
            raise
    return Sent(db, operation, pooled, transformer, positional, bound)


def _invalidate(pooled: Any, exc: BaseException) -> None:
    if pooled.is_valid:  # a lost connection: the pool has invalidated it already, with the older ones
        pooled.invalidate(exc)
