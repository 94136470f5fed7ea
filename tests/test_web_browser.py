"""The dashboard in a real browser (Debian's Chromium driven by Playwright) against a real
`jobsup dashboard` process and a real supervisor running real jobs. Screenshots are saved
under the test's temporary directory and their paths printed."""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import jobsup
from jobsup.secrets import ENV
from jobsup.web.auth import token_name

from helpers import claim_one, fail, succeed, wait_until
from webhelpers import Dashboard, start_dashboard

CHROMIUM = Path("/usr/bin/chromium")
SECRET = "tok-Br0wser-never-shown"
KEY = "k1:" + base64.urlsafe_b64encode(bytes(range(32))).decode()
pytestmark = pytest.mark.slow

try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError:  # pragma: no cover - the test extra installs it
    sync_playwright = None  # type: ignore[assignment]


# The pages' reads are checked on every database by the TestClient tests; a browser adds
# what the page does in it, the same on each: SQLite only, to keep the suite short.
ONE_DATABASE = pytest.mark.parametrize("url", ["sqlite"], indirect=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if sync_playwright is None or not CHROMIUM.exists():
        why = f"browser tests need playwright and {CHROMIUM} (apt-get install chromium chromium-driver)"
        if os.environ.get("CI") == "true":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    with sync_playwright() as playwright:
        found = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield found
        found.close()


@pytest.fixture
def dashboard(url: str, tmp_path: Path) -> Iterator[Dashboard]:
    """A real `jobsup dashboard` with no credentials configured: its one-time login link."""
    started = start_dashboard(url, tmp_path, env={"JOBSUP_DASHBOARD_TOKENS": "", "JOBSUP_DASHBOARD_USERS": ""})
    yield started
    started.stop()


def shot(page: Page, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


def status_of(client: jobsup.Client, job_id: int) -> str:
    found = client.get(job_id)
    return "" if found is None else found.status


@pytest.fixture
def three_states(client: jobsup.Client, start: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """A supervisor on `default`, and jobs succeeded, running, pending (queue `later`, which
    no worker serves) and dead-lettered (a sensitive parameter; it succeeds when retried)."""
    monkeypatch.setenv(ENV, KEY)
    start("--queue", "default=2")
    jobs = {
        "succeeded": client.enqueue("work", {"result": "fine"}),
        "running": client.enqueue("work", {"seconds": 120, "return_on_cancel": True}),
        "pending": client.enqueue("work", queue="later"),
        "dead_lettered": client.enqueue("sealed-app", {"to": "fail-first", "token": SECRET}, max_attempts=1),
    }
    for state, job_id in jobs.items():
        wait_until(lambda j=job_id, s=state: status_of(client, j) == s, timeout=30, what=f"job {job_id} {state}")
    return jobs


def test_overview_failed_job_retry_pause_resume_and_live_refresh(
    browser: Browser, dashboard: Dashboard, three_states: dict[str, int], client: jobsup.Client, tmp_path: Path
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.goto(dashboard.login_url())  # the link the dashboard printed: it logs in and drops the token
    assert page.url == f"{dashboard.base}/"
    default, later = page.locator('.card[data-queue="default"]'), page.locator('.card[data-queue="later"]')
    expect(default.locator(".n-running")).to_have_text("1")
    expect(default.locator(".n-failed")).to_have_text("1")
    expect(later.locator(".n-pending")).to_have_text("1")
    expect(default.locator("svg.chart").first).to_be_visible()
    expect(default.locator("svg.chart text.unit").first).to_have_text("jobs / 5 min")  # axes, with units
    expect(default.locator("svg.chart rect.ok title").last).to_contain_text("succeeded")  # the figure under the cursor
    shot(page, tmp_path, "overview")

    client.enqueue("work", queue="later")  # the page refreshes itself, without a reload
    expect(later.locator(".n-pending")).to_have_text("2", timeout=20_000)

    failed = three_states["dead_lettered"]
    default.locator(".n-failed a").click()
    page.locator(f'a[href="/jobs/{failed}"]').click()
    expect(page.locator("h1 .status")).to_have_text("dead_lettered")
    expect(page.locator("main")).to_contain_text("RuntimeError: the partner refused")
    traceback = page.locator("details.traceback")
    expect(traceback.locator("pre")).not_to_be_visible()  # folded under its attempt
    traceback.locator("summary").click()
    expect(traceback.locator("pre")).to_contain_text('jobapps.py", line')
    expect(traceback.locator("pre")).to_contain_text("in sealed_app")
    assert SECRET not in page.content()
    shot(page, tmp_path, "failed-job")
    page.get_by_role("button", name="Retry").click()
    expect(page.locator(".msg")).to_contain_text(f"job {failed} retried")
    wait_until(lambda: status_of(client, failed) == "succeeded", timeout=30, what="the retried job to succeed")
    page.reload()
    expect(page.locator("h1 .status")).to_have_text("succeeded")
    expect(page.locator(".timeline li")).to_have_count(2)
    shot(page, tmp_path, "retried-job")

    page.goto(f"{dashboard.base}/queues")
    page.locator("[data-live-toggle]").click()  # no fragment swap between pressing a button and releasing it
    row = page.locator('tr[data-queue="default"]')
    row.get_by_role("button", name="Pause").click()
    expect(row.locator(".status")).to_have_text("paused")
    shot(page, tmp_path, "queue-paused")
    assert [q["state"] for q in client.queues.list() if q["queue"] == "default"] == ["paused"]
    row.get_by_role("button", name="Resume").click()
    expect(row.locator(".status")).to_have_text("active")
    token_user = token_name(dashboard.login_url().rsplit("token=", 1)[1])
    actors = {(entry.action, entry.actor) for entry in client.audit.list(action="queue.")}
    assert actors == {("queue.pause", f"web:{token_user}"), ("queue.resume", f"web:{token_user}")}

    # A running job's page follows it live until it has finished; paused, it holds still.
    live = client.enqueue("work", {"seconds": 120, "return_on_cancel": True})
    wait_until(lambda: status_of(client, live) == "running", timeout=30, what=f"job {live} to start")
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url) if "/fragments/" in request.url else None)
    page.goto(f"{dashboard.base}/jobs/{live}")
    expect(page.locator("h1 .status")).to_have_text("running")
    expect(page.locator("#live")).to_have_attribute("data-refreshed", re.compile("."), timeout=10_000)  # it refreshes
    toggle = page.locator("[data-live-toggle]")
    toggle.click()
    expect(toggle).to_have_text("Resume live updates")
    fetched.clear()
    client.cancel(live)
    wait_until(lambda: status_of(client, live) not in ("running", ""), timeout=30, what=f"job {live} to end")
    page.wait_for_timeout(4_500)  # two refresh intervals of nothing: what is checked is that none came
    assert fetched == [] and page.locator("h1 .status").inner_text() == "running"
    toggle.click()
    ended = re.compile("cancelled|succeeded")  # a job that returns once asked to stop may end either way
    expect(page.locator("h1 .status")).to_have_text(ended, timeout=20_000)  # without a reload
    expect(page.locator("#live h1[data-final]")).to_have_count(1)
    settled = len(fetched)
    page.wait_for_timeout(4_500)  # final: no more fetches
    assert len(fetched) == settled
    assert errors == []  # no script blocked by the CSP, no failed refresh


@ONE_DATABASE
def test_a_failed_workflow_is_drawn_as_its_graph(
    browser: Browser, dashboard: Dashboard, client: jobsup.Client, tmp_path: Path
) -> None:
    flow = jobsup.Workflow("nightly-etl")
    extract = flow.add("work", step="extract", queue="etl")
    transform = flow.add("work", step="transform", deps=extract, queue="etl", max_attempts=1)
    flow.add("work", step="load", deps=transform, queue="etl")
    flow.add("work", step="notify", deps=extract, queue="etl")
    workflow_id = client.workflows.enqueue(flow)
    succeed(client, [claim_one(client, queue="etl")])  # extract
    ran = [claim_one(client, queue="etl") for _ in range(2)]  # transform and notify, now due
    steps = {client.get(job.id).step: job for job in ran}  # type: ignore[union-attr]
    failing = steps["transform"]
    fail(client, failing, error="ValueError: 3 rows without an amount")
    succeed(client, [steps["notify"]])
    page = browser.new_page(viewport={"width": 1280, "height": 700})
    page.goto(dashboard.login_url())
    page.goto(f"{dashboard.base}/workflows/{workflow_id}")
    graph = page.locator("svg.dag")
    expect(graph).to_be_visible()
    expect(graph.locator('a[data-step="transform"] rect.s-dead_lettered')).to_have_count(1)
    expect(graph.locator('a[data-step="load"] rect.s-cancelled')).to_have_count(1)
    expect(graph.locator("path.edge.failed")).to_have_count(1)
    shot(page, tmp_path, "failed-workflow")
    graph.locator('a[data-step="transform"]').click()
    expect(page.locator("h1")).to_contain_text(f"Job {failing.id}")


@ONE_DATABASE
def test_the_phone_width_layout_fits_the_screen(
    browser: Browser, dashboard: Dashboard, three_states: dict[str, int], tmp_path: Path
) -> None:
    phone = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True)
    page = phone.new_page()
    page.goto(dashboard.login_url())
    for path in ("/", "/jobs", f"/jobs/{three_states['dead_lettered']}", "/queues"):
        page.goto(dashboard.base + path)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} is {overflow}px wider than the phone"
        shot(page, tmp_path, "phone" + path.replace("/", "-").rstrip("-"))
    page.goto(dashboard.base + "/")
    cards = page.locator(".card")
    boxes = [cards.nth(i).bounding_box() for i in range(cards.count())]
    assert all(box is not None and box["width"] <= 390 for box in boxes)
    assert len({box["x"] for box in boxes if box}) == 1  # one column
    phone.close()


