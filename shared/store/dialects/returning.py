"""UPDATE ... RETURNING for a database that has none (MariaDB: INSERT and DELETE have it,
UPDATE does not), as three statements inside the caller's transaction:

1. ``SELECT key FROM t WHERE <the update's WHERE> ORDER BY key FOR UPDATE``: a locking read
   sees the newest committed rows (not the transaction's snapshot), waits for a transaction
   that is changing one to end and judges what it left, and locks the rows that match until
   this transaction ends, in key order (so two of these lock shared rows in the same order).
2. ``UPDATE t SET ... WHERE <the WHERE> AND key IN (those keys)``: the same change, limited
   to the locked rows; the WHERE is checked again, so a row that no longer matches is never
   changed.
3. ``SELECT <the RETURNING columns> FROM t WHERE key IN (those keys) ORDER BY key``: the new
   values, as RETURNING gives them, in key order.

Guarantees: a compare-and-set still. No other transaction can change a locked row between
1 and 2, so every row 1 found is changed by 2 and reported by 3, and a row another
transaction changed first is judged on its new values in 1 (not matched, not changed, not
reported). Should 2 change fewer rows than 1 locked (a WHERE that reads rows the lock does
not cover, through a subquery), the emulation cannot tell which were changed and raises
`DatabaseError` rather than guess; the transaction then rolls back.

Cost: three round trips instead of one when rows match, one when none does; and it needs a
transaction (`single` is False), so a caller that would have run the statement alone in
autocommit pays BEGIN and COMMIT too; on a connection that autocommits each statement it
raises `DatabaseError` instead of running. Locks: step 1 locks the rows the WHERE matches
through the index it reads (under READ COMMITTED, only the matching rows stay locked); a
plain UPDATE would lock much the same rows, but not necessarily in key order, and the rows
are locked from step 1 rather than from the moment the UPDATE reaches them.

Limits, checked when the statement is prepared: one table (no multi-table UPDATE, and
RETURNING names that table's columns) with a one-column primary key, and a WHERE. The
database must count matched rows, not changed ones (SQLAlchemy's MySQL dialects ask for
CLIENT_FOUND_ROWS). MariaDB (10.3.2 and later) accepts a WHERE with a subquery on the
updated table itself; MySQL refuses that shape in step 2 (error 1093), and no store
statement has one.
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
