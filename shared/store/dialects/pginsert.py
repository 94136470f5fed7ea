"""How PostgreSQL inserts jobs: one job as the driver's own text, many from one array per
column through ``unnest``; either way the insert NOTIFYs the jobs' queues in the same
statement, so a plain enqueue is one round trip in autocommit.

Many jobs go `INSERT_CHUNK` a statement, and the statement text stays the same whatever the
count, so the driver does not parse a new query of thousands of placeholders per chunk.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from sqlalchemy import Connection, Insert, Select, Text, bindparam, column, func, insert, literal_column, select, true
from sqlalchemy.dialects.postgresql import ARRAY

from jobsup.store.dialects.common import RowByRowInsert
from jobsup.store.dialects.drivertext import DriverText
from jobsup.store.insert import GIVEN, given_of, inserted_values, row_params, values_insert
from jobsup.store.rows import NewJob
from jobsup.store.schema import job

INSERT_CHUNK = 5000  # jobs per INSERT: arrays this long bind in well under a millisecond per 1,000 jobs
_INSERT_MANY: dict[frozenset[str], str] = {}  # the bulk insert's text per shape of varying columns
_CHANNEL_BYTES = 63  # NAMEDATALEN - 1: longer channel names are truncated by the server


def channel(queue: str) -> str:
    """The NOTIFY channel of `queue`; a name too long for the server is hashed, not cut."""
    name = f"jobsup:{queue}"
    if len(name.encode()) <= _CHANNEL_BYTES:
        return name
    return "jobsup:" + hashlib.sha1(queue.encode()).hexdigest()


def _one_params(new: NewJob, clock: dict[str, Any]) -> dict[str, Any]:
    return {**row_params(new, clock), "p_channels": [channel(new.queue)]}


class UnnestInsert(RowByRowInsert):
    """`Dialect.insert_jobs` and `Dialect.insert_one_driver` for PostgreSQL (the dialect
    gives `clock`)."""

    def insert_jobs(
        self, conn: Connection, jobs: Sequence[NewJob], clock: dict[str, Any]
    ) -> tuple[list[int], set[str]]:
        queues = {new.queue for new in jobs}
        psycopg = conn.dialect.driver == "psycopg"  # else the caller's connection= on another driver
        if len(jobs) == 1:
            if psycopg:
                inserted = conn.exec_driver_sql(*self.insert_one_driver(jobs[0], clock))
            else:
                inserted = conn.execute(self.insert_one, _one_params(jobs[0], clock))
            return [int(inserted.scalar_one())], queues
        if not psycopg:
            return RowByRowInsert.insert_jobs(self, conn, jobs, clock)
        ids: list[int] = []
        for start in range(0, len(jobs), INSERT_CHUNK):
            chunk = jobs[start : start + INSERT_CHUNK]
            columns = dict(zip(GIVEN, map(list, zip(*map(given_of, chunk), strict=True)), strict=True))
            # A column with one value for the whole chunk (most are: the job type's settings)
            # is bound once rather than as an array of copies.
            varying = frozenset(n for n, v in columns.items() if n == "payload" or v.count(v[0]) != len(v))
            params = {(f"a_{n}" if n in varying else f"c_{n}"): v if n in varying else v[0] for n, v in columns.items()}
            params.update(clock, p_channels=sorted({channel(queue) for queue in {new.queue for new in chunk}}))
            # Identity values are drawn in the order the rows are inserted (unnest's order):
            # sorted, the ids are the jobs' order.
            ids.extend(sorted(row[0] for row in conn.exec_driver_sql(self.insert_many(varying), params).all()))
        return ids, queues

    def insert_one_driver(self, new: NewJob, clock: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """A single job's insert, waking its queue, as psycopg's text and parameters: the
        enqueue applications make most, run as `DriverText`."""
        return self.insert_one_text.bind(_one_params(new, clock))

    @cached_property
    def insert_one(self) -> Select[Any]:
        return self._waking(values_insert(self.clock()).returning(job.c.id))  # type: ignore[attr-defined]

    @cached_property
    def insert_one_text(self) -> DriverText:
        return DriverText.of(self.insert_one)

    def insert_many(self, varying: frozenset[str]) -> str:
        """The unnest insert of the `varying` columns (the others bound once, as `c_...`),
        as the driver's text with its arrays bound in binary: the text format quotes every
        element of every array in Python, half the cost of a bulk enqueue. Built from one
        Core statement, compiled once per shape."""
        from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

        found = _INSERT_MANY.get(varying)
        if found is None:
            compiled = str(self._insert_many(varying).compile(dialect=PGDialect_psycopg()))  # type: ignore[no-untyped-call]
            found = _INSERT_MANY[varying] = re.sub(r"%\(((?:a_\w+)|p_channels)\)s::", r"%(\1)b::", compiled)
        return found

    def _insert_many(self, varying: frozenset[str]) -> Select[Any]:
        names = [name for name in GIVEN if name in varying]
        arrays = [bindparam(f"a_{name}", type_=ARRAY(job.c[name].type)) for name in names]
        given = (column(name, job.c[name].type) for name in names)
        rows = func.unnest(*arrays).table_valued(*given, with_ordinality="ordinal").render_derived()

        def source(name: str) -> Any:
            return rows.c[name] if name in varying else bindparam(f"c_{name}", type_=job.c[name].type)

        values = inserted_values(source, self.clock())  # type: ignore[attr-defined]
        chosen = select(*values.values()).order_by(rows.c.ordinal)
        return self._waking(insert(job).from_select(list(values), chosen).returning(job.c.id))

    def _waking(self, inserted: Insert) -> Select[Any]:
        """`inserted` and a NOTIFY on each channel of `p_channels`, in one statement; the
        NOTIFY goes out when it commits."""
        rows = inserted.cte("inserted")
        channels = func.unnest(bindparam("p_channels", type_=ARRAY(Text))).table_valued("channel").render_derived()
        woken = select(func.count(func.pg_notify(channels.c.channel, literal_column("''"))).label("woken")).subquery(
            "woken"
        )
        return select(rows.c.id, woken.c.woken).select_from(rows.join(woken, true()))
