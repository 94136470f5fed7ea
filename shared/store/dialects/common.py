"""Pieces two of the three dialects share, kept in one place."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import BigInteger, ColumnElement, Integer, Row, Update, bindparam, tuple_
from sqlalchemy.types import TupleType

from jobsup.store.dialects import Connections
from jobsup.store.rows import Lease
from jobsup.store.schema import job


class SequentialChain:
    """Two dependent writes as two statements in one transaction (no data-modifying CTEs).
    The second statement finds the changed ids in the expanding `p_changed` parameter."""

    def chain(self, first: Update, then: Callable[[Any], Update]) -> tuple[Update, Update]:
        return first, then(bindparam("p_changed", expanding=True))

    def run_chain(self, db: Connections, chain: Any, params: Mapping[str, Any], operation: str) -> Sequence[Row[Any]]:
        first, then = chain
        with db.transaction(operation) as conn:
            rows = conn.execute(first, params).all()
            if rows:
                conn.execute(then, {**params, "p_changed": [row[0] for row in rows]})
        return rows


class RowValueFence:
    """The attempt half of a lease fence as a row-value IN: (id, attempts) IN ((1, 2), ...)."""

    def attempt_match(self) -> ColumnElement[bool]:
        # Typed, so the driver does not send small ids as smallint and re-plan as they grow.
        fences = bindparam("p_fences", expanding=True, type_=TupleType(BigInteger(), Integer()))
        return tuple_(job.c.id, job.c.attempts).in_(fences)

    def attempt_params(self, leases: Sequence[Lease]) -> dict[str, Any]:
        return {"p_fences": [(lease.job_id, lease.attempt) for lease in leases]}
