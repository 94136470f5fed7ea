"""jobsup.web: the HTTP API (/api/v1, with its OpenAPI document) and the operator's dashboard.

Run it with ``jobsup dashboard`` (uvicorn, loopback by default), or mount `asgi_app()` in a
Starlette, FastAPI or Django (ASGI) project. Needs the ``web`` extra:
``pip install 'jobsup[web]'``.
"""

from __future__ import annotations

from typing import Any

from jobsup.web.auth import OPERATOR, READ, Identity

__all__ = ["OPERATOR", "READ", "Identity", "asgi_app"]


def asgi_app(
    database_url: str | None = None,
    *,
    client: Any = None,
    tokens: str | None = None,
    users: str | None = None,
    secret: str | None = None,
    identify: Any = None,
    secure_cookies: bool = False,
    allow_anonymous: bool = False,
) -> Any:
    """The dashboard and API as an ASGI app.

    The database is `client`'s (a `jobsup.Client`), else `database_url`'s, else the
    configured one. Credentials are `tokens` / `users` / `secret` (as the
    ``dashboard_tokens`` / ``dashboard_users`` / ``dashboard_secret`` settings take them),
    else the configured ones. `identify`, a function of the Starlette `Request` returning an
    `Identity` (or None: 401), hands authentication to the host application instead: mounted
    under its own login, it says who the user is and whether they are an ``operator`` or
    ``read`` only. CSRF checks, security headers and the audit trail apply either way.

    With no credentials and no `identify` the app would let anyone act as the operator
    ``anonymous``: that is refused (`ConfigurationError`) unless `allow_anonymous` is true,
    and even then only loopback clients not behind a proxy are served."""
    from jobsup.client import Client
    from jobsup.errors import ConfigurationError
    from jobsup.settings import load
    from jobsup.web.app import build
    from jobsup.web.auth import Auth

    settings = load({"database_url": database_url})
    auth = Auth.parse(
        settings.dashboard_tokens if tokens is None else tokens,
        settings.dashboard_users if users is None else users,
        settings.dashboard_secret if secret is None else secret,
    )
    if auth.open and identify is None and not allow_anonymous:
        raise ConfigurationError(
            "the dashboard has no authentication: set dashboard_tokens or dashboard_users (or pass "
            "tokens= / users=), pass identify= to use the host application's login, or pass "
            "allow_anonymous=True to serve loopback clients as the operator `anonymous`"
        )
    return build(client or Client(settings.database_url), auth, identify_hook=identify, secure_cookies=secure_cookies)
