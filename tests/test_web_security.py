"""The dashboard is secure by default: authentication, roles, CSRF, security headers, no
sensitive value in any page, a rate-limited login, and no serving elsewhere without auth."""

from __future__ import annotations

import base64
import hashlib
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import jobsup
from jobsup.errors import ConfigurationError
from jobsup.secrets import ENV
from jobsup.store.schema import web_session
from jobsup.web import actions
from jobsup.web.app import OPERATIONS
from jobsup.web.auth import Auth, LoginLimiter, check_password, hash_password
from jobsup.web.server import check_bind

from helpers import claim, fail, run_jobsup, without_modules
from webhelpers import OPERATOR, PASSWORD, READER, USERS, WEB_SECRET, csrf_of, log_in, web

API = "/api/v1"
SECRET = "tok-Qp7rWz-never-shown"
KEY = "k1:" + base64.urlsafe_b64encode(bytes(range(32))).decode()
PAGES = (
    "/",
    "/fragments/overview",
    "/jobs",
    "/dead",
    "/queues",
    "/recurring",
    "/workers",
    "/workflows",
    "/batches",
    "/calendars",
    "/definitions",
    "/breakers",
    "/audit",
)


def test_an_action_without_a_token_is_401_and_a_wrong_token_too(url: str, client: jobsup.Client) -> None:
    job_id = client.enqueue("work")
    with web(url) as http:
        assert http.post(f"{API}/jobs/{job_id}/cancel").status_code == 401
        assert http.get(f"{API}/jobs").status_code == 401
        wrong = http.post(f"{API}/jobs/{job_id}/cancel", headers={"Authorization": "Bearer not-the-token-at-all"})
        assert wrong.status_code == 401 and wrong.json()["error"]["status"] == 401
        assert http.get("/jobs", follow_redirects=False).headers["location"] == "/login"
    assert client.get(job_id).status == "pending"  # type: ignore[union-attr]


def test_the_read_only_role_reads_but_gets_403_on_every_action(url: str, client: jobsup.Client) -> None:
    job_id = client.enqueue("work")
    with web(url) as http:
        assert http.get(f"{API}/jobs/{job_id}", headers=READER).status_code == 200
        unsafe = [op for op in OPERATIONS if op.method != "GET"]
        assert len(unsafe) >= 12 and all(op.role == "operator" for op in unsafe)
        values = {"job_id": str(job_id), "queue": "default", "name": "work", "workflow_id": "1", "batch_id": "1"}
        for op in unsafe:
            path = re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], op.path)
            response = http.request(op.method, API + path, json={}, headers=READER)
            assert response.status_code == 403 and "operator role" in response.json()["error"]["message"], path
        log_in(http, "bob")
        token = csrf_of(http, f"/jobs/{job_id}")
        assert "Cancel</button>" not in http.get(f"/jobs/{job_id}").text  # no buttons for a reader
        forms = [r.path for r in actions.routes() if r.path.startswith("/actions/")]  # type: ignore[attr-defined]
        assert len(forms) >= 8
        for form in forms:
            path = re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], form)
            page = http.post(path, data={"csrf": token, "back": "/"}, follow_redirects=False)
            assert page.status_code == 403, path
    assert client.get(job_id).status == "pending"  # type: ignore[union-attr]


def test_a_cross_site_post_is_refused_and_a_same_site_one_with_its_token_accepted(
    url: str, client: jobsup.Client
) -> None:
    job_id = client.enqueue("work")
    with web(url) as http:
        assert log_in(http).status_code == 303
        token = csrf_of(http, f"/jobs/{job_id}")
        action = f"/actions/jobs/{job_id}/cancel"
        refused = [
            http.post(action, data={"back": "/"}, follow_redirects=False),  # no token
            http.post(action, data={"csrf": "0" * 64, "back": "/"}, follow_redirects=False),  # a wrong one
            http.post(action, data={"csrf": token}, headers={"Origin": "https://evil.example"}, follow_redirects=False),
            http.post(action, data={"csrf": token}, headers={"Sec-Fetch-Site": "cross-site"}, follow_redirects=False),
            http.post(f"{API}/jobs/{job_id}/cancel"),  # the API with the session cookie and no X-CSRF-Token
        ]
        assert [r.status_code for r in refused] == [403] * 5
        assert client.get(job_id).status == "pending"  # type: ignore[union-attr]
        done = http.post(action, data={"csrf": token, "back": f"/jobs/{job_id}"}, follow_redirects=False)
        assert done.status_code == 303 and done.headers["location"].startswith(f"/jobs/{job_id}?msg=")
    assert client.get(job_id).status == "cancelled"  # type: ignore[union-attr]
    (entry,) = client.audit.list(action="job.cancel")
    assert entry.actor == "web:alice" and entry.job_ids == (job_id,)


