"""The JSON Schemas of the API's bodies and responses (OpenAPI 3.1 speaks JSON Schema)."""

from __future__ import annotations

from typing import Any

from jobsup.store.schema import STATUSES

ANY: dict[str, Any] = {}
STR, INT, NUM, BOOL = ({"type": kind} for kind in ("string", "integer", "number", "boolean"))


def maybe(kind: str) -> dict[str, Any]:
    return {"type": [kind, "null"]}


def obj(required: bool = True, **properties: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        found["required"] = list(properties)
    return found


def array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


TIME = maybe("string")
ERROR = obj(error=obj(status=INT, message=STR))
ATTEMPT = obj(
    attempt=INT,
    outcome=maybe("string"),
    owner=STR,
    started_at=TIME,
    finished_at=TIME,
    error=maybe("string"),
    progress=ANY,
    # Where a failure was raised, innermost last (file, line, function: no source, no values).
    traceback={"type": ["array", "null"], "items": obj(file=STR, line=maybe("integer"), function=STR)},
)
JOB = obj(
    id=INT,
    name=STR,
    queue=STR,
    status={"type": "string", "enum": list(STATUSES)},
    priority=INT,
    payload=ANY,
    attempts=INT,
    max_attempts=INT,
    run_at=TIME,
    last_error=maybe("string"),
    actor=maybe("string"),
    created_at=TIME,
    finished_at=TIME,
    result=ANY,
    workflow_id=maybe("integer"),
    batch_id=maybe("integer"),
    rerun_of=maybe("integer"),
)
LOG = obj(id=INT, job_id=INT, attempt=INT, logged_at=TIME, level=STR, message=STR)
JOB_DETAIL = {
    **JOB,
    "properties": {
        **JOB["properties"],
        "history": array(ATTEMPT),
        "logs": array(LOG),
        "progress": ANY,
        "reruns": array(INT),
    },
}
JOB_PAGE = obj(jobs=array(JOB), next_cursor=maybe("string"))
DEAD_PAGE = obj(jobs=array(JOB))
QUEUE = obj(
    queue=STR,
    pending=INT,
    running=INT,
    state={"type": "string", "enum": ["active", "paused"]},
    reason=maybe("string"),
    changed_by=maybe("string"),
    since=TIME,
)
SERIES = array({"type": ["number", "null"]})
OVERVIEW_QUEUE = obj(
    queue=STR,
    paused=BOOL,
    waiting=INT,
    pending=INT,
    retrying=INT,
    scheduled=INT,
    running=INT,
    dead_lettered=INT,
    oldest_pending_seconds=maybe("number"),
    succeeded=array(INT),
    failed=array(INT),
    latency=SERIES,
)
FAILURE_GROUP = obj(
    name=STR,
    error_type=STR,
    count=INT,
    dead_lettered=INT,
    example_job=INT,
    example_error=maybe("string"),
)
SCHEDULE = obj(
    name=STR,
    job=STR,
    cron=STR,
    timezone=STR,
    payload=ANY,
    queue=STR,
    enabled=BOOL,
    next_run_at=TIME,
    last_fired_at=TIME,
    next_slots=array(STR),
)
WORKER = obj(
    id=STR,
    kind=STR,
    host=STR,
    pid=INT,
    queue=maybe("string"),
    state=STR,
    job=maybe("integer"),
    started_at=TIME,
    heartbeat_at=TIME,
    heartbeat_age_seconds=maybe("number"),
)
STATS = obj(
    queue=STR,
    waiting=INT,
    pending=INT,
    retrying=INT,
    scheduled=INT,
    running=INT,
    succeeded=INT,
    dead_lettered=INT,
    cancelled=INT,
    oldest_pending_seconds=maybe("number"),
    per_minute=NUM,
)
AUDIT = obj(
    id=INT,
    at=STR,
    actor=STR,
    action=STR,
    target=maybe("string"),
    job_count=maybe("integer"),
    job_ids=array(INT),
    outcome=STR,
    detail=ANY,
)
LOOSE = {"type": "object"}  # rows whose columns the later issues grow (definitions, breakers, ...)
DONE = obj(done=BOOL)
CANCEL = obj(done=BOOL, stopping=BOOL)  # stopping: it was running, and ends once its worker stops it
COUNT = obj(count=INT)
RERUN = obj(id=INT, rerun_of=INT)
NAME = {"type": "string", "minLength": 1, "maxLength": 200}
ENQUEUE = {
    **obj(
        required=False,
        name=NAME,
        payload=ANY,
        queue=NAME,
        priority={"type": "integer", "minimum": -1000, "maximum": 1000},
        delay={"type": "string", "maxLength": 50},
        max_attempts={"type": "integer", "minimum": 1, "maximum": 1000},
        unique_key={"type": "string", "maxLength": 200},
    ),
    "required": ["name"],
}
ID = obj(id=INT)
IDS = obj(required=False, ids={"type": "array", "items": {"type": "integer", "minimum": 1}, "maxItems": 1000})
PURGE = obj(required=False, older_than={"type": ["string", "null"], "maxLength": 50})
REASON = obj(required=False, reason={"type": ["string", "null"], "maxLength": 1000})
ADD_SCHEDULE = {
    **obj(
        required=False,
        name=NAME,
        job=NAME,
        cron={"type": "string", "maxLength": 200},
        payload=ANY,
        queue=NAME,
        timezone={"type": "string", "maxLength": 100},
    ),
    "required": ["name", "job", "cron"],
}
