"""The states an operator looks for first (issue 30, item 2): retrying and scheduled pending
jobs and jobs waiting for their concurrency key, counted the same by `jobsup stats`, the
client, `/api/v1/stats`, `/api/v1/overview` and the dashboard's overview, and listed by the
job list's filters everywhere."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import jobsup

from helpers import claim_one, fail, run_jobsup
from webhelpers import READER, web

LATER = datetime.now(UTC) + timedelta(days=1)


def one_of_each(client: jobsup.Client) -> dict[str, int]:
    """On queue `ops`: a due job, a scheduled one, one retrying after a failure, one running,
    and one waiting for its key's slot (which the running one holds)."""
    ids = {"retrying": client.enqueue("ops-job", queue="ops", allow_unknown=True)}
    fail(client, claim_one(client, queue="ops"), error="RuntimeError: flaky", retry_in=3600)
    ids["running"] = client.enqueue("ops-job", queue="ops", concurrency_key="k", allow_unknown=True)
    claim_one(client, queue="ops")
    ids["waiting"] = client.enqueue("ops-job", queue="ops", concurrency_key="k", allow_unknown=True)
    ids["scheduled"] = client.enqueue("ops-job", queue="ops", run_at=LATER, allow_unknown=True)
    ids["due"] = client.enqueue("ops-job", queue="ops", allow_unknown=True)
    return ids


EXPECTED = {"waiting": 1, "pending": 3, "retrying": 1, "scheduled": 1, "running": 1}


def test_stats_the_api_and_the_dashboard_agree_on_every_count(url: str) -> None:
    client = jobsup.Client(url)
    one_of_each(client)
    [stats] = [row for row in client.queues.stats() if row["queue"] == "ops"]
    [overview] = [row for row in client.queues.overview() if row["queue"] == "ops"]
    cli = json.loads(run_jobsup("--database-url", url, "stats", "--json").stdout)
    [cli_row] = [row for row in cli if row["queue"] == "ops"]
    with web(url) as http:
        [api_stats] = [r for r in http.get("/api/v1/stats", headers=READER).json() if r["queue"] == "ops"]
        [api_overview] = [r for r in http.get("/api/v1/overview", headers=READER).json() if r["queue"] == "ops"]
        page = http.get("/", headers=READER).text
    for found in (stats, overview, cli_row, api_stats, api_overview):
        assert {key: found[key] for key in EXPECTED} == EXPECTED, found
    card = page[page.index('data-queue="ops"') :]
    for key, count in EXPECTED.items():
        shown = re.search(rf'class="n-{key}">(?:<a [^>]*>)?(\d+)', card)
        assert shown is not None and int(shown.group(1)) == count, key
    assert re.search(r'class="t-retrying">1<', page)  # the totals across queues
    table = run_jobsup("--database-url", url, "stats").stdout.splitlines()
    assert table[0].split()[:6] == ["QUEUE", "WAITING", "PENDING", "RETRYING", "SCHEDULED", "RUNNING"], table[0]
    assert [line.split()[:6] for line in table if line.startswith("ops ")] == [["ops", "1", "3", "1", "1", "1"]]


def test_the_job_list_filters_by_retrying_and_scheduled_everywhere(url: str) -> None:
    client = jobsup.Client(url)
    ids = one_of_each(client)
    for state in ("retrying", "scheduled"):
        assert [job.id for job in client.list_jobs(status=state)] == [ids[state]]
        page, _ = client.jobs_page(status=state, queue="ops")
        assert [job.id for job in page] == [ids[state]]
        listed = json.loads(run_jobsup("--database-url", url, "jobs", "list", "--status", state, "--json").stdout)
        assert [row["id"] for row in listed] == [ids[state]]
        with web(url) as http:
            api = http.get(f"/api/v1/jobs?status={state}", headers=READER).json()
            html = http.get(f"/jobs?status={state}", headers=READER).text
        assert [row["id"] for row in api["jobs"]] == [ids[state]]
        assert f'href="/jobs/{ids[state]}"' in html and f'href="/jobs/{ids["due"]}"' not in html
    bad = run_jobsup("--database-url", url, "jobs", "list", "--status", "stuck")
    assert bad.returncode == 2 and "'retrying', 'scheduled'" in bad.stderr


def test_a_workflow_step_waiting_for_its_predecessors_is_not_counted_as_waiting_for_a_key(url: str) -> None:
    client = jobsup.Client(url)
    flow = jobsup.Workflow("two-steps")
    first = flow.add("ops-job", step="first", queue="ops")
    flow.add("ops-job", step="second", deps=first, queue="ops")
    client.workflows.enqueue(flow, allow_unknown=True)
    [row] = [r for r in client.queues.stats() if r["queue"] == "ops"]
    assert (row["waiting"], row["pending"]) == (0, 1)


def test_recent_failures_group_by_job_type_and_error_with_an_example(url: str) -> None:
    client = jobsup.Client(url)
    for error in ("RuntimeError: bank down", "RuntimeError: bank down again", "KeyError: 'sku'"):
        client.enqueue("charge", queue="pay", allow_unknown=True, max_attempts=1)
        fail(client, claim_one(client, queue="pay"), error=error)
    retrying = client.enqueue("charge", queue="pay", allow_unknown=True)
    fail(client, claim_one(client, queue="pay"), error="RuntimeError: bank down", retry_in=3600)
    groups = client.queues.recent_failures()
    assert [(g["name"], g["error_type"], g["count"], g["dead_lettered"]) for g in groups] == [
        ("charge", "RuntimeError", 3, 2),
        ("charge", "KeyError", 1, 1),
    ]
    assert groups[0]["example_job"] == retrying  # the newest
    with web(url) as http:
        assert http.get("/api/v1/failures", headers=READER).json() == json.loads(json.dumps(groups))
        page = http.get("/", headers=READER).text
    assert "Recent failures" in page and f'href="/jobs/{retrying}"' in page
