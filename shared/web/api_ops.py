"""/api/v1: queues, the overview, recurring schedules, workers, stats, and the later issues'
objects (definitions, workflows, batches, calendars, breakers, parked events, the audit trail)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from jobsup.client import Client
from jobsup.client.shapes import BreakerInfo, FailureGroup, QueueInfo, QueueOverview, QueueStats
from jobsup.cron import next_slots
from jobsup.errors import BadInput
from jobsup.store.rows import RecurringSchedule
from jobsup.web import schemas as s
from jobsup.web.api import ApiError, Operations, Param
from jobsup.web.auth import OPERATOR, Identity

OPERATIONS = Operations()  # this module's part of the API (`jobsup.web.app.OPERATIONS`)
operation = OPERATIONS.add

QUEUE = Param("queue", where="path", description="The queue's name.")
NAME = Param("name", where="path", description="The schedule's (or job type's) name.")
WORKFLOW_ID = Param("workflow_id", "integer", "path", "The workflow's id.", minimum=1)
BATCH_ID = Param("batch_id", "integer", "path", "The batch's id.", minimum=1)
LIMIT = Param("limit", "integer", description="At most this many (1-500).", minimum=1, maximum=500)
SLOTS = 5


@operation(
    "GET",
    "/overview",
    "Per queue: counts, oldest pending, the last hour in 5-minute buckets",
    s.array(s.OVERVIEW_QUEUE),
    tag="queues",
)
def overview(client: Client, who: Identity) -> list[QueueOverview]:
    return client.queues.overview()


@operation(
    "GET",
    "/failures",
    "What is failing: the last hour's dead letters and the jobs retrying now, by job type and error type",
    s.array(s.FAILURE_GROUP),
    tag="queues",
)
def recent_failures(client: Client, who: Identity) -> list[FailureGroup]:
    return client.queues.recent_failures()


@operation("GET", "/queues", "Every known queue: depth and whether it is paused", s.array(s.QUEUE), tag="queues")
def list_queues(client: Client, who: Identity) -> list[QueueInfo]:
    return client.queues.list()


@operation(
    "POST",
    "/queues/{queue}/pause",
    "Pause a queue (no instance claims its jobs)",
    s.DONE,
    role=OPERATOR,
    params=(QUEUE,),
    body=s.REASON,
    tag="queues",
)
def pause_queue(client: Client, who: Identity, queue: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"done": client.queues.pause(queue, reason=body.get("reason"), actor=who.actor)}


@operation(
    "POST", "/queues/{queue}/resume", "Resume a paused queue", s.DONE, role=OPERATOR, params=(QUEUE,), tag="queues"
)
def resume_queue(client: Client, who: Identity, queue: str) -> dict[str, Any]:
    return {"done": client.queues.resume(queue, actor=who.actor)}


def schedule_json(schedule: RecurringSchedule, *, now: datetime | None = None) -> dict[str, Any]:
    """A schedule (sensitive values already masked by the client) and its next five slots,
    as local times of its own time zone."""
    try:
        after = schedule.next_run_at or now or datetime.now(UTC)
        found = next_slots(schedule.cron, schedule.timezone, after, SLOTS, first=schedule.next_run_at)
        slots = [slot.isoformat() for slot in found]
    except BadInput:
        slots = []  # a row edited to a bad cron: shown, with no slots
    return {**schedule.to_dict(), "next_slots": slots}


@operation("GET", "/recurring", "Recurring schedules with their next five slots", s.array(s.SCHEDULE), tag="recurring")
def list_recurring(client: Client, who: Identity) -> list[dict[str, Any]]:
    return [schedule_json(schedule) for schedule in client.schedules.list()]


@operation(
    "POST",
    "/recurring",
    "Add or update a recurring schedule",
    s.SCHEDULE,
    role=OPERATOR,
    body=s.ADD_SCHEDULE,
    tag="recurring",
)
def add_recurring(client: Client, who: Identity, body: dict[str, Any]) -> dict[str, Any]:
    options = {key: value for key, value in body.items() if key != "name"}
    return schedule_json(client.add_recurring(body["name"], **options, actor=who.actor))


@operation(
    "POST",
    "/recurring/{name}/enable",
    "Enable a schedule (from now: no catch-up)",
    s.DONE,
    role=OPERATOR,
    params=(NAME,),
    tag="recurring",
)
def enable_recurring(client: Client, who: Identity, name: str) -> dict[str, Any]:
    return {"done": client.schedules.set_enabled(name, True, actor=who.actor)}


@operation(
    "POST", "/recurring/{name}/disable", "Disable a schedule", s.DONE, role=OPERATOR, params=(NAME,), tag="recurring"
)
def disable_recurring(client: Client, who: Identity, name: str) -> dict[str, Any]:
    return {"done": client.schedules.set_enabled(name, False, actor=who.actor)}


@operation("DELETE", "/recurring/{name}", "Remove a schedule", s.DONE, role=OPERATOR, params=(NAME,), tag="recurring")
def remove_recurring(client: Client, who: Identity, name: str) -> dict[str, Any]:
    return {"done": client.schedules.remove(name, actor=who.actor)}


@operation(
    "GET",
    "/workers",
    "Supervisors and workers: host, pid, current job, heartbeat age",
    s.array(s.WORKER),
    tag="workers",
)
def list_workers(client: Client, who: Identity) -> list[dict[str, Any]]:
    now = datetime.now(UTC)
    return [
        {**row, "heartbeat_age_seconds": None if beat is None else round((now - beat).total_seconds(), 1)}
        for row in client.workers.list()
        for beat in [row["heartbeat_at"]]
    ]


@operation(
    "GET",
    "/stats",
    "Per queue: counts by status, oldest pending, successes per minute",
    s.array(s.STATS),
    params=(Param("window", description="A duration such as 5m or 1h."),),
    tag="workers",
)
def stats(client: Client, who: Identity, window: str = "5m") -> list[QueueStats]:
    return client.queues.stats(window=window)


@operation("GET", "/definitions", "Published job types", s.array(s.LOOSE), tag="definitions")
def list_definitions(client: Client, who: Identity) -> list[dict[str, Any]]:
    return [d.to_dict() for d in client.definitions()]


@operation("GET", "/workflows", "Workflows, newest first", s.array(s.LOOSE), params=(LIMIT,), tag="workflows")
def list_workflows(client: Client, who: Identity, limit: int = 100) -> list[dict[str, Any]]:
    return [w.to_dict() for w in client.workflows.list(limit=limit)]


@operation(
    "GET",
    "/workflows/{workflow_id}",
    "A workflow with its steps",
    s.LOOSE,
    params=(WORKFLOW_ID,),
    tag="workflows",
    errors=(400, 404),
)
def get_workflow(client: Client, who: Identity, workflow_id: int) -> dict[str, Any]:
    found = client.workflows.get(workflow_id)
    if found is None:
        raise ApiError(404, f"no workflow with id {workflow_id}")
    return found.to_dict()


@operation(
    "GET",
    "/batches",
    "Batches, newest first",
    s.array(s.LOOSE),
    params=(LIMIT, Param("unfinished", "boolean")),
    tag="batches",
)
def list_batches(client: Client, who: Identity, limit: int = 100, unfinished: bool = False) -> list[dict[str, Any]]:
    return [b.to_dict() for b in client.batches.list(unfinished=unfinished, limit=limit)]


@operation(
    "GET",
    "/batches/{batch_id}",
    "A batch with its counts",
    s.LOOSE,
    params=(BATCH_ID,),
    tag="batches",
    errors=(400, 404),
)
def get_batch(client: Client, who: Identity, batch_id: int) -> dict[str, Any]:
    found = client.batches.get(batch_id)
    if found is None:
        raise ApiError(404, f"no batch with id {batch_id}")
    return found.to_dict()


@operation("GET", "/calendars", "Calendars (blackout and allowed windows)", s.array(s.LOOSE), tag="recurring")
def list_calendars(client: Client, who: Identity) -> list[dict[str, Any]]:
    return client.calendars.list()


@operation("GET", "/breakers", "Circuit breakers that have counted a failure", s.array(s.LOOSE), tag="definitions")
def list_breakers(client: Client, who: Identity) -> list[BreakerInfo]:
    return client.breakers.list()


@operation(
    "POST",
    "/breakers/{name}/reset",
    "Close a job type's circuit breaker",
    s.DONE,
    role=OPERATOR,
    params=(NAME,),
    tag="definitions",
)
def reset_breaker(client: Client, who: Identity, name: str) -> dict[str, Any]:
    return {"done": client.breakers.reset(name, actor=who.actor)}


@operation(
    "GET",
    "/events/parked",
    "Outbox events their destination refused for good, oldest first",
    s.array(s.LOOSE),
    params=(LIMIT,),
    tag="events",
)
def list_parked_events(client: Client, who: Identity, limit: int = 100) -> list[dict[str, Any]]:
    return client.events.parked(limit=limit)


def _parked_ids(body: dict[str, Any], verb: str) -> list[int] | None:
    ids = body.get("ids")
    if ids is not None and not ids:
        raise ApiError(400, f"body: 'ids' is empty; leave it out to {verb} every parked event")
    return None if ids is None else list(ids)


@operation(
    "POST",
    "/events/parked/retry",
    "Deliver the parked events `ids` again, or all of them when `ids` is left out",
    s.COUNT,
    role=OPERATOR,
    body=s.IDS,
    tag="events",
    errors=(400,),
)
def retry_parked_events(client: Client, who: Identity, body: dict[str, Any]) -> dict[str, Any]:
    return {"count": len(client.events.retry(_parked_ids(body, "retry"), actor=who.actor))}


@operation(
    "POST",
    "/events/parked/discard",
    "Delete the parked events `ids` undelivered, or all of them when `ids` is left out",
    s.COUNT,
    role=OPERATOR,
    body=s.IDS,
    tag="events",
    errors=(400,),
)
def discard_parked_events(client: Client, who: Identity, body: dict[str, Any]) -> dict[str, Any]:
    return {"count": len(client.events.discard(_parked_ids(body, "discard"), actor=who.actor))}


@operation(
    "GET",
    "/audit",
    "Operator actions, newest first",
    s.array(s.AUDIT),
    params=(
        Param("since", description="A duration ago, such as 1d."),
        Param("actor"),
        Param("action", description="An action, or a prefix such as queue."),
        LIMIT,
    ),
    tag="audit",
)
def list_audit(client: Client, who: Identity, **filters: Any) -> list[dict[str, Any]]:
    return [entry.to_dict() for entry in client.audit.list(**filters)]
