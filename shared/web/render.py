"""Rendering the dashboard's pages: the Jinja2 environment (autoescaped), and what every
page gets (the user, the CSRF token for its forms, the CSP nonce for its script)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from jobsup.store.schema import UNFINISHED_STATUSES
from jobsup.web.auth import Identity
from jobsup.web.charts import bars, line, progress
from jobsup.web.graph import workflow_graph
from jobsup.web.security import csrf_nonce

NAV = (
    ("Overview", "/"),
    ("Jobs", "/jobs"),
    ("Dead letters", "/dead"),
    ("Queues", "/queues"),
    ("Recurring", "/recurring"),
    ("Workers", "/workers"),
    ("Workflows", "/workflows"),
    ("Batches", "/batches"),
    ("Definitions", "/definitions"),
    ("Breakers", "/breakers"),
    ("Calendars", "/calendars"),
    ("Audit", "/audit"),
)


def _age(value: Any) -> str:
    if not isinstance(value, datetime):
        return ""
    seconds = max(0.0, (datetime.now(UTC) - value).total_seconds())
    return _seconds(seconds) + " ago"


def _seconds(value: Any) -> str:
    if value is None:
        return "-"
    seconds = float(value)
    if seconds < 90:
        return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _when(value: Any) -> str:
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return "" if value is None else str(value)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


env = Environment(
    loader=FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
env.filters.update(age=_age, seconds=_seconds, when=_when, pretty=_pretty)
env.globals.update(
    bars=bars, line=line, nav=NAV, progress=progress, unfinished=UNFINISHED_STATUSES, workflow_graph=workflow_graph
)


def page(request: Request, template: str, who: Identity | None, status: int = 200, **context: Any) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    auth = request.app.state.auth
    values = {
        "request": request,
        "root": root,
        "who": who,
        "csrf": auth.csrf_token(csrf_nonce(request)),
        "nonce": request.scope.get("jobsup_nonce", ""),
        "msg": _notice(request, auth),
        "path": request.url.path[len(root) :] or "/",
        **context,
    }
    return HTMLResponse(env.get_template(template).render(values), status_code=status)


def _notice(request: Request, auth: Any) -> str:
    """The outcome an action redirected here with, if it signed it."""
    message = request.query_params.get("msg", "")
    return message[:200] if message and auth.verify("msg", message, request.query_params.get("sig")) else ""
