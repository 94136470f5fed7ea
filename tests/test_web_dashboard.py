"""A real `jobsup dashboard` process: with no credentials configured it requires the one-time
token it printed, whoever forwards the connection."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import broker
from helpers import wait_until
from webhelpers import Dashboard, start_dashboard

API = "/api/v1"


@pytest.fixture
def dashboard(sqlite_url: str, tmp_path: Path) -> Iterator[Dashboard]:
    """A real dashboard with no tokens and no users configured."""
    started = start_dashboard(sqlite_url, tmp_path, env={"JOBSUP_DASHBOARD_TOKENS": "", "JOBSUP_DASHBOARD_USERS": ""})
    yield started
    started.stop()


def test_without_credentials_a_forwarded_client_is_not_the_operator(dashboard: Dashboard) -> None:
    port = int(dashboard.base.rsplit(":", 1)[1])
    forwarder = broker.Proxy(("127.0.0.1", port))  # a TCP forwarder: it adds no header at all
    forwarder.start()
    try:
        through = f"http://127.0.0.1:{forwarder.port}"
        read = httpx.get(f"{through}{API}/queues", headers={"Host": "127.0.0.1"}, timeout=10)
        page = httpx.get(f"{through}/jobs", headers={"Host": "localhost"}, timeout=10)
    finally:
        forwarder.stop()
    assert read.status_code == 401, read.text
    assert page.status_code == 303 and page.headers["location"] == "/login"
    direct = httpx.get(f"{dashboard.base}{API}/queues", timeout=10)  # a local process without the token
    assert direct.status_code == 401


def test_the_printed_login_url_logs_a_browser_in_and_its_token_is_a_bearer_token(dashboard: Dashboard) -> None:
    login = dashboard.login_url()
    token = login.rsplit("token=", 1)[1]
    assert login.startswith(f"{dashboard.base}/?token=") and len(token) >= 32
    assert dashboard.output().count(token) == 1  # printed once
    with httpx.Client(base_url=dashboard.base, timeout=10) as browser:
        entered = browser.get(f"/jobs?status=pending&token={token}")
        assert entered.status_code == 303 and entered.headers["location"] == "/jobs?status=pending"  # token dropped
        assert "jobsup_session=" in entered.headers["set-cookie"]
        assert browser.get("/jobs?status=pending").status_code == 200
    with httpx.Client(base_url=dashboard.base, timeout=10) as other:
        wrong = other.get("/?token=" + "x" * 43)
        assert wrong.status_code == 401 and "jobsup_session" not in wrong.headers.get("set-cookie", "")
        assert other.get("/", follow_redirects=False).status_code == 303
    bearer = {"Authorization": f"Bearer {token}"}
    read = httpx.get(f"{dashboard.base}{API}/queues", headers=bearer, timeout=10)
    assert read.status_code == 200, read.text
    assert "Traceback" not in dashboard.output()


def test_the_secure_cookies_setting_marks_cookies_secure_and_sends_hsts(sqlite_url: str, tmp_path: Path) -> None:
    env = {"JOBSUP_DASHBOARD_TOKENS": "operator:" + "t" * 32, "JOBSUP_DASHBOARD_SECURE_COOKIES": "true"}
    dashboard = start_dashboard(sqlite_url, tmp_path, env=env)
    try:
        page = httpx.get(f"{dashboard.base}/login", timeout=10)
    finally:
        dashboard.stop()
    assert "; secure" in page.headers["set-cookie"].lower()
    assert page.headers["strict-transport-security"] == "max-age=31536000"
    plain = start_dashboard(sqlite_url, tmp_path, env={**env, "JOBSUP_DASHBOARD_SECURE_COOKIES": "false"})
    try:
        page = httpx.get(f"{plain.base}/login", timeout=10)
    finally:
        plain.stop()
    assert "secure" not in page.headers["set-cookie"].lower() and "strict-transport-security" not in page.headers


def test_one_client_holding_unfinished_requests_cannot_take_the_dashboard_down(sqlite_url: str, tmp_path: Path) -> None:
    env = {"JOBSUP_DASHBOARD_TOKENS": "operator:" + "t" * 32}
    dashboard = start_dashboard(sqlite_url, tmp_path, env=env, open_files=256)
    port = int(dashboard.base.rsplit(":", 1)[1])
    held: list[socket.socket] = []
    try:
        refused = 0
        while len(held) < 300 and refused < 5:  # more than its open files: a slowloris from 127.0.0.2
            sock = socket.socket()
            sock.settimeout(0.5)
            sock.bind(("127.0.0.2", 0))
            held.append(sock)
            try:
                sock.connect(("127.0.0.1", port))
                sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
            except OSError:
                refused += 1  # its queue of connections to accept is full
        started = time.monotonic()
        answer = httpx.get(f"{dashboard.base}/login", timeout=10)  # another client, meanwhile
        assert answer.status_code == 200 and time.monotonic() - started < 5
        wait_until(lambda: all(_closed(sock) for sock in held), timeout=45, what="the unfinished requests dropped")
    finally:
        for sock in held:
            sock.close()
        dashboard.stop()
    output = dashboard.output()
    assert "Traceback" not in output and "Too many open files" not in output and len(output) < 20_000


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed `sock` (whatever it said first)."""
    sock.setblocking(False)
    try:
        while data := sock.recv(65536):
            del data
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True
