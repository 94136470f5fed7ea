"""Rows with sealed values (`jobsup.secrets`): finding those sealed under an older key or
in a version 1 envelope, and re-sealing them under the newest (`jobsup keys rotate`); and
sealing the clear values of fields marked sensitive after the rows were written.

Each row is re-sealed by compare-and-set on the key it was read under (none, for a row in
clear), so a rotation run on two hosts at once, or a row re-sealed in between, is written
once. A job row is written through the transitions' `seal` statements (the one place job
rows are written); a schedule's row here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, func, or_, select, update

from jobsup.payload import encode_payload
from jobsup.secrets import (
    MARK,
    V2,
    Binding,
    Keyring,
    SealedParameterError,
    Sealing,
    clear_sensitive,
    has_v1,
    job_binding,
    new_row_id,
    schedule_binding,
    sealed_fields,
)
from jobsup.store.database import Database
from jobsup.store.rows import decode_stored
from jobsup.store.schema import job, recurring_job
from jobsup.store.statements import Statements

BATCH = 500


@dataclass
class Rotation:
    resealed: int = 0  # rows of an older key or envelope, re-sealed
    sealed: int = 0  # rows whose clear values of sensitive fields were sealed
    failed: dict[str, str] = field(default_factory=dict)  # row -> why it did not open


def seal_new(conn: Connection, sql: Statements, inserted: Sequence[tuple[int, Any]]) -> None:
    """Seal the sensitive values of jobs just inserted on `conn` (in its transaction), now
    that they have their ids: `inserted` is (id, `NewJob`) pairs."""
    sealings: list[tuple[int, str, Sealing]] = [(i, new.name, new.sealing) for i, new in inserted if new.sealing]
    if sealings:
        rows = [(i, encode_payload(sealing.seal(i, name)), sealing.keyring.newest) for i, name, sealing in sealings]
        conn.execute(sql.seal, [{"p_job": i, "p_payload": text, "p_key": key} for i, text, key in rows])


class SealedRows:
    """`sensitive` (job type -> its sensitive fields, as published) names the rows that may
    hold clear values to seal."""

    def __init__(self, db: Database, statements: Statements) -> None:
        self.db, self.sql = db, statements

    def older_than_newest(self, ring: Keyring) -> int:
        """Rows (jobs and schedules) sealed under a key other than the newest, or in a
        version 1 envelope (not bound to the job type)."""
        with self.db.read("keys") as conn:
            jobs = conn.execute(select(func.count()).where(_stale(job, ring))).scalar_one()
            schedules = conn.execute(select(func.count()).where(_stale(recurring_job, ring))).scalar_one()
        return int(jobs) + int(schedules)

    def rotate_jobs(
        self, ring: Keyring, after: int, rotation: Rotation, sensitive: Mapping[str, frozenset[str]]
    ) -> int | None:
        """Re-seal the next batch of jobs after id `after` (and seal the clear values of
        their sensitive fields); the last id read, None when done."""
        wanted = _stale(job, ring)
        if sensitive:  # every row of those types: which hold clear values is read from the payload
            wanted = or_(wanted, job.c.name.in_(sorted(sensitive)))
        with self.db.read("keys") as conn:
            rows = conn.execute(
                select(job.c.id, job.c.name, job.c.payload, job.c.key_id)
                .where(wanted, job.c.id > after)
                .order_by(job.c.id)
                .limit(BATCH)
            ).all()
        if not rows:
            return None
        sealed, resealed = [], []
        for row in rows:
            fields = sensitive.get(row.name, frozenset())
            text = _resealed(ring, row.payload, row.key_id, job_binding(row.id, row.name), fields, rotation)
            if text is not None:
                params = {"p_job": row.id, "p_payload": text, "p_key": ring.newest}
                if row.key_id is None:
                    sealed.append(params)
                else:
                    resealed.append({**params, "p_old_key": row.key_id})
        with self.db.transaction("keys") as conn:
            rotation.resealed += sum(conn.execute(self.sql.reseal, p).rowcount for p in resealed)
            rotation.sealed += sum(conn.execute(self.sql.seal, p).rowcount for p in sealed)
        return int(rows[-1].id)

    def rotate_schedules(self, ring: Keyring, rotation: Rotation, sensitive: Mapping[str, frozenset[str]]) -> None:
        wanted = _stale(recurring_job, ring)
        if sensitive:
            wanted = or_(wanted, recurring_job.c.job_name.in_(sorted(sensitive)))
        table = recurring_job.c
        with self.db.read("keys") as conn:
            rows = conn.execute(
                select(table.name, table.job_name, table.payload, table.key_id, table.seal_id, table.updated_at).where(
                    wanted
                )
            ).all()
        for row in rows:
            fields = sensitive.get(row.job_name, frozenset())
            # A schedule sealed before it had a row id is opened with the old binding and
            # re-sealed under a new id.
            seal_id = row.seal_id or new_row_id()
            binding = schedule_binding(row.name, row.job_name, row.seal_id)
            rebound = schedule_binding(row.name, row.job_name, seal_id)
            text = _resealed(ring, row.payload, row.key_id, binding, fields, rotation, rebound)
            if text is None:
                continue
            with self.db.statement("keys") as conn:
                count = conn.execute(
                    update(recurring_job)
                    .where(
                        table.name == row.name,
                        table.key_id.is_(None) if row.key_id is None else table.key_id == row.key_id,
                        table.updated_at == row.updated_at,  # not edited since it was read
                    )
                    .values(payload=text, key_id=ring.newest, seal_id=seal_id)
                ).rowcount
            if row.key_id is None:
                rotation.sealed += count
            else:
                rotation.resealed += count


def _stale(table: Any, ring: Keyring) -> Any:
    """Sealed rows to re-seal: under an older key, or in version 1 envelopes (a row is
    sealed all at once, so one version 2 envelope means every one is)."""
    current = table.c.payload.contains(f'"{MARK}":"{V2}', autoescape=True)
    return table.c.key_id.is_not(None) & ((table.c.key_id != ring.newest) | ~current)


def _resealed(
    ring: Keyring,
    text: str,
    key_id: str | None,
    binding: Binding,
    sensitive: frozenset[str],
    rotation: Rotation,
    rebound: Binding | None = None,
) -> str | None:
    """The row's payload sealed anew under the newest key, bound to `rebound` (else
    `binding`), its clear values of `sensitive` sealed too; None when there is nothing to
    do, or it does not open (recorded in `rotation.failed`)."""
    payload = decode_stored(text)
    if not isinstance(payload, dict):
        if key_id is not None:
            rotation.failed[binding.what] = f"{binding.what}: the stored payload is not a JSON object"
        return None
    clear = clear_sensitive(payload, sensitive)
    stale = key_id is not None and (key_id != ring.newest or has_v1(payload))
    if not clear and not stale:
        return None
    try:
        opened = ring.unseal(payload, binding)
    except SealedParameterError as exc:
        rotation.failed[binding.what] = str(exc)
        return None
    return encode_payload(ring.seal(opened, sealed_fields(payload) | clear, rebound or binding))