@ONE_DATABASE
def test_the_overview_shows_every_state_an_operator_looks_for(
    browser: Browser, dashboard: Dashboard, client: jobsup.Client, tmp_path: Path
) -> None:
    """Issue 30's screenshot of the overview with each state present: on queue `ops` a due
    job, a scheduled one, one retrying, one running, one waiting for its key's slot, the
    queue paused; and a dead letter."""
    from test_states import EXPECTED, one_of_each

    client.enqueue("ops-job", queue="ops", max_attempts=1, allow_unknown=True)
    fail(client, claim_one(client, queue="ops"), error="ValueError: the ledger is closed")
    one_of_each(client)
    client.queues.pause("ops", reason="ledger migration")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(dashboard.login_url())
    card = page.locator('.card[data-queue="ops"]')
    for state, count in EXPECTED.items():
        expect(card.locator(f".n-{state}")).to_have_text(str(count))
    expect(card.locator(".n-failed")).to_have_text("1")
    expect(card.locator(".status.s-paused")).to_have_text("paused")
    expect(page.locator(".totals .t-retrying")).to_have_text("1")
    expect(page.locator('tr[data-failure="ops-job"]')).to_have_count(2)  # the retrying error and the dead letter's
    shot(page, tmp_path, "overview-every-state")


@ONE_DATABASE
def test_a_typed_job_and_a_schedule_are_made_from_their_forms(
    browser: Browser, url: str, client: jobsup.Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, KEY)
    client.store.definitions.publish(
        [jobsup.registry.lookup(name).type for name in ("sealed-app", "work")],  # type: ignore[union-attr]
        instance="workers",
    )
    dashboard = start_dashboard(
        url, tmp_path, env={"JOBSUP_DASHBOARD_TOKENS": "", "JOBSUP_DASHBOARD_USERS": "", ENV: KEY}
    )
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(dashboard.login_url())
        page.goto(f"{dashboard.base}/definitions")
        page.get_by_role("link", name="sealed-app").click()
        form = page.locator("form.enqueue")
        expect(form.locator('input[name="p.token"]')).to_have_attribute("type", "password")
        form.locator('input[name="p.to"]').fill("browser@example.com")
        form.locator('input[name="p.token"]').fill(SECRET)
        form.locator("summary").click()  # the options
        form.locator('input[name="delay"]').fill("soonish")
        form.get_by_role("button", name="Enqueue").click()
        expect(page.locator(".msg.bad")).to_contain_text("soonish")
        expect(form.locator('input[name="p.to"]')).to_have_value("browser@example.com")  # kept
        expect(form.locator('input[name="p.token"]')).to_have_value("")  # a secret is never sent back
        shot(page, tmp_path, "enqueue-refused")
        form.locator('input[name="p.token"]').fill(SECRET)
        form.locator('input[name="delay"]').fill("")
        form.get_by_role("button", name="Enqueue").click()
        expect(page.locator(".msg")).to_contain_text("enqueued")
        job_id = int(page.url.split("/jobs/")[1].split("?")[0])
        assert SECRET not in page.content()
        found = client.get(job_id)
        assert found is not None and found.payload == {"to": "browser@example.com", "token": "***"}

        page.goto(f"{dashboard.base}/recurring")
        page.get_by_role("link", name="New schedule").click()
        schedule = page.locator("form.schedule")
        schedule.locator('input[name="name"]').fill("browser-nightly")
        schedule.locator('select[name="job"]').select_option("work")
        schedule.locator('input[name="cron"]').fill("30 2 * * *")
        schedule.locator('input[name="timezone"]').fill("Europe/Berlin")
        schedule.get_by_role("button", name="Preview").click()
        slots = page.locator("ol.slots li")
        expect(slots).to_have_count(5)
        expect(slots.first).to_contain_text("02:30")
        shot(page, tmp_path, "schedule-preview")
        page.locator("form.schedule").get_by_role("button", name="Save").click()
        expect(page.locator(".msg")).to_contain_text("schedule browser-nightly saved")
        page.get_by_role("link", name="Edit").click()
        expect(page.locator('input[name="cron"]')).to_have_value("30 2 * * *")
        assert [(s.name, s.cron, s.timezone) for s in client.schedules.list()] == [
            ("browser-nightly", "30 2 * * *", "Europe/Berlin")
        ]
    finally:
        dashboard.stop()


