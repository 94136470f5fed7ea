"""The lease half of every fenced write, (id, attempts) among the bound leases, in the shape
each database takes best (`Dialect.lease_match`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Integer,
    Text,
    and_,
    bindparam,
    cast,
    column,
    func,
    literal_column,
    tuple_,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.types import TupleType

from jobsup.store.rows import Lease
from jobsup.store.schema import job


class RowValueFence:
    """A lease fence as expanded lists: id IN (1, ...) AND (id, attempts) IN ((1, 2), ...).
    One result is bound for all its leases (`p_result`)."""

    def lease_match(self, *, results: bool = False) -> tuple[ColumnElement[bool], ColumnElement[Any] | None]:
        return and_(job.c.id.in_(bindparam("p_fence_ids", expanding=True)), self._attempts()), None

    def lease_params(self, leases: Sequence[Lease], results: Sequence[str | None] | None = None) -> dict[str, Any]:
        return {"p_fence_ids": [lease.job_id for lease in leases], **self._attempt_params(leases)}

    def _attempts(self) -> ColumnElement[bool]:
        # Typed, so the driver does not send small ids as smallint and re-plan as they grow.
        fences = bindparam("p_fences", expanding=True, type_=TupleType(BigInteger(), Integer()))
        return tuple_(job.c.id, job.c.attempts).in_(fences)

    def _attempt_params(self, leases: Sequence[Lease]) -> dict[str, Any]:
        return {"p_fences": [(lease.job_id, lease.attempt) for lease in leases]}


class KeyFence(RowValueFence):
    """SQL Server's: it has no row-value IN, so the attempt half matches "id:attempt" keys."""

    def _attempts(self) -> ColumnElement[bool]:
        key = func.concat(job.c.id, literal_column("':'"), job.c.attempts)
        return key.in_(bindparam("p_fence_keys", expanding=True))

    def _attempt_params(self, leases: Sequence[Lease]) -> dict[str, Any]:
        return {"p_fence_keys": [f"{lease.job_id}:{lease.attempt}" for lease in leases]}


class ArrayFence:
    """A lease fence as a join with arrays: ``UPDATE jobsup_job ... FROM unnest($ids, $attempts)
    AS s(id, attempt) WHERE jobsup_job.id = s.id AND jobsup_job.attempts = s.attempt``.

    Its text is the same for one lease or a thousand, so psycopg keeps it prepared and the
    server plans it once; expanded IN lists made a new text per count, which psycopg parsed
    and PostgreSQL planned again at every settle (1.6 ms of bind at 100 jobs, measured in
    `../shared/bench/PROFILE-2026-12-03.md`). A settle's results ride along as a third
    array, so jobs that return different values still settle in one statement."""

    def lease_match(self, *, results: bool = False) -> tuple[ColumnElement[bool], ColumnElement[Any] | None]:
        # Each array is bound as its text form ('{1,2,3}') and cast by the server: psycopg
        # dumps a Python list element by element in Python, which cost more than the rest of
        # a settle's binding (4 µs per job at batch 100, py-spy of `cpu_profile.py`).
        arrays: list[ColumnElement[Any]] = [
            cast(bindparam("p_fence_ids", type_=Text), ARRAY(BigInteger)),
            cast(bindparam("p_fence_attempts", type_=Text), ARRAY(Integer)),
        ]
        names = [column("id", BigInteger), column("attempt", Integer)]
        if results:
            arrays.append(cast(bindparam("p_results", type_=Text), ARRAY(Text)))
            names.append(column("result", job.c.result.type))
        leases = func.unnest(*arrays).table_valued(*names).render_derived(name="leases")
        # A generic plan joins the arrays to the primary key's index, a nested loop
        # (`test_explain.py` holds it to that). An `id = ANY(ids)` beside the join, for a
        # planner that would not, made the backends cost 21 % more per job (42 -> 51
        # ms per 1,000 jobs, cpu_profile.py at batch 100).
        match = and_(job.c.id == leases.c.id, job.c.attempts == leases.c.attempt)
        return match, (leases.c.result if results else None)

    def lease_params(self, leases: Sequence[Lease], results: Sequence[str | None] | None = None) -> dict[str, Any]:
        # In id order, so two writes of one worker's leases (a renewal and a settle) lock
        # their rows in the same order and cannot deadlock.
        order = sorted(range(len(leases)), key=lambda index: leases[index].job_id)
        params: dict[str, Any] = {
            "p_fence_ids": _array(str(leases[index].job_id) for index in order),
            "p_fence_attempts": _array(str(leases[index].attempt) for index in order),
        }
        if results is not None:
            params["p_results"] = _array(_element(results[index]) for index in order)
        return params


def _array(elements: Iterable[str]) -> str:
    """A PostgreSQL array's text form."""
    return "{" + ",".join(elements) + "}"


def _element(text: str | None) -> str:
    """One text element of an array's text form: quoted, or NULL."""
    if text is None:
        return "NULL"
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
