"""The dashboard's pages (GET) and the login; the actions they post are `jobsup.web.actions`.
Each page reads through the client, as the CLI does."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from jobsup.checks import INT64
from jobsup.client import Client
from jobsup.client.activity import empty
from jobsup.cron import next_slots
from jobsup.errors import BadInput
from jobsup.store.states import FILTERS
from jobsup.web import api_jobs, api_ops, sessions
from jobsup.web.api import ApiError
from jobsup.web.api_ops import SLOTS
from jobsup.web.auth import Identity
from jobsup.web.forms import fields_of, without_secrets
from jobsup.web.render import page
from jobsup.web.security import identify

PageFn = Callable[[Client, Request], dict[str, Any]]


def error_page(request: Request, status: int, message: str, who: Identity | None = None) -> Response:
    return page(request, "error.html", who, status=status, status_code=status, message=message)


def view(template: str, read: PageFn) -> Callable[[Request], Awaitable[Response]]:
    """A page: who is asking (to the login page if no one), then `read`, then `template`."""

    async def render(request: Request) -> Response:
        if sessions.wants_token_login(request):
            return await login_form(request)
        try:
            who = await identify(request)
        except ApiError as exc:
            if exc.status == 401:
                root = request.scope.get("root_path", "")
                return RedirectResponse(f"{root}/login", status_code=303)
            return error_page(request, exc.status, exc.message)
        try:
            context = await run_in_threadpool(read, request.app.state.client, request)
        except ApiError as exc:
            return error_page(request, exc.status, exc.message, who)
        except BadInput as exc:
            return error_page(request, 400, str(exc), who)
        return page(request, template, who, **context)

    return render


FAILURES_READ = 100  # dead letters, and retrying jobs, the overview's recent failures group at most


def _overview(client: Client, request: Request) -> dict[str, Any]:
    # A live page reads this every 5 s: a hundred of each kind are enough to group.
    failures = client.queues.recent_failures(limit=FAILURES_READ)[:10]
    return {"queues": client.queues.overview(), "failures": failures, "failures_read": FAILURES_READ}


def _jobs(client: Client, request: Request) -> dict[str, Any]:
    query = request.query_params
    filters = {key: query[key] for key in ("status", "queue", "name") if query.get(key)}
    if filters.get("status") not in (None, *FILTERS):
        raise ApiError(400, f"status {filters['status'][:50]!r} is not one of {', '.join(FILTERS)}")
    found, cursor = client.jobs_page(**filters, limit=50, cursor=query.get("cursor") or None)
    return {"jobs": found, "next_cursor": cursor, "filters": filters, "statuses": FILTERS}


def _id_of(request: Request, key: str, what: str) -> int:
    raw = request.path_params[key]
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 19 or int(raw) > INT64:
        raise ApiError(400, f"{raw[:30]!r} is not a {what} id")
    return int(raw)


def _job(client: Client, request: Request) -> dict[str, Any]:
    job_id = _id_of(request, "job_id", "job")
    found = client.get(job_id)
    if found is None:
        raise ApiError(404, f"no job with id {job_id}")
    return {"job": found, "logs": client.logs(found.id, limit=api_jobs.MAX_LOGS)}


def _workflow_or_batch(kind: str) -> PageFn:
    """The page of one workflow or batch (`kind`), read by its id."""

    def read(client: Client, request: Request) -> dict[str, Any]:
        found_id = _id_of(request, f"{kind}_id", kind)
        found = client.workflows.get(found_id) if kind == "workflow" else client.batches.get(found_id)
        if found is None:
            raise ApiError(404, f"no {kind} with id {found_id}")
        return {kind: found}

    return read


def job_type(client: Client, name: str) -> dict[str, Any]:
    """A job type's page: its definition, its parameters' form, its last hour."""
    found = client.store.definitions.get(name)
    if found is None:
        raise ApiError(404, f"no job type {name[:100]!r} is published; the definitions page lists those there are")
    hourly = client.last_hour(by="job").get(name, empty())
    return {"definition": found, "fields": fields_of(found.params), "hourly": hourly, "values": {}}


def _job_type(client: Client, request: Request) -> dict[str, Any]:
    return job_type(client, request.path_params["name"])


def _definitions(client: Client, request: Request) -> dict[str, Any]:
    hourly = client.last_hour(by="job")
    return {"definitions": client.definitions(), "hourly": hourly}


def _dead(client: Client, request: Request) -> dict[str, Any]:
    return {"jobs": client.dead_letters.list(limit=200)}


def _queues(client: Client, request: Request) -> dict[str, Any]:
    return {"queues": client.queues.list()}


def _recurring(client: Client, request: Request) -> dict[str, Any]:
    return {"schedules": [api_ops.schedule_json(s) for s in client.schedules.list()]}


SCHEDULE_FIELDS = ("name", "job", "cron", "timezone", "queue", "priority", "overlap", "payload")


def sensitive_of(client: Client, job: str) -> frozenset[str]:
    """The sensitive parameters of the job type `job` as published (none if it is not)."""
    definition = client.store.definitions.get(job) if job else None
    return frozenset(f.name for f in fields_of(definition.params if definition else None) if f.sensitive)


def schedule_form(client: Client, name: str | None, answers: Mapping[str, str]) -> dict[str, Any]:
    """The add (`name` None) or edit form of a recurring schedule: the stored schedule's
    values, overridden by `answers` (a preview's or a refused save's), never a sensitive
    value (the stored ones are masked; typed ones are taken out of the payload shown), and
    the next five slots of the cron they give."""
    values: dict[str, str] = {"timezone": "UTC", "overlap": "allow"}
    if name is not None:
        found = client.schedules.get(name)
        if found is None:
            raise ApiError(404, f"no schedule {name[:100]!r}; the recurring page lists those there are")
        values.update(
            name=found.name, job=found.job, cron=found.cron, timezone=found.timezone, queue=found.queue,
            priority=str(found.priority), overlap=found.overlap,
            payload="" if found.payload is None else json.dumps(found.payload, indent=2),
        )  # fmt: skip
    values.update({key: answers[key][:10_000] for key in SCHEDULE_FIELDS if key in answers})
    if name is not None:
        values["name"] = name
    values["payload"], hidden = without_secrets(values.get("payload", ""), sensitive_of(client, values.get("job", "")))
    slots, why = [], ""
    if values.get("cron"):
        try:
            slots = next_slots(values["cron"], values["timezone"], datetime.now(UTC), SLOTS)
        except BadInput as exc:
            why = str(exc)
    jobs = sorted(d.name for d in client.definitions())
    return {"values": values, "editing": name, "hidden": hidden, "slots": slots, "slots_error": why, "jobs": jobs}


def _schedule_form(client: Client, request: Request) -> dict[str, Any]:
    return schedule_form(client, request.path_params.get("name"), request.query_params)


def _workers(client: Client, request: Request) -> dict[str, Any]:
    return {"workers": client.workers.list()}


def _table(
    title: str, read: Callable[[Client], Sequence[Mapping[str, Any]]], columns: tuple[str, ...], link: str = ""
) -> PageFn:
    """A page listing `read`'s rows; with `link`, each row's id opens ``link/<id>``."""

    def build(client: Client, request: Request) -> dict[str, Any]:
        return {"title": title, "rows": read(client), "columns": columns, "link": link}

    return build


def _workflows(client: Client) -> list[dict[str, Any]]:
    return [w.to_dict() for w in client.workflows.list(limit=200)]


def _batches(client: Client) -> list[dict[str, Any]]:
    return [b.to_dict() for b in client.batches.list(limit=200)]


def _calendars(client: Client) -> list[dict[str, Any]]:
    return client.calendars.list()


def _audit(client: Client) -> list[dict[str, Any]]:
    return [e.to_dict() for e in client.audit.list(limit=200)]


async def login_form(request: Request) -> Response:
    if sessions.wants_token_login(request):
        try:
            return await sessions.token_login(request)
        except ApiError as exc:
            return login_page(request, status=exc.status, error=exc.message)
    return login_page(request)


def login_page(request: Request, **context: Any) -> Response:
    return page(request, "login.html", None, users=bool(request.app.state.auth.users), **context)


def routes() -> list[BaseRoute]:
    found: list[BaseRoute] = [
        Route("/", view("overview.html", _overview)),
        Route("/fragments/overview", view("overview_live.html", _overview)),
        Route("/jobs", view("jobs.html", _jobs)),
        Route("/jobs/{job_id}", view("job.html", _job)),
        Route("/fragments/jobs/{job_id}", view("job_live.html", _job)),
        Route("/dead", view("dead.html", _dead)),
        Route("/queues", view("queues.html", _queues)),
        Route("/fragments/queues", view("queues_live.html", _queues)),
        Route("/recurring", view("recurring.html", _recurring)),
        Route("/recurring/new", view("schedule_form.html", _schedule_form)),
        Route("/recurring/{name}/edit", view("schedule_form.html", _schedule_form)),
        Route("/workers", view("workers.html", _workers)),
        Route("/breakers", view("breakers.html", _table("Breakers", lambda c: c.breakers.list(), ()))),
        Route("/definitions", view("definitions.html", _definitions)),
        Route("/definitions/{name}", view("definition.html", _job_type)),
        Route(
            "/workflows",
            view(
                "table.html",
                _table("Workflows", _workflows, ("id", "name", "status", "counts", "created_at"), "/workflows"),
            ),
        ),
        Route("/workflows/{workflow_id}", view("workflow.html", _workflow_or_batch("workflow"))),
        Route(
            "/batches",
            view(
                "table.html",
                _table(
                    "Batches",
                    _batches,
                    ("id", "name", "status", "total", "counts", "created_at", "finished_at"),
                    "/batches",
                ),
            ),
        ),
        Route("/batches/{batch_id}", view("batch.html", _workflow_or_batch("batch"))),
        Route(
            "/calendars",
            view("table.html", _table("Calendars", _calendars, ("name", "timezone", "rules", "updated_at"))),
        ),
        Route(
            "/audit",
            view(
                "table.html",
                _table("Audit", _audit, ("at", "actor", "action", "target", "job_count", "outcome", "detail")),
            ),
        ),
        Route("/login", login_form, methods=["GET"]),
    ]
    return found
