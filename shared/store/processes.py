"""The process table: one row per supervisor and per worker, kept alive by heartbeats.

The supervisor writes its own row and its workers' rows, and refreshes them all with one
statement per heartbeat; rows whose heartbeat is older than the stale age belong to
instances that are gone and are pruned by any instance's maintenance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, insert, or_, select, update

from jobsup.store.database import Database
from jobsup.store.schema import process


@dataclass(frozen=True)
class ProcessRow:
    id: str
    kind: str
    supervisor_id: str | None
    queue: str | None
    host: str
    pid: int
    job_id: int | None
    started_at: datetime | None
    heartbeat_at: datetime | None


class ProcessTable:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.dialect = db.dialect

    def process_register(
        self,
        *,
        id: str,
        kind: str,
        host: str,
        pid: int,
        supervisor_id: str | None = None,
        queue: str | None = None,
        now: datetime | None = None,
    ) -> None:
        at = self.dialect.clock()
        stmt = insert(process).values(
            id=id,
            kind=kind,
            host=host,
            pid=pid,
            supervisor_id=supervisor_id,
            queue=queue,
            started_at=at,
            heartbeat_at=at,
        )
        with self.db.statement("process") as conn:
            conn.execute(stmt, self.dialect.clock_params(now))

    def process_heartbeat(self, supervisor_id: str, *, now: datetime | None = None) -> int:
        """Refresh the supervisor's row and its workers' rows in one statement."""
        stmt = (
            update(process)
            .where(or_(process.c.id == supervisor_id, process.c.supervisor_id == supervisor_id))
            .values(heartbeat_at=self.dialect.clock())
        )
        with self.db.statement("process") as conn:
            return conn.execute(stmt, self.dialect.clock_params(now)).rowcount

    def process_ids(self, supervisor_id: str) -> set[str]:
        """The ids of the supervisor's row and its workers' rows that are in the table."""
        stmt = select(process.c.id).where(or_(process.c.id == supervisor_id, process.c.supervisor_id == supervisor_id))
        with self.db.read("process") as conn:
            return set(conn.execute(stmt).scalars())

    def process_deregister_all(self, supervisor_id: str) -> None:
        """Delete the supervisor's row and its workers' rows (it is stopping)."""
        stmt = delete(process).where(or_(process.c.id == supervisor_id, process.c.supervisor_id == supervisor_id))
        with self.db.statement("process") as conn:
            conn.execute(stmt)

    def process_deregister(self, ids: Sequence[str]) -> None:
        if ids:
            with self.db.statement("process") as conn:
                conn.execute(delete(process).where(process.c.id.in_(ids)))

    def process_prune(self, stale_after: float, *, now: datetime | None = None) -> list[str]:
        """Delete the rows of processes that stopped heartbeating; return their ids."""
        stmt = delete(process).where(process.c.heartbeat_at < self.dialect.clock("cutoff")).returning(process.c.id)
        with self.db.statement("maintenance") as conn:
            return list(conn.execute(stmt, self.dialect.clock_params(now, cutoff=-stale_after)).scalars())

    def process_list(self) -> list[ProcessRow]:
        with self.db.read("inspect") as conn:
            rows = conn.execute(select(process).order_by(process.c.started_at, process.c.id)).all()
        return [ProcessRow(*tuple(row)) for row in rows]


def stale_age(heartbeat_interval: float) -> float:
    """How long without a heartbeat before a process row counts as gone."""
    return max(60.0, 5 * heartbeat_interval)
