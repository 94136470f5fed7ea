"""A Core statement compiled once to psycopg's own text, for a statement run so often that
SQLAlchemy's work around each execution counts.

Executing a compiled Core statement makes SQLAlchemy look its compiled form up in the cache,
build the parameters from the statement's binds and set up the result's typed columns. Run as
its text, a single enqueue on PostgreSQL took 296 us of the caller's CPU instead of 347
(medians of eight interleaved rounds of 1,500, 2026-12-06). A plain job enqueued alone, a
claim without claim steps and a settle without steps (`chain.Fused.run_alone`) run their text
with `Database.driver_run`, on the driver connection, where nothing watches the database's
statements (`DriverText.run_alone` decides, for a Select). Any other (in a transaction, on
the caller's connection, or while something watches) runs it with `Connection.exec_driver_sql`,
or runs the Core statement, so the connection's execution options, its cursor events (fault
injection) and the translation of driver errors are those of any other statement.
A statement run on the driver is prepared on the server at its first run, not its fifth
(psycopg's ``prepare_threshold``): a worker runs its claim and settle thousands of times on
one connection, and each run before it is prepared, and PostgreSQL's first five runs of a
prepared statement, are planned for their values; a settle so planned was a sequential scan
of a table of tens of thousands of rows (2.5-3 ms, against 1.2-1.3 once generic), ten times
on each new connection, five now. Behind a pooler, where psycopg's ``prepare_threshold`` is
None (`jobsup.store.dialects.pooler`), nothing is prepared whatever the call asks.
What SQLAlchemy's execution did with the values is done here too: the statement's own bound
literals are added, and each parameter goes through its type's bind processing as the
dialect adapts it (a `UTCDateTime` refuses a naive datetime, as a `StatementError`, and is
sent in UTC). Rows read with `rows` (a Select's) get each column's result processing as
SQLAlchemy's result applies it, chosen by the type the driver reports for the column (a
`UTCDateTime` comes back in UTC whatever the session's time zone; a NULL stays None).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import StatementError
from sqlalchemy.sql.expression import Executable
from sqlalchemy.types import TypeEngine

if TYPE_CHECKING:
    from jobsup.store.dialects import Connections


@dataclass(frozen=True, slots=True)
class DriverText:
    text: str
    constants: dict[str, Any]  # values the statement binds itself (a literal 0, ...)
    processors: dict[str, Callable[[Any], Any]]  # per parameter name, its type's bind processing
    returned: tuple[TypeEngine[Any], ...] = ()  # the types of the columns a Select returns, in order
    dialect: Any = field(default=None, compare=False, repr=False)
    statement: Any = field(default=None, compare=False, repr=False)  # what it was compiled from
    # Per shape of the driver's reply (its columns' type codes): the columns that have result
    # processing, by position, with it.
    readers: dict[tuple[Any, ...], list[tuple[int, Callable[[Any], Any]]]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @classmethod
    def of(cls, statement: Executable) -> DriverText:
        from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

        dialect = PGDialect_psycopg()  # type: ignore[no-untyped-call]
        compiled = statement.compile(dialect=dialect)  # type: ignore[attr-defined]
        binds = compiled.binds
        if any(bind.expanding or bind.callable is not None for bind in binds.values()):
            raise ValueError("DriverText: expanding or callable parameters need SQLAlchemy's execution")
        processors = {}
        for name, bind in binds.items():
            if name not in compiled.params:  # an anonymous bind is listed under its rendered name too
                continue
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)  # what SQLAlchemy applies
            if process is not None:
                processors[name] = process
        constants = {name: value for name, value in compiled.params.items() if not binds[name].required}
        returned = tuple(column.type for column in getattr(statement, "selected_columns", ()))
        return cls(str(compiled), constants, processors, returned, dialect, statement)

    def numbered(self) -> tuple[str, tuple[str, ...]]:
        """The statement's text with libpq's numbered parameters ($1, $2...), and the names of
        its parameters in that order (`jobsup.store.dialects.sent`, which sends it without psycopg's cursor)."""
        from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

        compiled = self.statement.compile(dialect=PGDialect_psycopg(paramstyle="numeric_dollar"))  # type: ignore[no-untyped-call]
        return str(compiled), tuple(compiled.positiontup)

    def bind(self, params: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """The text and the driver's parameters for `params` (every parameter the statement
        names but binds itself)."""
        bound = {**self.constants, **params}
        for name, process in self.processors.items():
            value = bound.get(name)
            if value is not None:
                try:
                    bound[name] = process(value)
                except Exception as exc:  # as SQLAlchemy's own execution reports it
                    kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
                    raise StatementError(f"({kind}) {exc}", self.text, params, exc) from exc
        return self.text, bound

    def run_alone(
        self, db: Connections, operation: str, params: Mapping[str, Any], make: Callable[[Any], Any] | None = None
    ) -> Sequence[Any]:
        """The rows of this Select run as a statement of its own: its text on the driver
        connection where nothing watches the statements, else its Core statement through
        SQLAlchemy on `db.statement()` (whose rows are named). `make` builds each driver row
        (named, for callers that read a column by name); without it, rows are read by position."""
        if db.may_run_on_driver():
            rows = db.driver_run(operation, *self.bind(params), self.rows)
            return rows if make is None else list(map(make, rows))
        with db.statement(operation) as conn:
            return conn.execute(self.statement, params).all()

    def rows(self, cursor: Any) -> list[tuple[Any, ...]]:
        """Every row of `cursor` (which ran this text), each value processed as its column's
        type makes SQLAlchemy's result do (a `UTCDateTime` in UTC)."""
        fetched: list[tuple[Any, ...]] = cursor.fetchall()
        # Its columns' type codes from the result itself: `description` makes an object per
        # column at every call (11.6 µs for a claim's fifteen, this 0.7).
        result = cursor.pgresult
        shape = () if result is None else tuple(map(result.ftype, range(result.nfields)))
        readers = self.readers.get(shape)
        if readers is None:
            if len(shape) != len(self.returned):
                raise ValueError(f"DriverText: {len(shape)} columns returned, {len(self.returned)} expected")
            processors = [
                kind.dialect_impl(self.dialect).result_processor(self.dialect, code)
                for kind, code in zip(self.returned, shape, strict=True)
            ]
            readers = self.readers[shape] = [(at, read) for at, read in enumerate(processors) if read is not None]
        if not readers:
            return fetched  # psycopg's fetchall() is a list of tuples already (a claim's, a settle's)
        # Only the columns that have processing: a pass over every value took 3.9 µs a row of a
        # claim of 100, this 1.6 (2026-12-06; the claim's due time is no longer processed).
        processed = []
        for row in fetched:
            values = list(row)
            for at, read in readers:
                if values[at] is not None:
                    values[at] = read(values[at])
            processed.append(tuple(values))
        return processed
