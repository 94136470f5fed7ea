"""The parts of an enqueue's INSERT that every dialect shares: which columns a new job
gives, and what the database fills in. A dialect inserts rows its own way (one VALUES row
per parameter set, or PostgreSQL's arrays through ``unnest``) but from these, so a column of
a new job is written once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields
from datetime import datetime
from operator import attrgetter
from typing import Any

from sqlalchemy import ColumnElement, Connection, Insert, bindparam, case, func

from jobsup.store.claim import status_literal
from jobsup.store.rows import NewJob
from jobsup.store.schema import PENDING, WAITING, job

# The columns a new job gives (`NewJob`'s fields, in its order); `run_at` None means now.
GIVEN = tuple(field.name for field in fields(NewJob) if field.metadata.get("column", True))
given_of = attrgetter(*GIVEN)  # a NewJob's given values, in GIVEN's order


def inserted_values(given: Callable[[str], ColumnElement[Any]], clock: ColumnElement[datetime]) -> dict[str, Any]:
    """Every column a new row gets: what the job gives (`given(column)` says where it comes
    from in the statement), and what the database fills in at `clock`."""
    values = {name: given(name) for name in GIVEN}
    values["run_at"] = func.coalesce(values["run_at"], clock)
    # A workflow step with dependencies to wait for (a count, never 0 at enqueue; None for
    # any other job) starts `waiting`, outside the claim index.
    status = case((values["waiting_on"].is_not(None), status_literal(WAITING)), else_=status_literal(PENDING))
    return {**values, "status": status, "attempts": 0, "created_at": clock, "updated_at": clock}


def values_insert(clock: ColumnElement[datetime]) -> Insert:
    """One VALUES row of the parameters of `row_params`."""
    return job.insert().values(inserted_values(lambda name: bindparam(f"j_{name}", type_=job.c[name].type), clock))


def values_statement(clock: ColumnElement[datetime]) -> Insert:
    """`values_insert`, run once per parameter set, returning the ids in that order."""
    return values_insert(clock).returning(job.c.id, sort_by_parameter_order=True)


def row_params(new: NewJob, clock: dict[str, Any]) -> dict[str, Any]:
    """The bound parameters of `values_statement` for `new`, with the clock's."""
    return {**{f"j_{name}": value for name, value in zip(GIVEN, given_of(new), strict=True)}, **clock}


def insert_rows(conn: Connection, statement: Insert, jobs: Sequence[NewJob], clock: dict[str, Any]) -> list[int]:
    """Insert with `values_statement`, a parameter set per job (SQLAlchemy batches them into
    multi-row statements where the driver allows); the ids in order."""
    return list(conn.execute(statement, [row_params(new, clock) for new in jobs]).scalars().all())