@ONE_DATABASE
def test_every_page_opens_in_the_browser_without_an_error(
    browser: Browser, dashboard: Dashboard, three_states: dict[str, int], client: jobsup.Client, tmp_path: Path
) -> None:
    """Each page of the navigation and each kind of detail page, with something on it: it
    answers 200, has its heading, fits a laptop's width and logs no script error (a CSP
    refusal is one)."""
    from jobsup.web.render import NAV

    flow = jobsup.Workflow("report")
    flow.add("work", step="only", queue="later")
    workflow_id = client.workflows.enqueue(flow)
    batch_id = client.batches.enqueue([{"name": "work", "queue": "later"}] * 2, name="pair")
    client.calendars.add("weekend", [{"weekdays": ["sat", "sun"]}], timezone="UTC")
    client.add_recurring("nightly", job="work", cron="0 3 * * *", queue="later")
    details = [
        f"/jobs/{three_states['dead_lettered']}",
        f"/workflows/{workflow_id}",
        f"/batches/{batch_id}",
        "/definitions/work",
        "/recurring/new",
        "/recurring/nightly/edit",
    ]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.goto(dashboard.login_url())
    for path in [path for _, path in NAV] + details:
        answer = page.goto(dashboard.base + path)
        assert answer is not None and answer.status == 200, path
        expect(page.locator("main h1")).to_be_visible()
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} is {overflow}px wider than the window"
        shot(page, tmp_path, "page" + path.replace("/", "-"))
    assert errors == []


