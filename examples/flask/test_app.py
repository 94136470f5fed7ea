"""The Flask example's tests, as its authors would write them: the app on a fresh jobsup
database (the jobsup_client fixture), its jobs run by jobsup.testing. `pytest` in this folder."""

from app import create_app

import jobsup
from jobsup.testing import assert_enqueued, drain, inline, refute_enqueued


def test_a_report_request_runs_once_committed(jobsup_client: jobsup.Client) -> None:
    http = create_app(str(jobsup_client.database.url)).test_client()
    with inline(jobsup_client):  # each enqueue runs once its transaction has committed
        body = http.post("/reports", json={"email": "ann@example.com", "period": "weekly"}).get_json()
    job_id = body["job_id"]
    assert http.get(f"/reports/{job_id}").json == {
        "status": "succeeded",
        "result": {"sent_to": "ann@example.com", "period": "weekly"},
    }
    # What a job logs is scrubbed of its payload's long strings ("Logs" in docs/how-to/operating.md):
    assert [line.message for line in jobsup_client.logs(job_id)] == ["building the weekly report for ***"]


def test_a_refused_request_enqueues_nothing(jobsup_client: jobsup.Client) -> None:
    http = create_app(str(jobsup_client.database.url)).test_client()
    assert http.post("/reports", json={"email": "ann@example.com", "period": "daily"}).status_code == 400
    refute_enqueued(jobsup_client, "send-report")
    assert drain(jobsup_client) == {}


def test_the_job_commits_or_rolls_back_with_the_apps_own_row(jobsup_client: jobsup.Client) -> None:
    http = create_app(str(jobsup_client.database.url)).test_client()
    request = {"email": "bo@example.com", "period": "monthly"}
    assert http.post("/reports", json=request).status_code == 202
    assert http.post("/reports", json=request).status_code == 409  # its row is refused: so is its job
    first = assert_enqueued(jobsup_client, "send-report", {"email": "bo@example.com"})
    assert [job.id for job in jobsup_client.list_jobs()] == [first.id]
