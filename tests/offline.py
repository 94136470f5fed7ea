"""SQL Server without a server: the store's transitions run against a recording connection
that compiles every statement with SQLAlchemy's real SQL Server dialect (pyodbc flavour),
with its parameters expanded as the driver would receive them, and keeps the SQL. An INSERT
... RETURNING returns one id per row it was given and an UPDATE ... RETURNING one row (job 7,
attempt 2), and an UPDATE without RETURNING says it changed one row, so the code that
follows a compare-and-set runs to the end; a SELECT returns the rows a test queued with
`OfflineDatabase.answer`, else nothing.

This is a test double for the one database that cannot run here, not for any that can.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Insert, Select, Update
from sqlalchemy.dialects.mssql import pyodbc
from sqlalchemy.engine import make_url

from jobsup.store.dialects.mssql import SQLServerDialect

MSSQL = pyodbc.dialect()  # the dialect class only; the driver is not imported


class Result:
    def __init__(self, rows: list[Any], rowcount: int | None = None) -> None:
        self.rows = rows
        self.rowcount = len(rows) if rowcount is None else rowcount

    def all(self) -> list[Any]:
        return self.rows

    def first(self) -> Any:
        return self.rows[0] if self.rows else None

    def scalar(self) -> Any:
        return self.rows[0][0] if self.rows else None

    def scalar_one(self) -> Any:
        assert self.rows, "no row"
        return self.rows[0][0]

    def one(self) -> Any:
        assert len(self.rows) == 1, self.rows
        return self.rows[0]

    def scalars(self) -> Result:
        return Result([row[0] for row in self.rows]) if self.rows else self

    def __iter__(self) -> Iterator[Any]:
        return iter(self.rows)

    def tuples(self) -> Result:
        return self


_CLAIMED = (
    *("id", "name", "queue", "payload", "attempts", "max_attempts", "timeout", "actor", "lease_owner"),
    *("workflow_id", "batch_id", "triggers", "concurrency_key", "traceparent", "due"),  # a plain job: no links
)
_DUE = datetime(2026, 1, 1, tzinfo=UTC)  # as SQL Server's claim returns run_at: an aware datetime


class _Row(tuple):  # type: ignore[type-arg]
    """A returned row: a running job of "a" with the given id, in a claim's column order."""

    def __new__(cls, job_id: int) -> _Row:
        return super().__new__(
            cls, (job_id, "a", "default", "null", 2, 5, None, None, "w", None, None, None, None, None, _DUE)
        )

    def __getattr__(self, name: str) -> Any:
        if name in _CLAIMED:
            return self[_CLAIMED.index(name)]
        if name in ("status", "priority"):
            return "pending" if name == "status" else 0
        if name == "cancel_requested_at":  # nobody asked to cancel it
            return None
        if name == "run_at":
            return _DUE
        raise AttributeError(name)


class Recording:
    """A Connection stand-in: compiles and keeps each statement."""

    def __init__(self) -> None:
        self.sql: list[str] = []
        self.params: list[dict[str, Any]] = []
        self.answers: list[list[Any]] = []  # rows for the next SELECTs, in order

    def execute(self, statement: Any, params: Any = None) -> Result:
        sets = params if isinstance(params, list) else [params or {}]
        values = sets[0]
        compiled = statement.compile(dialect=MSSQL, column_keys=list(values))
        state = compiled.construct_expanded_state(values)
        self.sql.append(str(state.statement))
        self.params.append(dict(state.parameters))
        if isinstance(statement, Insert) and statement._returning:
            return Result([_Row(n) for n, _ in enumerate(sets, start=1)])
        if isinstance(statement, Update):
            return Result([_Row(7)]) if statement._returning else Result([], rowcount=1)
        if isinstance(statement, Select) and self.answers:
            return Result(self.answers.pop(0))
        return Result([])

    @contextlib.contextmanager
    def begin_nested(self) -> Iterator[None]:
        yield

    def in_transaction(self) -> bool:
        return False


class OfflineDatabase:
    """What the store needs of a `Database`, for SQL Server, recording instead of running."""

    def __init__(self) -> None:
        self.dialect = SQLServerDialect()
        self.url = make_url("mssql+pyodbc://jobsup:secret@dsn")
        self.safe_url = self.url.render_as_string(hide_password=True)
        self.recording = Recording()

    def answer(self, rows: list[Any]) -> None:
        """Queue the rows the next SELECT returns."""
        self.recording.answers.append(rows)

    @property
    def sql(self) -> list[str]:
        return self.recording.sql

    @property
    def params(self) -> list[dict[str, Any]]:
        return self.recording.params

    @contextlib.contextmanager
    def read(self, operation: str = "read") -> Iterator[Recording]:
        yield self.recording

    statement = transaction = read

    @contextlib.contextmanager
    def unit(self, connection: Any, operation: str) -> Iterator[Recording]:
        yield self.recording

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        yield