@ONE_DATABASE
def test_every_button_and_the_login_form_work_in_the_browser(
    browser: Browser, url: str, client: jobsup.Client, tmp_path: Path
) -> None:
    """The forms the other browser tests do not press: a password login and logout, cancel,
    rerun, the dead letters' bulk retry and purge, a schedule's disable and enable, a
    breaker's reset; each audited as the user."""
    from webhelpers import PASSWORD, USERS

    done = client.enqueue("work", queue="later", max_attempts=1)
    succeed(client, [claim_one(client, queue="later")])
    dead = [client.enqueue("work", queue="later", max_attempts=1) for _ in range(2)]
    for _ in dead:
        fail(client, claim_one(client, queue="later"), error="RuntimeError: no")
    client.enqueue("probed", queue="probed", max_attempts=1)
    fail(client, claim_one(client, queue="probed"), error="RuntimeError: partner down")  # opens its breaker
    client.add_recurring("nightly", job="work", cron="0 3 * * *", queue="later")
    cancel_me = client.enqueue("work", queue="later")  # after the claims above: it stays pending
    dashboard = start_dashboard(url, tmp_path, env={"JOBSUP_DASHBOARD_USERS": USERS, "JOBSUP_DASHBOARD_TOKENS": ""})
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{dashboard.base}/")
        expect(page.locator("h1")).to_have_text("Log in")
        page.locator('input[name="user"]').fill("alice")
        page.locator('input[name="password"]').fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        expect(page.locator(".who")).to_contain_text("alice")

        page.goto(f"{dashboard.base}/jobs/{cancel_me}")
        page.get_by_role("button", name="Cancel").click()
        expect(page.locator(".msg")).to_contain_text(f"job {cancel_me} cancelled")
        page.goto(f"{dashboard.base}/jobs/{done}")
        page.get_by_role("button", name="Rerun").click()
        expect(page.locator(".msg")).to_contain_text(f"is a rerun of job {done}")

        page.goto(f"{dashboard.base}/dead")
        page.get_by_label(f"select job {dead[0]}").check()
        page.get_by_role("button", name="Retry selected").click()
        expect(page.locator(".msg")).to_contain_text("1 dead letters retried")
        page.locator('input[name="older_than"]').fill("0s")
        page.get_by_role("button", name="Purge").click()
        expect(page.locator(".msg")).to_contain_text("2 dead letters older than 0s purged")  # and the probe

        page.goto(f"{dashboard.base}/recurring")
        page.get_by_role("button", name="Disable").click()
        expect(page.locator(".msg")).to_contain_text("schedule nightly disabled")
        page.get_by_role("button", name="Enable").click()
        expect(page.locator(".msg")).to_contain_text("schedule nightly enabled")

        page.goto(f"{dashboard.base}/breakers")
        page.get_by_role("button", name="Reset").click()
        expect(page.locator(".msg")).to_contain_text("breaker probed reset")
        shot(page, tmp_path, "breaker-reset")

        page.get_by_role("button", name="Log out").click()
        expect(page.locator("h1")).to_have_text("Log in")
    finally:
        dashboard.stop()
    assert status_of(client, cancel_me) == "cancelled" and status_of(client, dead[0]) == "pending"
    assert client.get(dead[1]) is None  # purged
    actions = {entry.action for entry in client.audit.list() if entry.actor == "web:alice"}
    assert {"job.cancel", "job.rerun", "dead.retry", "dead.purge", "recurring.disable", "recurring.enable"} <= actions
    assert "breaker.reset" in actions