def test_the_api_with_cookie_auth_takes_the_csrf_header(url: str, client: jobsup.Client) -> None:
    job_id = client.enqueue("work")
    with web(url) as http:
        log_in(http)
        token = csrf_of(http, "/")
        response = http.post(f"{API}/jobs/{job_id}/cancel", headers={"X-CSRF-Token": token})
        assert response.status_code == 200 and response.json() == {"done": True, "stopping": False}


def test_redirects_after_an_action_stay_on_our_pages(url: str) -> None:
    with web(url) as http:
        log_in(http)
        token = csrf_of(http, "/dead")
        for back in ("https://evil.example/", "//evil.example/x", "/\\evil.example"):
            response = http.post("/actions/dead/retry", data={"csrf": token, "back": back}, follow_redirects=False)
            assert response.headers["location"].startswith("/?msg="), back


@pytest.fixture
def sealed_job(url: str, client: jobsup.Client, monkeypatch: pytest.MonkeyPatch) -> int:
    """A dead-lettered job with a sensitive parameter, and a schedule with one."""
    monkeypatch.setenv(ENV, KEY)
    job_id = client.enqueue("sealed-app", {"to": "partner", "token": SECRET}, max_attempts=1)
    fail(client, claim(client)[0], error="refused")
    client.add_recurring("sealed-nightly", job="sealed-app", cron="0 3 * * *", payload={"to": "p", "token": SECRET})
    workflow = jobsup.Workflow("sealed-flow")
    workflow.add("sealed-app", {"to": "w", "token": SECRET}, step="call")
    client.workflows.enqueue(workflow)
    client.batches.enqueue([{"name": "sealed-app", "payload": {"to": "b", "token": SECRET}}], name="sealed-batch")
    return job_id


def test_a_sensitive_value_is_absent_from_every_page_and_response(
    url: str, sealed_job: int, client: jobsup.Client
) -> None:
    [flow] = client.workflows.list()
    [group] = client.batches.list()
    details = (f"/jobs/{sealed_job}", f"/workflows/{flow.id}", f"/batches/{group.id}")
    with web(url) as http:
        log_in(http)
        pages = {path: http.get(path) for path in (*PAGES, *details)}
        reads = ("/jobs", "/recurring", "/workflows", "/batches", "/audit", "/dead-letters", "/overview", *details)
        apis = {path: http.get(API + path, headers=OPERATOR) for path in reads}
    for path, response in {**pages, **apis}.items():
        assert response.status_code == 200, path
        assert SECRET not in response.text, path
    assert "***" in pages[f"/jobs/{sealed_job}"].text and "partner" in pages[f"/jobs/{sealed_job}"].text


def test_every_page_sends_csp_and_frame_headers_and_scripts_only_with_the_nonce(url: str) -> None:
    with web(url) as http:
        log_in(http)
        for path in (*PAGES, "/login", f"{API}/jobs"):
            response = http.get(path, headers=OPERATOR if path.startswith(API) else {})
            policy = response.headers["content-security-policy"]
            assert response.headers["x-frame-options"] == "DENY", path
            assert "frame-ancestors 'none'" in policy and "default-src 'none'" in policy
            nonce = re.search(r"'nonce-([^']+)'", policy).group(1)  # type: ignore[union-attr]
            scripts = re.findall(r"<script([^>]*)>", response.text)
            assert all(f'nonce="{nonce}"' in attributes for attributes in scripts), path
            assert "unsafe-inline" not in policy
        assert re.search(r"\son\w+=", http.get("/").text) is None  # no inline event handlers


def test_login_is_rate_limited(url: str) -> None:
    with web(url) as http:
        statuses = [log_in(http, "alice", "wrong password").status_code for _ in range(5)]
        assert statuses == [401] * 5
        blocked = log_in(http, "alice", PASSWORD)  # the right password, too late
        assert blocked.status_code == 429 and "too many failed logins" in blocked.text


