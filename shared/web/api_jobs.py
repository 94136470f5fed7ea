"""/api/v1: jobs and dead letters."""

from __future__ import annotations

from typing import Any

from jobsup.client import Client
from jobsup.errors import JobNotFound
from jobsup.store.rows import Job
from jobsup.store.states import FILTERS
from jobsup.web import schemas as s
from jobsup.web.api import ApiError, Operations, Param
from jobsup.web.auth import OPERATOR, Identity

OPERATIONS = Operations()  # this module's part of the API (`jobsup.web.app.OPERATIONS`)
operation = OPERATIONS.add

JOB_ID = Param("job_id", "integer", "path", "The job's id.")
LIMIT = Param("limit", "integer", description="At most this many (1-500).", minimum=1, maximum=500)
QUEUE = Param("queue", description="Only this queue.")
MAX_LOGS = 1000


def job_json(found: Job, *, detail: bool = False) -> dict[str, Any]:
    plain = found.to_dict()
    if not detail:
        plain.pop("history", None)
    return plain


@operation(
    "GET",
    "/jobs",
    "Jobs, newest first, one page at a time (a filtered page looks through 50,000 ids at most: it may "
    "hold fewer jobs than `limit`, or none, while `next_cursor` says older ones may follow)",
    s.JOB_PAGE,
    params=(
        Param("status", enum=FILTERS),
        QUEUE,
        Param("name", description="Only jobs of this type."),
        LIMIT,
        Param("cursor", description="`next_cursor` of the previous page of the same query."),
    ),
)
def list_jobs(client: Client, who: Identity, **filters: Any) -> dict[str, Any]:
    page, cursor = client.jobs_page(**{"limit": 50, **filters})
    return {"jobs": [job_json(j) for j in page], "next_cursor": cursor}


@operation(
    "GET",
    "/jobs/{job_id}",
    "A job with its attempts, result and logs",
    s.JOB_DETAIL,
    params=(JOB_ID,),
    errors=(400, 404),
)
def get_job(client: Client, who: Identity, job_id: int) -> dict[str, Any]:
    found = client.get(job_id)
    if found is None:
        raise JobNotFound(f"no job with id {job_id}")
    logs = [line.to_dict() for line in client.logs(job_id, limit=MAX_LOGS)]
    return {**job_json(found, detail=True), "logs": logs}


@operation(
    "POST",
    "/jobs",
    "Enqueue a job (its payload checked against the job's definition)",
    s.ID,
    role=OPERATOR,
    body=s.ENQUEUE,
    status=201,
    errors=(400, 409),
)
def enqueue_job(client: Client, who: Identity, body: dict[str, Any]) -> dict[str, Any]:
    options = {key: value for key, value in body.items() if key not in ("name", "payload")}
    return {"id": client.enqueue_as_operator(body["name"], body.get("payload"), **options, actor=who.actor)}


@operation(
    "POST", "/jobs/{job_id}/cancel", "Cancel a pending or running job", s.CANCEL, role=OPERATOR, params=(JOB_ID,)
)
def cancel_job(client: Client, who: Identity, job_id: int) -> dict[str, Any]:
    done = client.cancel(job_id, actor=who.actor)
    job = client.get(job_id) if done else None
    # A running job was only asked: it ends cancelled once its worker stops it.
    return {"done": done, "stopping": job is not None and job.status == "running"}


@operation(
    "POST",
    "/jobs/{job_id}/rerun",
    "Make a new job from a finished one, linked to it (rerun_of)",
    s.RERUN,
    role=OPERATOR,
    params=(JOB_ID,),
    errors=(400, 404),
    tag="jobs",
)
def rerun_job(client: Client, who: Identity, job_id: int) -> dict[str, Any]:
    return {"id": client.rerun(job_id, actor=who.actor), "rerun_of": job_id}


@operation(
    "POST",
    "/jobs/{job_id}/retry",
    "Retry a dead-lettered job",
    s.DONE,
    role=OPERATOR,
    params=(JOB_ID,),
    errors=(400, 409),
    tag="dead letters",
)
def retry_job(client: Client, who: Identity, job_id: int) -> dict[str, Any]:
    return {"done": client.dead_letters.retry(job_id, actor=who.actor)}


@operation(
    "GET", "/dead-letters", "Dead-lettered jobs, newest first", s.DEAD_PAGE, params=(QUEUE, LIMIT), tag="dead letters"
)
def list_dead(client: Client, who: Identity, queue: str | None = None, limit: int = 100) -> dict[str, Any]:
    return {"jobs": [job_json(j) for j in client.dead_letters.list(queue=queue, limit=limit)]}


@operation(
    "POST",
    "/dead-letters/retry",
    "Retry the dead letters `ids`, or all of them when `ids` is left out",
    s.COUNT,
    role=OPERATOR,
    body=s.IDS,
    tag="dead letters",
    errors=(400, 409),
)
def retry_dead(client: Client, who: Identity, body: dict[str, Any]) -> dict[str, Any]:
    ids = body.get("ids")
    if ids is None:
        return {"count": client.dead_letters.retry_all(actor=who.actor)}
    if not ids:
        raise ApiError(400, "body: 'ids' is empty; leave it out to retry every dead letter")
    return {"count": sum(client.dead_letters.retry(job_id, actor=who.actor) for job_id in ids)}


@operation(
    "POST",
    "/dead-letters/purge",
    "Delete dead letters (all, or those finished more than `older_than` ago)",
    s.COUNT,
    role=OPERATOR,
    body=s.PURGE,
    tag="dead letters",
)
def purge_dead(client: Client, who: Identity, body: dict[str, Any]) -> dict[str, Any]:
    return {"count": client.dead_letters.purge(older_than=body.get("older_than"), actor=who.actor)}
