"""What the dashboard's forms post: each checks the user (operator role), the CSRF token,
runs one audited client call as ``web:<user>``, and goes back to the page with a message."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from jobsup.client import Client
from jobsup.errors import BadInput, ConfigurationError, DuplicateJob, JobNotFound
from jobsup.secrets import SealedParameterError
from jobsup.web import sessions
from jobsup.web.api import MAX_BODY, ApiError, log
from jobsup.web.auth import Auth, Identity
from jobsup.web.pages import error_page, login_page
from jobsup.web.security import check_csrf, identify, login_keys

Act = Callable[[Client, Identity, dict[str, list[str]], dict[str, str]], str]


async def read_form(request: Request) -> dict[str, list[str]]:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise ApiError(413, "form too large")
    try:
        # Blank answers kept: a box the user emptied says so (a schedule's queue cleared).
        return parse_qs(body.decode(), keep_blank_values=True, max_num_fields=1100)
    except (UnicodeDecodeError, ValueError):
        raise ApiError(400, "the form could not be read") from None


def first(form: dict[str, list[str]], key: str) -> str | None:
    values = form.get(key)
    return values[0] if values else None


async def checked_form(request: Request, who: Identity) -> dict[str, list[str]]:
    """The form `who` posted, once its CSRF token and their operator role are checked."""
    form = await read_form(request)
    check_csrf(request, who, first(form, "csrf"))
    if not who.may_act:
        raise ApiError(403, "this action needs the operator role")
    return form


def back(request: Request, form: dict[str, list[str]], message: str) -> Response:
    root = request.scope.get("root_path", "")
    target = first(form, "back") or "/"
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        target = "/"  # only our own pages: never an open redirect
    joiner = "&" if "?" in target else "?"
    # Signed, so a link from elsewhere cannot put words of its own in the page's notice.
    signature = request.app.state.auth.sign("msg", message)
    return RedirectResponse(f"{root}{target}{joiner}msg={quote(message)}&sig={signature}", status_code=303)


def action(act: Act) -> Callable[[Request], Any]:
    async def run(request: Request) -> Response:
        who: Identity | None = None
        try:
            who = await identify(request)
            form = await checked_form(request, who)
            message = await run_in_threadpool(act, request.app.state.client, who, form, dict(request.path_params))
        except ApiError as exc:
            return error_page(request, exc.status, exc.message, who)
        except (BadInput, DuplicateJob) as exc:
            return error_page(request, 400 if isinstance(exc, BadInput) else 409, str(exc), who)
        except JobNotFound as exc:
            return error_page(request, 404, str(exc), who)
        except (ConfigurationError, SealedParameterError) as exc:  # a rerun of a sealed job no key opens
            return error_page(request, 400, str(exc), who)
        return back(request, form, message)

    return run


def _job_id(params: dict[str, str]) -> int:
    raw = params["job_id"]
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        raise ApiError(400, f"{raw[:30]!r} is not a job id")
    return int(raw)


def _retry(client: Client, who: Identity, form: dict[str, list[str]], params: dict[str, str]) -> str:
    job_id = _job_id(params)
    done = client.dead_letters.retry(job_id, actor=who.actor)
    return f"job {job_id} retried" if done else f"job {job_id} is not dead-lettered"


def _rerun(client: Client, who: Identity, form: dict[str, list[str]], params: dict[str, str]) -> str:
    job_id = _job_id(params)
    return f"job {client.rerun(job_id, actor=who.actor)} is a rerun of job {job_id}"


def _cancel(client: Client, who: Identity, form: dict[str, list[str]], params: dict[str, str]) -> str:
    job_id = _job_id(params)
    if not client.cancel(job_id, actor=who.actor):
        return f"job {job_id} had finished"
    job = client.get(job_id)
    if job is not None and job.status == "running":  # a request: it ends once its worker stops it
        return f"job {job_id} asked to stop: it ends cancelled once its worker stops it"
    return f"job {job_id} cancelled"


def _retry_dead(client: Client, who: Identity, form: dict[str, list[str]], params: dict[str, str]) -> str:
    if first(form, "all"):
        return f"{client.dead_letters.retry_all(actor=who.actor)} dead letters retried"
    raw = form.get("id", [])
    if not raw:
        return "nothing selected"
    if not all(value.isascii() and value.isdigit() and len(value) <= 18 for value in raw):
        raise ApiError(400, "the selected ids are not job ids")
    return f"{sum(client.dead_letters.retry(int(v), actor=who.actor) for v in raw)} dead letters retried"


def _purge_dead(client: Client, who: Identity, form: dict[str, list[str]], params: dict[str, str]) -> str:
    """What `POST /api/v1/dead-letters/purge` does, from the dead letters page: audited alike."""
    older_than = (first(form, "older_than") or "").strip()
    if not older_than:
        raise ApiError(400, "give how old a dead letter must be to go, like 30d")
    count = client.dead_letters.purge(older_than=older_than, actor=who.actor)
    return f"{count} dead letters older than {older_than} purged"


def _pause(client: Client, who: Identity, form: dict[str, list[str]], params: dict[str, str]) -> str:
    queue = params["queue"]
    done = client.queues.pause(queue, reason=first(form, "reason") or None, actor=who.actor)
    return f"queue {queue} paused" if done else f"queue {queue} was paused already"


def _resume(client: Client, who: Identity, form: dict[str, list[str]], params: dict[str, str]) -> str:
    queue = params["queue"]
    return f"queue {queue} resumed" if client.queues.resume(queue, actor=who.actor) else f"queue {queue} was not paused"


def _schedule(enabled: bool) -> Act:
    def act(client: Client, who: Identity, form: dict[str, list[str]], params: dict[str, str]) -> str:
        name = params["name"]
        if not client.schedules.set_enabled(name, enabled, actor=who.actor):
            return f"no schedule {name}"
        return f"schedule {name} {'enabled' if enabled else 'disabled'}"

    return act


def _reset(client: Client, who: Identity, form: dict[str, list[str]], params: dict[str, str]) -> str:
    name = params["name"]
    return f"breaker {name} reset" if client.breakers.reset(name, actor=who.actor) else f"breaker {name} was closed"


async def login(request: Request) -> Response:
    auth: Auth = request.app.state.auth
    try:
        form = await read_form(request)
        check_csrf(request, None, first(form, "csrf"))
    except ApiError as exc:
        return error_page(request, exc.status, exc.message)
    name, password = (first(form, "user") or "")[:200], (first(form, "password") or "")[:1000]
    keys = login_keys(request, name)
    wait, stamp = auth.limiter.reserve(*keys)  # counted before the check: no concurrent bypass
    if wait:
        return login_page(request, status=429, error=f"too many failed logins: try again in {wait:.0f}s")
    who = await run_in_threadpool(auth.password, name, password, "session")
    if who is None:
        log.warning("web.auth_failed by=login client=%s", keys[0].removeprefix("addr:"))
        return login_page(request, status=401, error="wrong user name or password")
    auth.limiter.release(*keys, stamp=stamp)
    home = RedirectResponse(f"{request.scope.get('root_path', '')}/", status_code=303)
    return await sessions.begin(request, home, who)


async def logout(request: Request) -> Response:
    try:
        form = await read_form(request)
        check_csrf(request, None, first(form, "csrf"))
    except ApiError as exc:
        return error_page(request, exc.status, exc.message)
    return await sessions.end(request, RedirectResponse(f"{request.scope.get('root_path', '')}/login", status_code=303))


def routes() -> list[BaseRoute]:
    post = ["POST"]
    return [
        Route("/login", login, methods=post),
        Route("/logout", logout, methods=post),
        Route("/actions/jobs/{job_id}/retry", action(_retry), methods=post),
        Route("/actions/jobs/{job_id}/cancel", action(_cancel), methods=post),
        Route("/actions/jobs/{job_id}/rerun", action(_rerun), methods=post),
        Route("/actions/dead/retry", action(_retry_dead), methods=post),
        Route("/actions/dead/purge", action(_purge_dead), methods=post),
        Route("/actions/queues/{queue}/pause", action(_pause), methods=post),
        Route("/actions/queues/{queue}/resume", action(_resume), methods=post),
        Route("/actions/recurring/{name}/enable", action(_schedule(True)), methods=post),
        Route("/actions/recurring/{name}/disable", action(_schedule(False)), methods=post),
        Route("/actions/breakers/{name}/reset", action(_reset), methods=post),
    ]
