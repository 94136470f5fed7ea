"""The request-side guards every route shares: who is asking (`identify`), the CSRF check of
state-changing requests, and the response headers (CSP with a per-response nonce)."""

from __future__ import annotations

import ipaddress
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobsup.errors import ConfigurationError
from jobsup.web.api import ApiError
from jobsup.web.auth import CSRF_COOKIE, SESSION_COOKIE, Auth, Identity, basic_credentials

CSRF_HEADER = "x-csrf-token"
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
log = logging.getLogger("jobsup.web")
# The host application's own authentication, when the dashboard is mounted under it.
Identify = Callable[[Request], Awaitable[Identity | None] | Identity | None]


async def identify(request: Request) -> Identity:
    """The request's user, or `ApiError` 401 (no or wrong credentials) / 429 (too many
    wrong ones)."""
    auth: Auth = request.app.state.auth
    hook: Identify | None = request.app.state.identify
    if hook is not None:
        found = hook(request)
        who = await found if isinstance(found, Awaitable) else found
        if who is None:
            raise ApiError(401, "not authenticated")
        return who
    header = request.headers.get("authorization", "")
    kind, _, value = header.partition(" ")
    if header:
        if kind.lower() == "bearer" and (who := _bearer(request, auth, value.strip())) is not None:
            return who
        if kind.lower() == "basic" and (who := await _basic(request, auth, value.strip())) is not None:
            return who
        raise ApiError(401, "the credentials in the Authorization header are not valid")
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie and (session := auth.session(cookie)) is not None and await _not_ended(request, session[1]):
        return session[0]
    raise ApiError(401, "not authenticated: log in, or send a bearer token or basic credentials")


async def _not_ended(request: Request, session_id: str) -> bool:
    """Whether the session has not ended (logout) on the server: a signed cookie alone
    would outlive its logout for as long as it had left."""
    client = request.app.state.client  # its store, in the thread: the first use checks the schema
    return bool(await run_in_threadpool(lambda: client.store.web_sessions.web_session_live(session_id)))


async def _basic(request: Request, auth: Auth, value: str) -> Identity | None:
    """Basic credentials, under the login form's rate limit (429 past it); the password
    check (scrypt) runs in a worker thread, not on the event loop."""
    credentials = basic_credentials(value)
    if credentials is None:
        return None
    keys = login_keys(request, credentials[0])
    wait, stamp = auth.limiter.reserve(*keys)  # counted before the check: no concurrent bypass
    if wait:
        raise ApiError(429, f"too many failed logins: try again in {wait:.0f}s")
    who = await run_in_threadpool(auth.password, *credentials, "basic")
    if who is None:
        log.warning("web.auth_failed by=basic client=%s", keys[0].removeprefix("addr:"))
    else:
        auth.limiter.release(*keys, stamp=stamp)
    return who


def _bearer(request: Request, auth: Auth, token: str) -> Identity | None:
    """A bearer token, under the login limit of the client's address (429 past it): wrong
    tokens are guesses like wrong passwords."""
    key = client_key(request)
    wait, stamp = auth.limiter.reserve(key)
    if wait:
        raise ApiError(429, f"too many failed logins: try again in {wait:.0f}s")
    who = auth.bearer(token)
    if who is None:
        log.warning("web.auth_failed by=bearer client=%s", key.removeprefix("addr:"))
    else:
        auth.limiter.release(key, stamp=stamp)
    return who


def login_keys(request: Request, name: str) -> tuple[str, str]:
    """The rate limiter's keys for a login as `name`: the client's address and the name."""
    return client_key(request), f"user:{name}"


def client_key(request: Request) -> str:
    """The rate limiter's key for the client's address: the socket's peer, or, when that is
    a proxy listed in `trusted_proxies`, the address that proxy says it forwarded for."""
    return f"addr:{client_address(request)}"


