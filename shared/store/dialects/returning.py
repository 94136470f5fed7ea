"""UPDATE ... RETURNING for a database that has none (MariaDB), as three statements in the
caller's transaction: a locking SELECT of the keys, the UPDATE of those keys under the same
WHERE, a SELECT of the new values. Why it is still a compare-and-set, its cost and its
limits: docs/internals.md, "UPDATE ... RETURNING emulated".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, Select, Table, Update, bindparam, select

from jobsup.errors import DatabaseError
from jobsup.store.chain import Returning

KEYS = "p_returning_keys"  # the locked rows' keys, bound to steps 2 and 3


@dataclass(frozen=True)
class LockedReturning:
    """One UPDATE ... RETURNING prepared as its three statements (see the module's docstring)."""

    lock: Select[Any]
    update: Update
    read: Select[Any]
    single = False

    @classmethod
    def of(cls, stmt: Update) -> LockedReturning:
        table, where = stmt.table, stmt.whereclause
        if not isinstance(table, Table) or len(table.primary_key.columns) != 1:
            raise ValueError(f"emulated UPDATE ... RETURNING needs a table with a one-column key: {stmt}")
        if where is None:
            raise ValueError(f"emulated UPDATE ... RETURNING needs a WHERE: {stmt}")
        (key,) = table.primary_key.columns
        keys = key.in_(bindparam(KEYS, expanding=True))
        lock = select(key).where(where).order_by(key).with_for_update()
        read = select(*(d["expr"] for d in stmt.returning_column_descriptions)).where(keys).order_by(key)
        for shown in (lock, read):
            if shown.get_final_froms() != [table]:
                raise ValueError(f"emulated UPDATE ... RETURNING updates and returns one table's rows: {stmt}")
        update = stmt.where(keys)
        # SQLAlchemy has no public way to drop a RETURNING; `update` is a fresh copy.
        update._returning = ()
        return cls(lock, update, read)

    def run(self, conn: Connection, params: Mapping[str, Any]) -> Sequence[Row[Any]]:
        if _autocommits(conn):
            # Each statement would be its own transaction: step 1's locks would end before
            # step 2, and the compare-and-set would be a check-then-act.
            raise DatabaseError(
                f"emulated UPDATE ... RETURNING on {self.update.table} needs a transaction, and this "
                "connection autocommits each statement: run it on a transaction's connection"
            )
        keys = list(conn.execute(self.lock, params).scalars())
        if not keys:
            return []
        bound = {**params, KEYS: keys}
        changed = conn.execute(self.update, bound).rowcount
        if changed == 0:
            return []
        if changed != len(keys):
            raise DatabaseError(
                f"emulated UPDATE ... RETURNING locked {len(keys)} rows of {self.update.table} but changed "
                f"{changed}: its WHERE reads rows the lock does not cover (the transaction must roll back)"
            )
        return conn.execute(self.read, bound).all()


def _autocommits(conn: Connection) -> bool:
    # PyMySQL answers from the server status of the last reply (no round trip); a driver
    # without `get_autocommit` is taken at its word that SQLAlchemy began a transaction.
    asks = getattr(conn.connection.dbapi_connection, "get_autocommit", None)
    return bool(asks()) if callable(asks) else False


class EmulatedReturning:
    """A dialect's `returning` for a database without UPDATE ... RETURNING."""

    def returning(self, stmt: Update) -> Returning:
        return LockedReturning.of(stmt)
