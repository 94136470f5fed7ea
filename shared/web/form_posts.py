"""What the dashboard's two making forms post: a job from its type's form, and a recurring
schedule added or edited. Unlike a button (`jobsup.web.actions`), a refused form is shown
again with the error and what was typed, never a sensitive value, so nothing is lost; each
call is audited as the API's is, as ``web:<user>``."""

from __future__ import annotations

import re
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from jobsup.client import Client
from jobsup.errors import BadInput, ConfigurationError, DuplicateJob
from jobsup.secrets import MASK
from jobsup.web.actions import back, checked_form, first
from jobsup.web.api import ApiError
from jobsup.web.auth import Identity
from jobsup.web.forms import fields_of, kept, masked, payload_of, untyped_payload
from jobsup.web.pages import SCHEDULE_FIELDS, error_page, job_type, schedule_form, sensitive_of
from jobsup.web.render import page
from jobsup.web.security import identify


def _priority(given: str | None) -> int | None:
    """A form's priority (None: the job type's); its range is the client's to check."""
    raw = (given or "").strip()
    if not raw:
        return None
    if not re.fullmatch(r"-?[0-9]{1,10}", raw):
        raise BadInput(f"priority {raw[:20]!r} is not a whole number (higher runs first)")
    return int(raw)


def _enqueue(client: Client, who: Identity, name: str, form: dict[str, list[str]]) -> int:
    """What `POST /api/v1/jobs` does, from a job type's form: the payload from its typed
    fields (or its JSON box), the options left empty taken from the definition."""
    definition = client.store.definitions.get(name)
    if definition is None:
        raise ApiError(404, f"no job type {name[:100]!r} is published")
    payload = payload_of(fields_of(definition.params), form) if definition.params else untyped_payload(form)
    options: dict[str, Any] = {}
    for key in ("queue", "delay", "unique_key"):
        if value := (first(form, key) or "").strip():
            options[key] = value
    if (priority := _priority(first(form, "priority"))) is not None:
        options["priority"] = priority
    return client.enqueue_as_operator(name, payload, actor=who.actor, **options)


async def enqueue(request: Request) -> Response:
    who: Identity | None = None
    client: Client = request.app.state.client
    name = request.path_params["name"]
    try:
        who = await identify(request)
        form = await checked_form(request, who)
        try:
            job_id = await run_in_threadpool(_enqueue, client, who, name, form)
        except (BadInput, DuplicateJob) as exc:
            context = await run_in_threadpool(job_type, client, name)
            context["values"] = kept(context["fields"], form)
            return page(request, "definition.html", who, status=400, error=str(exc), **context)
    except ApiError as exc:
        return error_page(request, exc.status, exc.message, who)
    except ConfigurationError as exc:  # a sensitive parameter and no key to seal it with
        return error_page(request, 400, str(exc), who)
    return back(request, {"back": [f"/jobs/{job_id}"]}, f"job {job_id} enqueued")


def _save_schedule(client: Client, who: Identity, editing: str | None, answers: dict[str, str]) -> str:
    """What `POST /api/v1/recurring` does, from the schedule form. A new schedule may not
    take an existing one's name (it would replace it unseen); an edit keeps the schedule's
    calendar, and its sensitive values, never shown, must be given again (null if it had
    none): a masked ``***`` is refused rather than stored as the value."""
    name = editing or answers.get("name", "").strip()
    stored = client.schedules.get(name) if name else None
    if editing is not None and stored is None:
        raise ApiError(404, f"no schedule {name[:100]!r}: it was removed")
    if editing is None and stored is not None:
        raise BadInput(f"schedule {name!r} exists: open it from the recurring page to edit it, or choose another name")
    job = answers.get("job", "").strip()
    if not job:
        raise BadInput("choose the job type the schedule runs")
    payload = untyped_payload({"payload": [answers.get("payload", "")]})
    withheld = masked(stored.payload) if stored is not None else set()  # what the edit form did not show
    given = payload if isinstance(payload, dict) else {}
    unsent = sorted(
        {key for key in sensitive_of(client, job) | withheld if given.get(key) == MASK} | (withheld - set(given))
    )
    if unsent:
        raise BadInput(
            f"{', '.join(unsent)}: sensitive, so shown as {MASK} and never sent back; give "
            f"{'its value' if len(unsent) == 1 else 'their values'} again in the payload (null if none)"
        )
    calendar = (stored.calendar, stored.calendar_mode, stored.calendar_policy) if stored else (None, "blackout", "skip")
    client.add_recurring(
        name,
        job=job,
        cron=answers.get("cron", "").strip(),
        payload=payload,
        queue=answers.get("queue", "").strip() or None,
        timezone=answers.get("timezone", "").strip() or "UTC",
        priority=_priority(answers.get("priority")),
        overlap=answers.get("overlap", "allow"),
        calendar=calendar[0],
        calendar_mode=calendar[1],
        calendar_policy=calendar[2],
        actor=who.actor,
    )
    return name


async def save_schedule(request: Request) -> Response:
    """Preview shows the next five slots of what was typed and saves nothing; Save adds or
    updates the schedule."""
    who: Identity | None = None
    client: Client = request.app.state.client
    try:
        who = await identify(request)
        form = await checked_form(request, who)
        answers = {key: values[0] for key, values in form.items() if values and key in SCHEDULE_FIELDS}
        editing = first(form, "editing") or None
        if first(form, "preview"):
            context = await run_in_threadpool(schedule_form, client, editing, answers)
            return page(request, "schedule_form.html", who, **context)
        try:
            name = await run_in_threadpool(_save_schedule, client, who, editing, answers)
        except BadInput as exc:
            context = await run_in_threadpool(schedule_form, client, editing, answers)
            return page(request, "schedule_form.html", who, status=400, error=str(exc), **context)
    except ApiError as exc:
        return error_page(request, exc.status, exc.message, who)
    except ConfigurationError as exc:  # a sensitive parameter and no key to seal it with
        return error_page(request, 400, str(exc), who)
    return back(request, {"back": ["/recurring"]}, f"schedule {name} saved")


def routes() -> list[BaseRoute]:
    return [
        Route("/actions/definitions/{name}/enqueue", enqueue, methods=["POST"]),
        Route("/actions/recurring/save", save_schedule, methods=["POST"]),
    ]
