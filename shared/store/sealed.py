"""Rows with sealed values (`jobsup.secrets`): finding those sealed under an older key, and
re-sealing them under the newest (`jobsup keys rotate`).

Each row is re-sealed by compare-and-set on the key it was read under, so a rotation run
on two hosts at once, or a row re-sealed in between, is written once. A job row is written
through the transitions' `seal` statement (the one place job rows are written); a
schedule's row here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, func, select, update

from jobsup.payload import encode_payload
from jobsup.secrets import Keyring, SealedParameterError, Sealing, is_sealed, job_binding, schedule_binding
from jobsup.store.database import Database
from jobsup.store.rows import decode_stored
from jobsup.store.schema import job, recurring_job
from jobsup.store.statements import Statements

BATCH = 500


@dataclass
class Rotation:
    resealed: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # row -> why it did not open


def seal_new(conn: Connection, sql: Statements, inserted: Sequence[tuple[int, Any]]) -> None:
    """Seal the sensitive values of jobs just inserted on `conn` (in its transaction), now
    that they have their ids: `inserted` is (id, `NewJob`) pairs."""
    sealings: list[tuple[int, Sealing]] = [(job_id, new.sealing) for job_id, new in inserted if new.sealing]
    if sealings:
        rows = [(job_id, encode_payload(sealing.seal(job_id)), sealing.keyring.newest) for job_id, sealing in sealings]
        conn.execute(sql.seal, [{"p_job": i, "p_payload": text, "p_key": key} for i, text, key in rows])


class SealedRows:
    def __init__(self, db: Database, statements: Statements) -> None:
        self.db, self.sql = db, statements

    def older_than_newest(self, ring: Keyring) -> int:
        """Rows (jobs and schedules) sealed under a key other than the newest."""
        with self.db.read("keys") as conn:
            jobs = conn.execute(select(func.count()).where(_older(job, ring))).scalar_one()
            schedules = conn.execute(select(func.count()).where(_older(recurring_job, ring))).scalar_one()
        return int(jobs) + int(schedules)

    def rotate_jobs(self, ring: Keyring, after: int, rotation: Rotation) -> int | None:
        """Re-seal the next batch of jobs after id `after`; the last id read, None when done."""
        with self.db.read("keys") as conn:
            rows = conn.execute(
                select(job.c.id, job.c.payload, job.c.key_id)
                .where(_older(job, ring), job.c.id > after)
                .order_by(job.c.id)
                .limit(BATCH)
            ).all()
        if not rows:
            return None
        params = []
        for row in rows:
            resealed = _resealed(ring, row.payload, job_binding(row.id), f"job {row.id}", rotation)
            if resealed is not None:
                params.append({"p_job": row.id, "p_payload": resealed, "p_key": ring.newest, "p_old_key": row.key_id})
        if params:
            with self.db.transaction("keys") as conn:
                rotation.resealed += sum(conn.execute(self.sql.reseal, p).rowcount for p in params)
        return int(rows[-1].id)

    def rotate_schedules(self, ring: Keyring, rotation: Rotation) -> None:
        with self.db.read("keys") as conn:
            rows = conn.execute(
                select(
                    recurring_job.c.name, recurring_job.c.payload, recurring_job.c.key_id, recurring_job.c.updated_at
                ).where(_older(recurring_job, ring))
            ).all()
        for row in rows:
            what = f"recurring schedule {row.name!r}"
            resealed = _resealed(ring, row.payload, schedule_binding(row.name), what, rotation)
            if resealed is None:
                continue
            with self.db.statement("keys") as conn:
                rotation.resealed += conn.execute(
                    update(recurring_job)
                    .where(
                        recurring_job.c.name == row.name,
                        recurring_job.c.key_id == row.key_id,
                        recurring_job.c.updated_at == row.updated_at,  # not edited since it was read
                    )
                    .values(payload=resealed, key_id=ring.newest)
                ).rowcount


def _older(table: Any, ring: Keyring) -> Any:
    return table.c.key_id.is_not(None) & (table.c.key_id != ring.newest)


def _resealed(ring: Keyring, text: str, binding: str, what: str, rotation: Rotation) -> str | None:
    payload = decode_stored(text)
    try:
        if not isinstance(payload, dict):
            raise SealedParameterError(f"{what}: the stored payload is not a JSON object")
        opened = ring.unseal(payload, binding, what=what)
    except SealedParameterError as exc:
        rotation.failed[what] = str(exc)
        return None
    sealed = frozenset(key for key, value in payload.items() if is_sealed(value))
    return encode_payload(ring.seal(opened, sealed, binding))
