"""`jobsup dashboard`: the app under uvicorn, in its own process. It listens on loopback
unless told otherwise, and refuses any other address without credentials configured. With
none configured it requires a random operator token of its own, and prints once the login
link that carries it (as Jupyter does).

Importing this module imports the whole ``web`` extra (uvicorn here, Starlette and Jinja2
through the app), so the command's guarded import of it is what names a missing extra."""

from __future__ import annotations

import errno
import ipaddress
import socket
import sys

import uvicorn

from jobsup.client import Client
from jobsup.errors import ConfigurationError
from jobsup.settings import Settings
from jobsup.web.app import build
from jobsup.web.auth import LOOPBACK_HOSTS, Auth
from jobsup.web.connections import Guard, accept_backlog, protocol, total_connections


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback one."""
    if host.strip("[]").lower() in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        found = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(found) and all(ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in found)


def check_bind(host: str, auth: Auth) -> None:
    if auth.open and not is_loopback(host):
        raise ConfigurationError(
            f"the dashboard would serve {host} without authentication: set dashboard_tokens or "
            "dashboard_users (JOBSUP_DASHBOARD_TOKENS=operator:<token>), or listen on 127.0.0.1"
        )


def check_port(host: str, port: int) -> None:
    """A taken port as one line saying what to do, before uvicorn logs its own error and
    exits. (Another process may still take it in between: uvicorn then says so itself.)"""
    address = host.strip("[]")
    try:
        family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0][0]  # ::1 is IPv6
        with socket.create_server((address, port), family=family):
            pass
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            return  # not a taken port (a name that does not resolve, ...): uvicorn says what it is
        raise ConfigurationError(
            f"cannot serve the dashboard on {host}:{port}: {exc.strerror or exc}; another jobsup dashboard may "
            "hold it: give another with --port or JOBSUP_DASHBOARD_PORT"
        ) from None


def serve(settings: Settings, *, log_level: str = "info") -> None:
    auth = Auth.parse(settings.dashboard_tokens, settings.dashboard_users, settings.dashboard_secret)
    check_bind(settings.dashboard_host, auth)  # so open credentials serve loopback only
    check_port(settings.dashboard_host, settings.dashboard_port)
    token = auth.one_time_token() if auth.open else None
    app = build(
        Client(settings.database_url),
        auth,
        secure_cookies=settings.dashboard_secure_cookies,
        trusted_proxies=settings.dashboard_trusted_proxies,
    )
    if token is not None:
        print(login_link(settings.dashboard_host, settings.dashboard_port, token), file=sys.stderr, flush=True)
    total = total_connections()
    uvicorn.run(
        app,
        host=settings.dashboard_host,
        port=settings.dashboard_port,
        log_level=log_level,
        proxy_headers=False,
        server_header=False,
        h11_max_incomplete_event_size=64 * 1024,
        http=protocol(Guard(total)),  # header timeout, connections per client and in all
        limit_concurrency=total,
        backlog=accept_backlog(),  # see jobsup.web.connections
    )


def login_link(host: str, port: int, token: str) -> str:
    """What `jobsup dashboard` prints when it made its own token."""
    shown = f"[{host}]" if ":" in host else host
    return (
        "no dashboard_tokens or dashboard_users configured: this process's operator token is required; "
        f"log in at\n    http://{shown}:{port}/?token={token}"
    )
