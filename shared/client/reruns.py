"""`Client.rerun`: a new job made from a finished one, linked to it (`rerun_of`).

It is built from the stored row, never from what `Client.get` shows: a sensitive value is
masked there (``***``) and would be written back as the value itself. A sealed value is opened
with the old job's binding (so the process rerunning needs `JOBSUP_ENCRYPTION_KEYS` with that
job's key) and sealed again to the new job, as a recurring schedule's are at each fire.

What it copies: the job type, payload, queue, priority, timeout, its first budget of attempts
(not the attempts dead-letter retries added) and its concurrency key and limit exactly as
stored. What it does not: a unique key, the enqueue's own `then=` triggers and SLA deadlines
(the job type's apply, as they are now), and its links: a rerun of a workflow step or batch
child runs on its own, setting nothing off in its workflow or batch. The payload is checked
against the job type's parameters as they are now: one the type no longer takes is refused,
naming the field.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from jobsup.audit import actor_of
from jobsup.errors import BadInput, JobNotFound
from jobsup.payload import decode_payload
from jobsup.secrets import has_sealed, job_binding, required_keyring, sealed_fields
from jobsup.store.builder import build
from jobsup.store.schema import FINISHED_STATUSES, job

if TYPE_CHECKING:
    from jobsup.client.core import ClientCore

_STORED = select(
    *(job.c.id, job.c.name, job.c.queue, job.c.status, job.c.priority, job.c.payload, job.c.timeout),
    func.coalesce(job.c.budget, job.c.max_attempts).label("budget"),  # retries raise max_attempts
    *(job.c.concurrency_key, job.c.concurrency_limit),
)


def rerun(core: ClientCore, job_id: int, actor: str | None) -> int:
    """See `Client.rerun`."""
    who = actor_of(actor)
    with core.store.db.read("inspect") as conn:
        row = conn.execute(_STORED.where(job.c.id == job_id)).first()
    _check(core, who, job_id, row)
    assert row is not None
    payload: Any = decode_payload(row.payload)
    sealed: frozenset[str] = frozenset()
    if has_sealed(payload):
        sealed = frozenset(sealed_fields(payload))
        payload = required_keyring().unseal(payload, job_binding(row.id, row.name))
    options: dict[str, Any] = {"queue": row.queue, "priority": row.priority, "max_attempts": row.budget, "actor": who}
    if row.timeout is not None:
        options["timeout"] = row.timeout
    new = build(core.job_type(row.name, allow_unknown=True), payload, options, also_sealed=sealed)
    # The key as stored (the type's prefix already in it) and its limit, not made again.
    new = dataclasses.replace(new, concurrency_key=row.concurrency_key, concurrency_limit=row.concurrency_limit)
    with core.store.db.transaction("enqueue") as conn:
        # Looked at again in the insert's transaction: a dead-letter retry since made it live.
        now = conn.execute(_STORED.where(job.c.id == job_id)).first()
        if now is not None and now.status in FINISHED_STATUSES:
            [new_id] = core.store.transitions.enqueue([new], connection=conn)
            conn.execute(core.store.transitions.sql.rerun_link, {"p_job": new_id, "p_rerun_of": row.id})
    _check(core, who, job_id, now)  # audited once the transaction is over (SQLite has one writer)
    core.audited(who, "job.rerun", target=str(job_id), job_ids=[new_id])
    return int(new_id)


def _check(core: ClientCore, who: str, job_id: int, row: Any) -> None:
    """`JobNotFound` or `BadInput` (audited as refused) unless `row` (a `_STORED` row, or
    None) is a finished job."""
    if row is None:
        core.audited(who, "job.rerun", target=str(job_id), outcome="not_found")
        raise JobNotFound(f"no job with id {job_id}: nothing to rerun")
    if row.status not in FINISHED_STATUSES:
        core.audited(who, "job.rerun", target=str(job_id), outcome="refused", detail={"status": row.status})
        raise BadInput(f"job {job_id} is {row.status}: a rerun copies a finished job; wait for it, or cancel it first")