def test_basic_auth_is_rate_limited_and_checks_passwords_off_the_event_loop(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from jobsup.web import auth as auth_module

    on_loop: list[bool] = []
    real = auth_module.check_password

    def recording(password: str, stored: str) -> bool:
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return real(password, stored)

    monkeypatch.setattr(auth_module, "check_password", recording)

    def basic(password: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(f"alice:{password}".encode()).decode()}

    with web(url) as http:
        assert http.get(f"{API}/queues", headers=basic(PASSWORD)).status_code == 200
        statuses = [http.get(f"{API}/queues", headers=basic("wrong password")).status_code for _ in range(5)]
        assert statuses == [401] * 5
        blocked = http.get(f"{API}/queues", headers=basic(PASSWORD))  # the right password, too late
        assert blocked.status_code == 429 and "too many failed logins" in blocked.text
        assert log_in(http, "alice", PASSWORD).status_code == 429  # the same limit as the login form's
    assert on_loop and not any(on_loop)


def test_concurrent_wrong_logins_do_not_get_past_the_limiter(url: str) -> None:
    import asyncio

    import httpx

    from jobsup.web import asgi_app

    from webhelpers import TOKENS, USERS

    wrong = {"Authorization": "Basic " + base64.b64encode(b"alice:wrong password").decode()}
    client = jobsup.Client(url)

    async def attack() -> list[int]:
        app = asgi_app(client=client, tokens=TOKENS, users=USERS, secret=WEB_SECRET)
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:9466") as http:
            responses = await asyncio.gather(*(http.get(f"{API}/queues", headers=wrong) for _ in range(20)))
        return [r.status_code for r in responses]

    try:
        statuses = asyncio.run(attack())
    finally:
        client.close()
    assert statuses.count(401) == 5 and statuses.count(429) == 15


def test_the_limiter_reserves_an_attempt_before_the_check_and_releases_it_on_success() -> None:
    limiter = LoginLimiter(attempts=2, window=60)
    assert limiter.reserve("u", now=0)[0] == 0
    wait, stamp = limiter.reserve("u", now=1)
    assert wait == 0 and limiter.reserve("u", now=2)[0] == pytest.approx(58)  # two in flight: blocked
    limiter.release("u", stamp=stamp)  # the second one was right
    assert limiter.blocked("u", now=2) == 0


@pytest.mark.parametrize("secure", [True, False])
def test_the_session_cookie_is_secure_exactly_when_the_csrf_cookie_is(url: str, secure: bool) -> None:
    with web(url, secure_cookies=secure) as http:
        form = http.get("/login")
        csrf = form.headers["set-cookie"]
        token = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)  # type: ignore[union-attr]
        nonce = re.search(r"jobsup_csrf=([^;]+)", csrf).group(1)  # type: ignore[union-attr]
        http.cookies.clear()  # a Secure cookie is not sent over http: send it by hand
        fields = {"csrf": token, "user": "alice", "password": PASSWORD}
        cookie = {"Cookie": f"jobsup_csrf={nonce}"}
        done = http.post("/login", data=fields, headers=cookie, follow_redirects=False)
        assert done.status_code == 303
        session = done.headers["set-cookie"]
    assert session.startswith("jobsup_session=")
    assert ("secure" in session.lower()) is secure and ("secure" in csrf.lower()) is secure


def test_the_limiter_lets_logins_through_again_after_its_window() -> None:
    limiter = LoginLimiter(attempts=2, window=60)
    limiter.failed("u", now=0)
    limiter.failed("u", now=1)
    assert limiter.blocked("u", now=30) == pytest.approx(30)
    assert limiter.blocked("u", now=61) == 0 and limiter.blocked("v", now=30) == 0


def test_a_session_is_signed_and_ends_with_its_user(url: str) -> None:
    assert Auth.parse(secret=WEB_SECRET).session("forged.cookie") is None
    with web(url) as http:
        assert log_in(http).status_code == 303
        assert http.get("/").status_code == 200
        cookie = http.cookies["jobsup_session"]
    with web(url, users="") as other:  # alice removed from the configuration
        other.cookies.set("jobsup_session", cookie)
        assert other.get("/", follow_redirects=False).status_code == 303
    with web(url) as same:  # the same configuration in another process: still logged in
        same.cookies.set("jobsup_session", cookie)
        assert same.get("/", follow_redirects=False).status_code == 200
    renewed = USERS.replace(USERS.split(",")[0], f"alice:operator:{hash_password('a new password')}")
    with web(url, users=renewed) as other:  # alice's password changed: her sessions end
        other.cookies.set("jobsup_session", cookie)
        assert other.get("/", follow_redirects=False).status_code == 303