def client_address(request: Request) -> str:
    peer = request.client.host if request.client else "unknown"
    trusted: Proxies = request.app.state.trusted_proxies
    if not trusted.holds(peer):
        return peer
    # Read X-Forwarded-For from the right: each trusted proxy appended the address it got
    # the request from, and the first address no trusted proxy owns is the client's (what
    # is left of it the client could have written itself).
    hops = [hop.strip() for header in request.headers.getlist("x-forwarded-for") for hop in header.split(",")]
    for hop in reversed(hops):
        if not trusted.holds(hop):
            return hop if _address(hop) is not None else peer
    return peer


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Proxies:
    """The ``dashboard_trusted_proxies`` setting: addresses and networks (``10.0.0.0/8``)
    whose X-Forwarded-For header is believed."""

    def __init__(self, text: str = "") -> None:
        self.networks: list[Network] = []
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            try:
                self.networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                raise ConfigurationError(
                    f"dashboard_trusted_proxies: {item[:60]!r} is not an address or network; "
                    "list your reverse proxies' addresses, e.g. 127.0.0.1,10.0.0.0/8"
                ) from None

    def holds(self, address: str) -> bool:
        found = _address(address)
        return found is not None and any(found in network for network in self.networks)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip("[]").split("%")[0])
    except ValueError:
        return None


def csrf_nonce(request: Request) -> str:
    """The CSRF cookie's value, a new one if the browser has none (the response sets it)."""
    nonce = request.cookies.get(CSRF_COOKIE)
    if not nonce or len(nonce) > 100:
        nonce = request.scope.setdefault("jobsup_new_csrf", secrets.token_urlsafe(24))
    return nonce


def check_csrf(request: Request, who: Identity | None, submitted: str | None) -> None:
    """A state-changing request must come from our own pages: its origin is ours and it
    carries the token that goes with its CSRF cookie. A bearer token is never sent by a
    browser on its own, so requests made with one need no token."""
    # The header itself, not the identity's `by`, which a host app's identify hook chooses.
    carried_bearer = request.headers.get("authorization", "").lower().startswith("bearer ")
    if request.method not in UNSAFE or (who is not None and who.by == "bearer" and carried_bearer):
        return
    if request.headers.get("sec-fetch-site") == "cross-site":
        raise ApiError(403, "cross-site request refused")
    origin = request.headers.get("origin")
    if origin is not None and _origin_host(origin) != request.headers.get("host", "").lower():
        raise ApiError(403, "cross-origin request refused")
    auth: Auth = request.app.state.auth
    if not auth.csrf_ok(request.cookies.get(CSRF_COOKIE), submitted or request.headers.get(CSRF_HEADER)):
        raise ApiError(
            403,
            "missing or wrong CSRF token: reload the page and try again; a script sends its token as "
            "'Authorization: Bearer TOKEN' instead (dashboard_tokens), which needs no CSRF token",
        )


def _origin_host(origin: str) -> str:
    try:
        return (urlsplit(origin).netloc or "null").lower()
    except ValueError:
        return "null"


class SecurityHeaders:
    """Adds CSP (scripts only with this response's nonce), frame, sniffing, referrer and
    caching headers (and HSTS, with `secure_cookies`) to every response, and the CSRF cookie
    a page handed out. The referrer
    policy is same-origin, not no-referrer: under no-referrer a browser posts our own forms
    with "Origin: null", which the CSRF check refuses."""

    def __init__(self, app: ASGIApp, *, secure_cookies: bool = False) -> None:
        self.app, self.secure = app, secure_cookies
        self.one_time_token: str | None = None  # see `jobsup.web.asgi_app`

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        nonce = scope.setdefault("jobsup_nonce", secrets.token_urlsafe(16))
        policy = (
            f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'self'; img-src 'self' data:; "
            "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        )

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers: list[Any] = list(message.get("headers", []))
                headers += [
                    (b"content-security-policy", policy.encode()),
                    (b"x-frame-options", b"DENY"),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"same-origin"),
                    (b"cache-control", b"no-store"),
                ]
                if self.secure:  # served over HTTPS: browsers must not fall back to plain HTTP
                    headers.append((b"strict-transport-security", b"max-age=31536000"))
                new = scope.get("jobsup_new_csrf")
                if new:
                    flags = f"; Path={scope.get('root_path') or '/'}; SameSite=Strict; HttpOnly" + (
                        "; Secure" if self.secure else ""
                    )
                    headers.append((b"set-cookie", f"{CSRF_COOKIE}={new}{flags}".encode()))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)
