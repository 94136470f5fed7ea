"""`Client.rerun`: a new job made from a finished one, linked to it (`rerun_of`).

It is built from the stored row, never from what `Client.get` shows: a sensitive value is
masked there (``***``) and would be written back as the value itself. A sealed value is opened
with the old job's binding and sealed again to the new job, as a recurring schedule's are at
each fire. The new job takes the old one's queue, priority, attempts, timeout and
concurrency key, its payload checked against the job type's parameters as they are now (a
payload the type no longer takes is refused, naming the field), and none of its links: a
rerun of a workflow step or batch child runs on its own, setting nothing off in the
workflow or batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from jobsup.audit import actor_of
from jobsup.errors import BadInput, JobNotFound
from jobsup.payload import decode_payload
from jobsup.secrets import has_sealed, job_binding, required_keyring, sealed_fields
from jobsup.store.builder import build
from jobsup.store.schema import FINISHED_STATUSES, job

if TYPE_CHECKING:
    from jobsup.client.core import ClientCore

_STORED = select(
    *(job.c.id, job.c.name, job.c.queue, job.c.status, job.c.priority, job.c.payload),
    *(job.c.max_attempts, job.c.timeout, job.c.concurrency_key),
)


def rerun(core: ClientCore, job_id: int, actor: str | None) -> int:
    """See `Client.rerun`."""
    who = actor_of(actor)
    with core.store.db.read("inspect") as conn:
        row = conn.execute(_STORED.where(job.c.id == job_id)).first()
    if row is None:
        raise JobNotFound(f"no job with id {job_id}: nothing to rerun")
    if row.status not in FINISHED_STATUSES:
        raise BadInput(f"job {job_id} is {row.status}: a rerun copies a finished job; wait for it, or cancel it first")
    payload: Any = decode_payload(row.payload)
    sealed: frozenset[str] = frozenset()
    if has_sealed(payload):
        sealed = frozenset(sealed_fields(payload))
        payload = required_keyring().unseal(payload, job_binding(row.id, row.name))
    options: dict[str, Any] = {"queue": row.queue, "priority": row.priority, "max_attempts": row.max_attempts}
    options |= {"actor": who} | ({} if row.timeout is None else {"timeout": row.timeout})
    if row.concurrency_key is not None:
        options["concurrency_key"] = row.concurrency_key
    new = build(core.job_type(row.name, allow_unknown=True), payload, options, also_sealed=sealed)
    with core.store.db.transaction("enqueue") as conn:
        [new_id] = core.store.transitions.enqueue([new], connection=conn)
        conn.execute(core.store.transitions.sql.rerun_link, {"p_job": new_id, "p_rerun_of": row.id})
    core.audited(who, "job.rerun", target=str(job_id), job_ids=[new_id])
    return int(new_id)