def test_a_short_dashboard_secret_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="dashboard_secret is 11 characters; give 32 or more"):
        Auth.parse(tokens="operator:" + "t" * 20, secret="short-words")


def test_password_hashes_carry_their_cost_and_the_first_format_still_checks() -> None:
    stored = hash_password("pw", salt=b"0" * 16)
    assert stored.startswith("scrypt.131072.8.1.")  # OWASP's minimum for scrypt; no "$" for a shell to expand
    assert check_password("pw", stored) and not check_password("other", stored)
    dollars = stored.replace(".", "$")  # the "$" form hashes were made in before
    assert check_password("pw", dollars) and not check_password("other", dollars)
    assert Auth.parse(users=f"ann:read:{dollars},bob:read:{stored}").users.keys() == {"ann", "bob"}
    legacy = "scrypt$" + (b"0" * 16).hex() + "$" + hashlib.scrypt(b"pw", salt=b"0" * 16, n=2**14, r=8, p=1).hex()
    assert check_password("pw", legacy) and not check_password("other", legacy)
    assert not check_password("pw", stored.replace(".131072.", ".4194304."))  # a cost past the bound


@pytest.mark.parametrize("cost", ["legacy", "2**15"])
def test_a_login_with_an_older_hash_rehashes_it_and_says_where_to_put_it(
    cost: str, caplog: pytest.LogCaptureFixture
) -> None:
    salt = b"1" * 16
    if cost == "legacy":
        old = "scrypt$" + salt.hex() + "$" + hashlib.scrypt(b"pw-words", salt=salt, n=2**14, r=8, p=1).hex()
    else:
        digest = hashlib.scrypt(b"pw-words", salt=salt, n=2**15, r=8, p=1, maxmem=2**26).hex()
        old = f"scrypt$32768$8$1${salt.hex()}${digest}"
    auth = Auth.parse(users=f"erin:operator:{old}")
    assert any("erin" in r.getMessage() and "below" in r.getMessage() for r in caplog.records)  # said at start
    caplog.clear()
    assert auth.password("erin", "pw-words", "session") is not None
    assert auth.password("erin", "pw-words", "session") is not None
    [said] = [r.getMessage() for r in caplog.records if "erin" in r.getMessage()]  # once
    new = re.search(r"scrypt\.131072\.\S+", said).group(0)  # type: ignore[union-attr]
    assert check_password("pw-words", new) and new != old


def test_an_action_s_notice_is_shown_only_when_the_app_signed_it(url: str, client: jobsup.Client) -> None:
    client.enqueue("work", queue="mail")
    with web(url) as http:
        http.headers.update(OPERATOR)
        token = csrf_of(http, "/queues")
        done = http.post("/actions/queues/mail/pause", data={"csrf": token, "back": "/queues"}, follow_redirects=False)
        assert done.status_code == 303
        shown = http.get(done.headers["location"]).text
        assert 'class="msg" role="status"' in shown
        spoofed = http.get("/queues?msg=Your+session+expired%2C+log+in+at+evil.example").text
        assert "evil.example" not in spoofed


def test_without_credentials_the_command_listens_only_on_loopback() -> None:
    with pytest.raises(ConfigurationError, match="without authentication"):
        check_bind("0.0.0.0", Auth.parse())
    check_bind("127.0.0.1", Auth.parse())
    check_bind("0.0.0.0", Auth.parse(tokens="operator:" + "t" * 20))


