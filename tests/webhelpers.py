"""The web tests' app: the dashboard and API on a test database, with an operator token, a
read-only token and an operator user, driven through Starlette's TestClient."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from starlette.testclient import TestClient

import jobsup
from jobsup.web import asgi_app
from jobsup.web.auth import hash_password

WEB_SECRET = "test-secret-0123456789abcdef-0123456789"
OPERATOR_TOKEN = "operator-token-0123456789abcdef"
READ_TOKEN = "read-token-0123456789abcdef"
PASSWORD = "correct horse battery"
USERS = f"alice:operator:{hash_password(PASSWORD)},bob:read:{hash_password(PASSWORD)}"
TOKENS = f"operator:{OPERATOR_TOKEN},read:{READ_TOKEN}"
OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
READER = {"Authorization": f"Bearer {READ_TOKEN}"}


@contextmanager
def web(url: str, **options: Any) -> Iterator[TestClient]:
    """A TestClient on the app for `url` (credentials as above unless `options` say)."""
    client = jobsup.Client(url)
    peer = options.pop("peer", ("127.0.0.1", 50000))
    settings = {"tokens": TOKENS, "users": USERS, "secret": WEB_SECRET, **options}
    with TestClient(asgi_app(client=client, **settings), base_url="http://127.0.0.1:9466", client=peer) as http:
        yield http
    client.close()


def csrf_of(http: TestClient, path: str = "/login") -> str:
    """The CSRF token of the forms on `path` (and the cookie it goes with, now in `http`)."""
    html = http.get(path).text
    marker = 'name="csrf" value="'
    start = html.index(marker) + len(marker)
    return html[start : html.index('"', start)]


def log_in(http: TestClient, user: str = "alice", password: str = PASSWORD) -> Any:
    token = csrf_of(http)
    return http.post("/login", data={"csrf": token, "user": user, "password": password}, follow_redirects=False)
