"""SQLite and PostgreSQL with the emulated UPDATE ... RETURNING that MariaDB needs
(`jobsup.store.dialects.returning`) in place of their own, to run the real store through it.

`emulated_returning` (a fixture of `test_returning.py`) switches it on for one test. As a
pytest plugin it switches it on for every test of a run, so a whole test file can be run
through the emulation: ``python -m pytest -p returning_emulated tests/test_store.py``. Only
this process's `Database`s get it (the `jobsup start` supervisors a test starts keep the
native statements: the two then share one database, as they would not in production).

Each emulated compare-and-set also checks it runs inside a transaction: on a `statement()`
connection (autocommit on PostgreSQL) its lock would end with the locking read.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from sqlalchemy import Connection, Row, Update
from sqlalchemy.engine import URL

from jobsup.store import database
from jobsup.store.chain import Returning
from jobsup.store.dialects import Dialect, dialect_for
from jobsup.store.dialects.common import SequentialChain
from jobsup.store.dialects.fences import RowValueFence
from jobsup.store.dialects.postgresql import PostgreSQLDialect
from jobsup.store.dialects.returning import EmulatedReturning, LockedReturning
from jobsup.store.dialects.sqlite import SQLiteDialect

ALONE = "jobsup_test_alone"  # the execution option that marks a `statement()` connection


class Checked(LockedReturning):
    """`LockedReturning` that refuses to run on a `statement()` connection, and counts its runs."""

    runs = 0

    def run(self, conn: Connection, params: Mapping[str, Any]) -> Sequence[Row[Any]]:
        if conn.get_execution_options().get(ALONE):
            raise AssertionError(f"emulated UPDATE ... RETURNING outside a transaction: {self.update}")
        Checked.runs += 1
        return super().run(conn, params)


class CheckedReturning(EmulatedReturning):
    def returning(self, stmt: Update) -> Returning:
        return Checked.of(stmt)


class EmulatedSQLite(CheckedReturning, SQLiteDialect):
    statement_options: Mapping[str, Any] = {**SQLiteDialect.statement_options, ALONE: True}


class EmulatedPostgreSQL(CheckedReturning, SequentialChain, RowValueFence, PostgreSQLDialect):
    """PostgreSQL without its fused CTE chains either (MariaDB has no data-modifying CTEs),
    nor its array fence (an UPDATE ... FROM: MariaDB's fence is the row-value IN)."""

    statement_options: Mapping[str, Any] = {**PostgreSQLDialect.statement_options, ALONE: True}


def emulated_dialect_for(url: URL) -> Dialect:
    native = dialect_for(url)
    if isinstance(native, SQLiteDialect):
        return _EMULATED["sqlite"]
    if isinstance(native, PostgreSQLDialect):
        return _EMULATED["postgresql"]
    raise AssertionError(f"no emulated dialect for {url.get_backend_name()}")


# One of each, as `dialect_for` makes (`Statements.of` keeps one set of statements per dialect).
_EMULATED: dict[str, Dialect] = {"sqlite": EmulatedSQLite(), "postgresql": EmulatedPostgreSQL()}


@pytest.fixture
def emulated_returning(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every `Database` this test opens uses the emulated UPDATE ... RETURNING."""
    monkeypatch.setattr(database, "dialect_for", emulated_dialect_for)
    yield


@pytest.fixture(autouse=True)
def _every_test_emulated(emulated_returning: None) -> None:
    """Loaded as a plugin (``-p returning_emulated``): every test runs emulated."""
