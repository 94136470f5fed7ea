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
    secure_cookies: bool | None = None,
    trusted_proxies: str | None = None,
) -> Any:
    """The dashboard and API as an ASGI app.

    The database is `client`'s (a `jobsup.Client`), else `database_url`'s, else the
    configured one. Credentials are `tokens` / `users` / `secret` (as the
    ``dashboard_tokens`` / ``dashboard_users`` / ``dashboard_secret`` settings take them),
    else the configured ones. `identify`, a function of the Starlette `Request` returning an
    `Identity` (or None: 401), hands authentication to the host application instead: mounted
    under its own login, it says who the user is and whether they are an ``operator`` or
    ``read`` only. CSRF checks, security headers and the audit trail apply either way.

    With no credentials and no `identify` there is still no anonymous user: the app makes a
    random operator token for this process, logs it once (logger ``jobsup.web``, WARNING)
    and requires it; open the mounted path with ``?token=<it>`` to log a browser in. The
    token is also the app's ``one_time_token`` attribute (None when credentials are set).

    `secure_cookies` (default: the ``dashboard_secure_cookies`` setting) says users reach the
    app over HTTPS: its cookies are marked ``Secure`` and its answers carry
    ``Strict-Transport-Security``. `trusted_proxies` (default: the
    ``dashboard_trusted_proxies`` setting) lists the addresses or networks of the reverse
    proxies whose ``X-Forwarded-For`` is believed, so that the login limiter counts each
    real client's failures rather than the proxy's."""
    from jobsup.client import Client
    from jobsup.settings import load
    from jobsup.web.api import log
    from jobsup.web.app import build
    from jobsup.web.auth import Auth

    settings = load({"database_url": database_url})
    auth = Auth.parse(
        settings.dashboard_tokens if tokens is None else tokens,
        settings.dashboard_users if users is None else users,
        settings.dashboard_secret if secret is None else secret,
    )
    token = auth.one_time_token() if auth.open and identify is None else None
    secure = settings.dashboard_secure_cookies if secure_cookies is None else secure_cookies
    proxies = settings.dashboard_trusted_proxies if trusted_proxies is None else trusted_proxies
    app = build(
        client or Client(settings.database_url),
        auth,
        identify_hook=identify,
        secure_cookies=secure,
        trusted_proxies=proxies,
    )
    if token is not None:
        log.warning(
            "the dashboard has no credentials configured: log in by opening its path with ?token=%s "
            "(an operator token of this process only; set dashboard_tokens or dashboard_users to choose your own)",
            token,
        )
    app.one_time_token = token
    return app
