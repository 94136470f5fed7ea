"""The ASGI application: the JSON API under /api/v1 with its OpenAPI document, and the
dashboard's pages, behind the guards of `jobsup.web.security`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from jobsup import __version__
from jobsup.client import Client
from jobsup.web import actions, api_jobs, api_ops, form_posts, pages
from jobsup.web.api import ApiError, Operation, endpoint, error_response
from jobsup.web.auth import Auth
from jobsup.web.openapi import PREFIX, document
from jobsup.web.security import Identify, Proxies, SecurityHeaders, check_csrf, identify

# Resolved: a strict editable install links each file into a build folder, and StaticFiles
# refuses to serve a link that leads out of its directory (a 404 for every asset).
STATIC = Path(__file__).resolve().parent / "static"

# The API the app serves under /api/v1: every operation of these modules, in this order.
OPERATIONS: list[Operation] = [*api_jobs.OPERATIONS.all, *api_ops.OPERATIONS.all]


def build(
    client: Client,
    auth: Auth,
    *,
    identify_hook: Identify | None = None,
    secure_cookies: bool = False,
    trusted_proxies: str = "",
) -> Any:
    """The app on `client`; `auth` holds the credentials; `identify_hook` replaces them with
    the host application's own authentication when mounted (see `jobsup.web.asgi_app`);
    `trusted_proxies` lists the proxies whose X-Forwarded-For names the client."""
    spec = document(OPERATIONS, __version__)

    async def openapi(request: Request) -> Response:
        # Only the API's shape, but every request off loopback is authenticated, this one too.
        try:
            await identify(request)
        except ApiError as exc:
            return error_response(exc.status, exc.message)
        return JSONResponse(spec)

    routes: list[BaseRoute] = [Route(f"{PREFIX}/openapi.json", openapi, methods=["GET"])]
    by_path: dict[str, list[Any]] = {}
    for op in OPERATIONS:
        by_path.setdefault(op.path, []).append(op)
    for path, ops in by_path.items():
        for op in ops:
            run = endpoint(op, identify, check_csrf)
            routes.append(Route(PREFIX + path, run, methods=[op.method], name=op.operation_id))
    routes += pages.routes() + actions.routes() + form_posts.routes()
    routes.append(Mount("/static", StaticFiles(directory=STATIC), name="static"))
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error, Exception: _crash})
    app.state.client, app.state.auth, app.state.identify = client, auth, identify_hook
    app.state.secure_cookies = secure_cookies  # the session cookie's Secure flag, as the CSRF cookie's
    app.state.trusted_proxies = Proxies(trusted_proxies)
    return SecurityHeaders(app, secure_cookies=secure_cookies)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if request.url.path.startswith(request.scope.get("root_path", "") + PREFIX):
        return error_response(exc.status_code, str(exc.detail))
    return pages.error_page(request, exc.status_code, str(exc.detail))


async def _crash(request: Request, exc: Exception) -> Response:
    return error_response(500, "internal error (logged)")
