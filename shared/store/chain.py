"""A compare-and-set and the write that depends on it (the ended attempt's row), prepared
once and run as one unit.

`Fused` is one statement: PostgreSQL's data-modifying CTEs make both writes atomic, so
outside a transaction it needs no BEGIN and COMMIT, and the second reads the first's
RETURNING. `Sequential` is two statements in the caller's transaction; the second reads the
changed rows by their ids, in the expanding `p_changed`. Each
dialect picks the kind it can do (`Dialect.chain`). Run alone (one parameter set, no steps),
a `Fused` statement runs on the driver connection where nothing watches the statements
(`Database.driver_run`), as the claim does: it is a worker's settle.

Every compare-and-set that reads back what it changed (an UPDATE with RETURNING) runs
through a `Returning`, built once per statement by `Dialect.returning`: where the database
has UPDATE ... RETURNING it is that one statement (`Native`), unchanged; where it has not
(MariaDB) it is emulated inside the caller's transaction
(`jobsup.store.dialects.returning`), and `single` is False so a caller that would run it
alone on a `statement()` connection takes a `transaction()` instead.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Connection, Insert, Row, Select, Update, bindparam, select

if TYPE_CHECKING:
    from jobsup.store.dialects import Connections
    from jobsup.store.dialects.drivertext import DriverText
    from jobsup.store.dialects.sent import Numbered, Sent


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
    def run(self, conn: Connection, params: Mapping[str, Any]) -> Sequence[Row[Any]]:
        """Run both writes on `conn`; return the compare-and-set's rows."""

    def compile_ahead(self, *, sent: bool = False) -> None:
        """Compile now what its first `run_alone` would (`Statements.compile_ahead`), and with
        `sent` what its first `send_alone` would."""

    def run_alone(self, db: Connections, params: Mapping[str, Any], operation: str) -> Sequence[Any]:
        """Run both writes as a unit of their own (no steps with them); return the
        compare-and-set's rows, each with its id and status first (read by position or by
        column name; a dialect may return only those two)."""

    def send_alone(self, db: Connections, params: Mapping[str, Any], operation: str) -> Sent | None:
        """`run_alone` sent now, its rows (the id and the status only) read later from the
        `Sent`; None where the chain cannot be sent so (`jobsup.store.dialects.sent`)."""


@dataclass(frozen=True)
class Fused:
    statement: Select[Any]
    # The same writes returning each changed row's id and status only: all that a caller of
    # `run_alone` reads (the other columns are the steps'). A worker's settle of 100 jobs read
    # twelve columns a row, and PostgreSQL wrote them out, for nothing.
    alone: Select[Any]

    @classmethod
    def of(cls, first: Update, then: Callable[[Any], Insert], reads: Sequence[Any] = ()) -> Fused:
        """`then` reads the changed rows in the columns of `first`'s RETURNING and of
        `reads`. The caller of `run` gets back only the RETURNING's (every column returned is
        read and converted in Python for every row), of `run_alone` only the id and the
        status, which `first` returns first."""
        changed = first.returning(*reads).cte("changed")
        returned = list(changed.c)[: len(first.exported_columns)]  # `reads` come after
        if [column.name for column in returned[:2]] != ["id", "status"]:
            raise ValueError("Fused: the compare-and-set must return the id and the status first")
        followed = then(changed).cte("followed")
        return cls(select(*returned).add_cte(followed), select(*returned[:2]).add_cte(followed))

    def run(self, conn: Connection, params: Mapping[str, Any]) -> Sequence[Row[Any]]:
        return conn.execute(self.statement, params).all()

    def run_alone(self, db: Connections, params: Mapping[str, Any], operation: str) -> Sequence[Any]:
        # A worker's batch settle: SQLAlchemy's execution of this many-CTE statement (its
        # cache key walks the whole tree) was most of the settle's Python.
        return self.driver_text.run_alone(db, operation, params, self.named_row)

    def send_alone(self, db: Connections, params: Mapping[str, Any], operation: str) -> Sent | None:
        from jobsup.store.dialects.sent import send

        return send(db, operation, self.driver_text, self.numbered, params)  # type: ignore[arg-type]

    def compile_ahead(self, *, sent: bool = False) -> None:
        self.driver_text, self.named_row  # noqa: B018 (made and kept: cached properties)
        if sent:
            self.numbered  # noqa: B018 (1.3 ms of compiling at a worker's first write sent behind its claim)

    @cached_property
    def numbered(self) -> Numbered:
        return self.driver_text.numbered()

    @cached_property
    def driver_text(self) -> DriverText:
        # Imported here: the dialects package imports this module (`Dialect.chain`).
        from jobsup.store.dialects.drivertext import DriverText

        return DriverText.of(self.alone)

    @cached_property
    def named_row(self) -> Callable[[Sequence[Any]], Any]:
        """A driver row named as SQLAlchemy's `Row` names it (the callers read `row.status`)."""
        named: Any = namedtuple("Row", self.alone.selected_columns.keys())  # type: ignore[misc]
        # What `named._make` does, without its Python frame (a row per job of a settle) and
        # its count of the values: the rows are this statement's own, its columns each.
        return partial(tuple.__new__, named)


@dataclass(frozen=True)
class Sequential:
    first: Returning
    then: Insert

    @classmethod
    def of(
        cls, first: Update, returning: Returning, then: Callable[[Any], Insert], reads: Sequence[Any] = ()
    ) -> Sequential:
        """`returning`: `first` as the dialect runs it. `then` reads the rows `first` changed,
        as it left them, in the columns of its RETURNING and `reads` (what `Fused` hands over)."""
        ids = first.table.c.id.in_(bindparam("p_changed", expanding=True))
        changed = select(*first.exported_columns, *reads).where(ids).subquery("changed")
        return cls(returning, then(changed))

    def run(self, conn: Connection, params: Mapping[str, Any]) -> Sequence[Row[Any]]:
        rows = self.first.run(conn, params)
        if rows:
            conn.execute(self.then, {**params, "p_changed": [row[0] for row in rows]})
        return rows

    def compile_ahead(self, *, sent: bool = False) -> None:
        return None  # SQLAlchemy compiles it, and caches that on each engine; never sent

    def send_alone(self, db: Connections, params: Mapping[str, Any], operation: str) -> Sent | None:
        return None  # two statements in a transaction: run in line

    def run_alone(self, db: Connections, params: Mapping[str, Any], operation: str) -> Sequence[Any]:
        with db.transaction(operation) as conn:
            return self.run(conn, params)
