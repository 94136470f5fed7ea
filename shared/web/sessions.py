"""Browser sessions: the signed cookie a login (the form, or a page's ``?token=`` link)
sets, recorded on the server (`jobsup.store.websessions`) so that logout ends it there."""

from __future__ import annotations

from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobsup.store.websessions import WebSessions
from jobsup.web.api import ApiError
from jobsup.web.auth import SESSION_COOKIE, SESSION_SECONDS, Auth, Identity
from jobsup.web.security import client_key


async def begin(request: Request, response: Response, who: Identity) -> Response:
    """`response` with the cookie of a new session of `who`, recorded on the server."""
    auth: Auth = request.app.state.auth
    cookie, session_id = auth.session_cookie(who)
    await run_in_threadpool(lambda: _store(request).web_session_open(session_id, who.name, SESSION_SECONDS))
    response.set_cookie(
        SESSION_COOKIE,
        cookie,
        max_age=SESSION_SECONDS,
        httponly=True,
        samesite="strict",
        secure=bool(request.app.state.secure_cookies),
        path=request.scope.get("root_path") or "/",
    )
    return response


async def end(request: Request, response: Response) -> Response:
    """`response` deleting the session cookie, whose session ends on the server too: a copy
    of the cookie no longer works."""
    auth: Auth = request.app.state.auth
    found = auth.session(request.cookies.get(SESSION_COOKIE, ""))
    if found is not None:
        await run_in_threadpool(lambda: _store(request).web_session_end(found[1]))
    response.delete_cookie(SESSION_COOKIE, path=request.scope.get("root_path") or "/")
    return response


def _store(request: Request) -> WebSessions:
    """The sessions' table. In a worker thread only: the client's first call through its
    store checks the schema, a round trip the event loop must not wait for."""
    return request.app.state.client.store.web_sessions  # type: ignore[no-any-return]


def wants_token_login(request: Request) -> bool:
    return "token" in request.query_params and request.app.state.identify is None


async def token_login(request: Request) -> Response:
    """A page's address with ``?token=`` (the link `jobsup dashboard` prints): a session for
    the token's user and a redirect to the same address without the token, so it leaves the
    address bar and the history. Wrong tokens count against the client's address like
    wrong passwords (`ApiError` 401, then 429)."""
    auth: Auth = request.app.state.auth
    key = client_key(request)
    wait, stamp = auth.limiter.reserve(key)  # counted before the check: no concurrent bypass
    if wait:
        raise ApiError(429, f"too many failed logins: try again in {wait:.0f}s")
    who = auth.bearer(request.query_params["token"])
    if who is None:
        raise ApiError(401, "the token in the address is not valid: open the login link the dashboard printed")
    auth.limiter.release(key, stamp=stamp)
    kept = [(name, value) for name, value in request.query_params.multi_items() if name != "token"]
    target = request.url.path + (f"?{urlencode(kept)}" if kept else "")
    return await begin(request, RedirectResponse(target, status_code=303), Identity(who.name, who.role, "session"))