def test_mounted_without_credentials_it_requires_the_token_it_logged(
    url: str, client: jobsup.Client, caplog: pytest.LogCaptureFixture
) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount
    from starlette.testclient import TestClient

    from jobsup.web import asgi_app

    app = asgi_app(client=client, tokens="", users="", secret=WEB_SECRET)
    token = app.one_time_token
    assert token and len(token) >= 32
    assert [r.getMessage().count(f"?token={token}") for r in caplog.records if r.name == "jobsup.web"] == [1]
    host = Starlette(routes=[Mount("/ops", app=app)])
    with TestClient(host, base_url="http://127.0.0.1", client=("127.0.0.1", 50000)) as http:
        assert http.get("/ops/api/v1/queues").status_code == 401  # loopback, loopback Host: still no one
        assert http.get("/ops/jobs", follow_redirects=False).headers["location"] == "/ops/login"
        assert "?token=" in http.get("/ops/login").text  # the login page says how to get in
        entered = http.get(f"/ops/jobs?token={token}", follow_redirects=False)
        assert entered.status_code == 303 and entered.headers["location"] == "/ops/jobs"
        assert http.get("/ops/jobs", follow_redirects=False).status_code == 200
        assert http.get("/ops/api/v1/queues", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_bad_credentials_settings_are_refused() -> None:
    for tokens, users in (("admin:" + "t" * 20, ""), ("operator:short", ""), ("", "carol:operator:plain")):
        with pytest.raises(ConfigurationError):
            Auth.parse(tokens, users)


def test_mounted_under_a_prefix_with_the_host_app_s_identity(url: str, client: jobsup.Client) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount
    from starlette.testclient import TestClient

    from jobsup.web import OPERATOR as OPERATOR_ROLE
    from jobsup.web import Identity, asgi_app

    def who(request: Any) -> Identity | None:
        user = request.headers.get("x-host-user")
        return None if user is None else Identity(user, OPERATOR_ROLE, "host")

    client.enqueue("work", queue="mail")
    host = Starlette(routes=[Mount("/ops", app=asgi_app(client=client, identify=who))])
    with TestClient(host, base_url="http://app.example") as http:
        assert http.get("/ops/queues", follow_redirects=False).headers["location"] == "/ops/login"
        assert http.get("/ops/api/v1/queues").status_code == 401
        http.headers["x-host-user"] = "carol"
        page = http.get("/ops/queues").text
        assert 'href="/ops/jobs"' in page and 'action="/ops/actions/queues/mail/pause"' in page
        token = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
        done = http.post(
            "/ops/actions/queues/mail/pause", data={"csrf": token, "back": "/queues"}, follow_redirects=False
        )
        assert done.status_code == 303 and done.headers["location"].startswith("/ops/queues?msg=")
        assert http.get("/ops/api/v1/queues").json()[0]["state"] == "paused"
    assert client.audit.list(action="queue.pause")[0].actor == "web:carol"


def test_the_dashboard_command_refuses_a_public_address_without_credentials(sqlite_url: str) -> None:
    result = run_jobsup(
        "dashboard", "--host", "0.0.0.0", "--database-url", sqlite_url, env={"JOBSUP_DASHBOARD_TOKENS": ""}
    )
    assert result.returncode == 2 and "without authentication" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("missing", [("uvicorn",), ("jinja2",), ("starlette", "uvicorn", "jinja2")])
def test_the_dashboard_without_the_web_extra_names_it_in_one_line(tmp_path: Path, missing: tuple[str, ...]) -> None:
    env = without_modules(tmp_path / "hidden", *missing)
    result = run_jobsup("dashboard", "--port", "0", cwd=tmp_path, env=env, timeout=30)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("jobsup: the dashboard needs the web extra: pip install 'jobsup[web]'")
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_hash_password_prints_a_hash_the_dashboard_accepts() -> None:
    command = [sys.executable, "-m", "jobsup", "dashboard", "hash-password"]
    result = subprocess.run(command, input="s3cret-words\ns3cret-words\n", capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    stored = result.stdout.strip().splitlines()[-1]
    auth = Auth.parse(users=f"dana:read:{stored}")
    assert auth.password("dana", "s3cret-words", "basic") is not None
    assert auth.password("dana", "other words", "basic") is None


def test_a_host_identity_claiming_bearer_still_needs_the_csrf_token(url: str, client: jobsup.Client) -> None:
    from starlette.testclient import TestClient

    from jobsup.web import OPERATOR as OPERATOR_ROLE
    from jobsup.web import Identity, asgi_app

    client.enqueue("work", queue="mail")
    app = asgi_app(client=client, identify=lambda request: Identity("carol", OPERATOR_ROLE, "bearer"))
    with TestClient(app, base_url="http://127.0.0.1") as http:
        # A browser with the host app's session cookie sends no Authorization header.
        refused = http.post("/actions/queues/mail/pause", data={"back": "/queues"}, follow_redirects=False)
        assert refused.status_code == 403
    assert client.queues.list()[0]["state"] != "paused"


def test_logout_ends_the_session_on_the_server(url: str) -> None:
    with web(url) as http:
        assert log_in(http).status_code == 303
        cookie = http.cookies["jobsup_session"]
        assert http.get("/", follow_redirects=False).status_code == 200
        out = http.post("/logout", data={"csrf": csrf_of(http, "/")}, follow_redirects=False)
        assert out.status_code == 303
    with web(url) as copied:  # the cookie kept from before the logout (another process too)
        copied.cookies.set("jobsup_session", cookie)
        assert copied.get("/", follow_redirects=False).status_code == 303
        assert copied.get(f"{API}/queues").status_code == 401
    with web(url) as again:  # logging in again works
        assert log_in(again).status_code == 303 and again.get("/", follow_redirects=False).status_code == 200


def test_session_rows_end_at_logout_or_expiry_on_the_database_clock(client: jobsup.Client) -> None:
    sessions = client.store.web_sessions
    start = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    sessions.web_session_open("first", "alice", 60, now=start)
    sessions.web_session_open("second", "alice", 60, now=start)
    assert sessions.web_session_live("first", now=start + timedelta(seconds=59))
    assert not sessions.web_session_live("first", now=start + timedelta(seconds=61))
    assert not sessions.web_session_live("unknown", now=start)
    assert sessions.web_session_end("second") and not sessions.web_session_end("second")
    assert not sessions.web_session_live("second", now=start)
    sessions.web_session_open("third", "bob", 60, now=start + timedelta(hours=1))  # prunes the expired ones
    with client.database.read() as conn:
        kept = [row.id for row in conn.execute(web_session.select())]
    assert kept == [hashlib.sha256(b"third").hexdigest()]  # the id's digest, never the id


def test_wrong_bearer_tokens_are_rate_limited_per_client_address(url: str) -> None:
    wrong = {"Authorization": "Bearer " + "w" * 32}
    with web(url) as http:
        assert [http.get(f"{API}/queues", headers=wrong).status_code for _ in range(5)] == [401] * 5
        blocked = http.get(f"{API}/queues", headers=OPERATOR)  # the right token, too late from here
        assert blocked.status_code == 429 and "too many failed" in blocked.text
    with web(url, peer=("127.0.0.2", 50000)) as elsewhere:  # another app: its own limiter
        assert elsewhere.get(f"{API}/queues", headers=OPERATOR).status_code == 200


def test_behind_a_trusted_proxy_the_limiter_keys_on_the_forwarded_client(url: str) -> None:
    def from_client(address: str) -> dict[str, str]:
        return {"X-Forwarded-For": f"{address}, 10.0.0.7"}  # the client, then a proxy in front

    with web(url, trusted_proxies="127.0.0.1, 10.0.0.0/8") as http:
        attacker = [log_in_as(http, "wrong password", from_client("203.0.113.9")) for _ in range(6)]
        assert [r.status_code for r in attacker] == [401] * 5 + [429]
        assert log_in_as(http, PASSWORD, from_client("198.51.100.7"), user="bob").status_code == 303
    with web(url, trusted_proxies="10.0.0.1") as http:  # the proxy is not trusted: its header is not believed
        spread = [log_in_as(http, "wrong password", from_client(f"203.0.113.{n}")) for n in range(6)]
        assert [r.status_code for r in spread] == [401] * 5 + [429]


def log_in_as(http: Any, password: str, headers: dict[str, str], user: str = "alice") -> Any:
    token = csrf_of(http)
    form = {"csrf": token, "user": user, "password": password}
    return http.post("/login", data=form, headers=headers, follow_redirects=False)


@pytest.mark.postgres
def test_a_password_on_the_command_line_is_not_shown_in_ps(postgres_url: str, tmp_path: Path) -> None:
    """Security review, finding 8: `--database-url` with a password, as docs/reference/settings.md writes it,
    was readable in /proc/PID/cmdline by every local user for as long as the dashboard ran.
    (The server trusts local connections, so the password given here is not checked.)"""
    from webhelpers import start_dashboard

    with_password = postgres_url.replace("postgres@", "postgres:s3cret-pw@", 1)
    assert "s3cret-pw" in with_password
    dashboard = start_dashboard(with_password, tmp_path)
    try:
        shown = Path(f"/proc/{dashboard.process.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        assert "s3cret-pw" not in shown, shown
        assert "postgres:***@" in shown
    finally:
        dashboard.stop()
