"""The audit trail: one row per operator action (`jobsup_audit`), who did what to which
queue, schedule or jobs, and how it ended. Rows are written by the API's operator methods
(see `jobsup.client.core`), listed newest first, and deleted past their retention age by the
supervisor's maintenance in bounded batches."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from sqlalchemy import Connection, bindparam, delete, insert, select

from jobsup.store.database import Database
from jobsup.store.schema import audit

JOB_IDS_KEPT = 100  # ids stored per row; `job_count` is the true count
# ok; not_found: nothing matched; refused: the database's state forbade it; unchanged: it
# already was so (a duplicate unique key); failed: an error stopped it part way.
OUTCOMES = ("ok", "not_found", "refused", "unchanged", "failed")
BATCH = 1000  # rows per purge transaction


@dataclass(frozen=True)
class AuditEntry:
    """One operator action as stored: `job_ids` holds at most `JOB_IDS_KEPT` of the
    `job_count` jobs it touched."""

    id: int
    at: datetime
    actor: str
    action: str
    target: str | None
    job_count: int | None
    job_ids: tuple[int, ...]
    outcome: str
    detail: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        fields = asdict(self)
        fields["job_ids"] = list(self.job_ids)
        return fields


class Audit:
    """Writes and reads `jobsup_audit`."""

    def __init__(self, db: Database) -> None:
        self.db, self.dialect = db, db.dialect

    def record(
        self,
        actor: str,
        action: str,
        *,
        target: str | None = None,
        job_ids: Sequence[int] = (),
        job_count: int | None = None,
        outcome: str = "ok",
        detail: Mapping[str, Any] | None = None,
        connection: Connection | None = None,
        now: datetime | None = None,
    ) -> None:
        """Store one action. `job_count` defaults to ``len(job_ids)`` when ids are given;
        only the first `JOB_IDS_KEPT` ids are stored. With `connection`, in its transaction
        (so the row commits or rolls back with the change it describes)."""
        if outcome not in OUTCOMES:
            raise ValueError(f"audit outcome {outcome!r} is not one of {', '.join(OUTCOMES)}")
        ids = [int(job_id) for job_id in list(job_ids)[:JOB_IDS_KEPT]]
        params = {
            **self.dialect.clock_params(now),
            "p_actor": actor,
            "p_action": action,
            "p_target": target,
            "p_count": len(job_ids) if job_count is None and job_ids else job_count,
            "p_ids": json.dumps(ids) if ids else None,
            "p_outcome": outcome,
            "p_detail": None if detail is None else json.dumps(dict(detail), sort_keys=True, default=str),
        }
        if connection is not None:
            connection.execute(self._insert, params)
            return
        with self.db.statement("audit") as conn:
            conn.execute(self._insert, params)

    @cached_property
    def _insert(self) -> Any:
        return insert(audit).values(
            at=self.dialect.clock(),
            actor=bindparam("p_actor"),
            action=bindparam("p_action"),
            target=bindparam("p_target"),
            job_count=bindparam("p_count"),
            job_ids=bindparam("p_ids"),
            outcome=bindparam("p_outcome"),
            detail=bindparam("p_detail"),
        )

    def list(
        self,
        *,
        since: datetime | float | None = None,
        actor: str | None = None,
        action: str | None = None,
        limit: int = 100,
        now: datetime | None = None,
    ) -> list[AuditEntry]:
        """Actions newest first: those at or after `since` (an instant, or seconds before
        now), by `actor`, of `action` (exact, or a prefix ending in ``.``: ``queue.``)."""
        stmt = select(audit).order_by(audit.c.at.desc(), audit.c.id.desc()).limit(limit)
        params: dict[str, Any] = {}
        if isinstance(since, datetime):
            stmt = stmt.where(audit.c.at >= bindparam("p_since", type_=audit.c.at.type))
            params["p_since"] = since
        elif since is not None:
            stmt = stmt.where(audit.c.at >= self.dialect.clock("since"))
            params.update(self.dialect.clock_params(now, since=-float(since)))
        if actor is not None:
            stmt = stmt.where(audit.c.actor == actor)
        if action is not None:
            prefix = audit.c.action.startswith(action, autoescape=True)  # a _ or % in it is no wildcard
            stmt = stmt.where(prefix if action.endswith(".") else audit.c.action == action)
        with self.db.read("audit") as conn:
            return [_entry(row) for row in conn.execute(stmt, params)]

    def purge(
        self, older_than: float, *, batch: int = BATCH, max_batches: int = 20, now: datetime | None = None
    ) -> int:
        """Delete rows older than `older_than` seconds, oldest first, `batch` per
        transaction and at most `max_batches` batches; return how many."""
        clock = self.dialect.clock_params(now, cutoff=-older_than)
        old = select(audit.c.id).where(audit.c.at < self.dialect.clock("cutoff")).order_by(audit.c.at).limit(batch)
        purged = 0
        for _ in range(max_batches):
            with self.db.transaction("retention") as conn:
                ids = list(conn.execute(old, clock).scalars())
                if ids:
                    conn.execute(delete(audit).where(audit.c.id.in_(ids)))
            purged += len(ids)
            if len(ids) < batch:
                break
        return purged


def _entry(row: Any) -> AuditEntry:
    return AuditEntry(
        id=int(row.id),
        at=row.at,
        actor=row.actor,
        action=row.action,
        target=row.target,
        job_count=row.job_count,
        job_ids=tuple(ids) if isinstance(ids := _json(row.job_ids), list) else (),
        outcome=row.outcome,
        detail=_json(row.detail),
    )


def _json(text: str | None) -> Any:
    """A stored JSON column; a hand-edited, unreadable one is shown as its text rather
    than breaking the whole listing."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return {"unreadable": text}
