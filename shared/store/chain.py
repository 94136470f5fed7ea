"""A compare-and-set and the write that depends on it (closing the job's open attempt row),
prepared once and run as one unit.

`Fused` is one statement: PostgreSQL's data-modifying CTEs make both writes atomic, so
outside a transaction it needs no BEGIN and COMMIT. `Sequential` is two statements in the
caller's transaction; the second finds the changed ids in the expanding `p_changed`. Each
dialect picks the kind it can do (`Dialect.chain`); a transition whose second statement must
see rows committed while the first waited for a lock uses `Sequential` on every dialect
(a fused statement reads them from its first snapshot and would miss them).

Every compare-and-set that reads back what it changed (an UPDATE with RETURNING) runs
through a `Returning`, built once per statement by `Dialect.returning`: where the database
has UPDATE ... RETURNING it is that one statement (`Native`), unchanged; where it has not
(MariaDB) it is emulated inside the caller's transaction
(`jobsup.store.dialects.returning`), and `single` is False so a caller that would run it
alone on a `statement()` connection takes a `transaction()` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import Connection, Row, Select, Update, bindparam, select


class Returning(Protocol):
    """An UPDATE ... RETURNING prepared once: the rows it changed, their new values."""

    single: bool  # one statement: atomic without a transaction

    def run(self, conn: Connection, params: Mapping[str, Any]) -> Sequence[Row[Any]]:
        """Run the update on `conn`; return the RETURNING columns of the rows it changed."""


@dataclass(frozen=True)
class Native:
    """The database's own UPDATE ... RETURNING: one statement, one round trip."""

    statement: Update
    single = True

    def run(self, conn: Connection, params: Mapping[str, Any]) -> Sequence[Row[Any]]:
        return conn.execute(self.statement, params).all()


class Chain(Protocol):
    single: bool  # one statement: atomic without a transaction

    def run(self, conn: Connection, params: Mapping[str, Any]) -> Sequence[Row[Any]]:
        """Run both writes on `conn`; return the compare-and-set's rows."""


@dataclass(frozen=True)
class Fused:
    statement: Select[Any]
    single = True

    @classmethod
    def of(cls, first: Update, then: Callable[[Any], Update]) -> Fused:
        changed = first.cte("changed")
        id_column = next(iter(changed.c))
        return cls(select(*changed.c).add_cte(then(select(id_column)).cte("followed")))

    def run(self, conn: Connection, params: Mapping[str, Any]) -> Sequence[Row[Any]]:
        return conn.execute(self.statement, params).all()


@dataclass(frozen=True)
class Sequential:
    first: Returning
    then: Update
    single = False

    @classmethod
    def of(cls, first: Returning, then: Callable[[Any], Update]) -> Sequential:
        return cls(first, then(bindparam("p_changed", expanding=True)))

    def run(self, conn: Connection, params: Mapping[str, Any]) -> Sequence[Row[Any]]:
        rows = self.first.run(conn, params)
        if rows:
            conn.execute(self.then, {**params, "p_changed": [row[0] for row in rows]})
        return rows
