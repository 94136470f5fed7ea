"""The web tests' app: the dashboard and API on a test database, with an operator token, a
read-only token and an operator user, driven through Starlette's TestClient; and a real
`jobsup dashboard` process."""

from __future__ import annotations

import os
import re
import resource
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from starlette.testclient import TestClient

import jobsup
from jobsup.web import asgi_app
from jobsup.web.auth import hash_password

from helpers import TESTS, wait_until

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


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Dashboard:
    """A `jobsup dashboard` process the test started (`start_dashboard`)."""

    process: subprocess.Popen[bytes]
    base: str
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def login_url(self) -> str:
        found = re.search(r"http://\S+\?token=\S+", self.output())
        assert found, self.output()
        return found.group(0)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def start_dashboard(
    url: str, tmp_path: Path, *args: str, env: dict[str, str] | None = None, open_files: int | None = None
) -> Dashboard:
    """`jobsup dashboard` on a free loopback port, its output in a file; waits until it
    answers. `open_files` lowers its soft limit of open files (`ulimit -n`)."""
    port = free_port()
    log = tmp_path / f"dashboard-{port}.log"
    command = [sys.executable, "-m", "jobsup", "dashboard", "--port", str(port), "--database-url", url, *args]
    environment = {**os.environ, "PYTHONPATH": str(TESTS), **(env or {})}

    def limit() -> None:
        if open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    with open(log, "ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=out, env=environment, preexec_fn=limit)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if process.poll() is not None:
            raise AssertionError(log.read_text())
        try:
            return httpx.get(f"{base}/login", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(up, timeout=30, what="the dashboard to answer")
    return Dashboard(process, base, log)
