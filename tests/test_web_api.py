"""The HTTP API against a real database: shapes, paging, actions and their audit rows, and
bad input answered with a clear 4xx JSON error."""

from __future__ import annotations

from typing import Any

import pytest

import jobsup

from helpers import claim, fail
from webhelpers import OPERATOR, READER, web

API = "/api/v1"


def test_enqueue_get_list_and_page_through_jobs(url: str) -> None:
    with web(url) as http:
        ids = [http.post(f"{API}/jobs", json={"name": "work", "payload": {"n": n}}, headers=OPERATOR) for n in range(5)]
        assert [r.status_code for r in ids] == [201] * 5
        created = [r.json()["id"] for r in ids]
        first = http.get(f"{API}/jobs", params={"limit": 2}, headers=READER).json()
        assert [j["id"] for j in first["jobs"]] == created[::-1][:2]
        second = http.get(f"{API}/jobs", params={"limit": 2, "cursor": first["next_cursor"]}, headers=READER).json()
        third = http.get(f"{API}/jobs", params={"limit": 2, "cursor": second["next_cursor"]}, headers=READER).json()
        assert [j["id"] for j in second["jobs"] + third["jobs"]] == created[::-1][2:]
        assert third["next_cursor"] is None
        shown = http.get(f"{API}/jobs/{created[0]}", headers=READER).json()
        assert shown["payload"] == {"n": 0} and shown["history"] == [] and shown["logs"] == []
        assert shown["actor"] == "web:token-" + shown["actor"].split("-")[-1]
    # An operator's enqueue is audited, as the CLI's is.
    client = jobsup.Client(url)
    entries = client.audit.list(action="job.enqueue")
    client.close()
    assert sorted(e.job_ids[0] for e in entries) == sorted(created)
    assert {(e.actor, e.target, e.outcome) for e in entries} == {(shown["actor"], "work", "ok")}


def test_a_cursor_from_another_query_is_refused(url: str) -> None:
    with web(url) as http:
        for _ in range(3):
            http.post(f"{API}/jobs", json={"name": "work"}, headers=OPERATOR)
        cursor = http.get(f"{API}/jobs", params={"limit": 1}, headers=READER).json()["next_cursor"]
        other = http.get(f"{API}/jobs", params={"limit": 1, "cursor": cursor, "queue": "mail"}, headers=READER)
        assert other.status_code == 400 and "another query" in other.json()["error"]["message"]
        forged = http.get(f"{API}/jobs", params={"cursor": "not-a-cursor"}, headers=READER)
        assert forged.status_code == 400 and "cursor" in forged.json()["error"]["message"]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/jobs?status=done", "status: 'done' is not one of"),
        ("/jobs?limit=abc", "limit: 'abc' is not a whole number"),
        ("/jobs?limit=0", "limit: 0 is not between 1 and 500"),
        ("/jobs?colour=red", "unknown query parameter(s): colour"),
        ("/jobs/abc", "job_id: 'abc' is not a whole number"),
        ("/jobs/99999999999999999999", "job_id: 99999999999999999999 is not between"),
        ("/audit?since=soon", "since: 'soon' is not a duration"),
        ("/stats?window=0s", "window must be longer than zero"),
    ],
)
def test_malformed_filters_are_400_naming_the_parameter(url: str, path: str, message: str) -> None:
    with web(url) as http:
        response = http.get(API + path, headers=READER)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/json"
    assert message in response.json()["error"]["message"]


def test_an_unknown_job_is_404_json(url: str) -> None:
    with web(url) as http:
        response = http.get(f"{API}/jobs/424242", headers=READER)
        assert response.status_code == 404
        assert response.json() == {"error": {"status": 404, "message": "no job with id 424242"}}
        assert http.get(f"{API}/nowhere", headers=READER).json()["error"]["status"] == 404


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"name": "sealed-app", "payload": {"to": 5, "token": "t"}}, "to"),
        ({"name": "sealed-app", "payload": {"token": "t"}}, "to"),
        ({"name": "no-such-job"}, "no-such-job"),
        ({"payload": {}}, "'name' is required"),
        ({"name": "work", "priority": "high"}, "'priority' is not integer"),
        ({"name": "work", "colour": "red"}, "'colour' is not a known field"),
    ],
)
def test_a_payload_that_does_not_fit_is_400_naming_the_field(url: str, body: dict[str, object], message: str) -> None:
    with web(url) as http:
        response = http.post(f"{API}/jobs", json=body, headers=OPERATOR)
        assert response.status_code == 400, response.text
        assert message in response.json()["error"]["message"]
        assert http.get(f"{API}/jobs", headers=READER).json()["jobs"] == []


def test_bodies_that_are_not_json_objects_or_too_large_are_refused(url: str) -> None:
    with web(url) as http:
        not_json = http.post(f"{API}/jobs", content=b"{nope", headers=OPERATOR)
        assert not_json.status_code == 400 and "not valid JSON" in not_json.json()["error"]["message"]
        a_list = http.post(f"{API}/jobs", json=[1, 2], headers=OPERATOR)
        assert a_list.status_code == 400 and "JSON object" in a_list.json()["error"]["message"]
        huge = http.post(f"{API}/jobs", json={"name": "work", "payload": "x" * 300_000}, headers=OPERATOR)
        assert huge.status_code == 413 and "larger than" in huge.json()["error"]["message"]


def test_dead_letters_retry_one_and_all_and_purge_are_audited_as_the_web_user(url: str, client: jobsup.Client) -> None:
    ids = [client.enqueue("work", max_attempts=1) for _ in range(3)]
    for claimed in claim(client, limit=3):
        fail(client, claimed, error="boom")
    with web(url) as http:
        listed = http.get(f"{API}/dead-letters", headers=READER).json()["jobs"]
        assert sorted(j["id"] for j in listed) == ids and listed[0]["last_error"] == "boom"
        assert http.post(f"{API}/jobs/{ids[0]}/retry", headers=OPERATOR).json() == {"done": True}
        assert http.post(f"{API}/jobs/{ids[0]}/retry", headers=OPERATOR).json() == {"done": False}
        assert http.post(f"{API}/dead-letters/retry", json={"ids": [ids[1]]}, headers=OPERATOR).json() == {"count": 1}
        assert http.post(f"{API}/dead-letters/retry", json={}, headers=OPERATOR).json() == {"count": 1}
        assert http.post(f"{API}/dead-letters/purge", json={}, headers=OPERATOR).json() == {"count": 0}
        audit = http.get(f"{API}/audit", params={"action": "dead."}, headers=READER).json()
    assert [row["action"] for row in audit] == [
        "dead.purge",
        "dead.retry_all",
        "dead.retry",
        "dead.retry",
        "dead.retry",
    ]
    assert {row["actor"] for row in audit} == {audit[0]["actor"]} and audit[0]["actor"].startswith("web:token-")
    assert {client.get(i).status for i in ids} == {"pending"}  # type: ignore[union-attr]


def test_cancel_pause_resume_and_queues(url: str, client: jobsup.Client) -> None:
    job_id = client.enqueue("work", queue="mail")
    with web(url) as http:
        assert http.post(f"{API}/queues/mail/pause", json={"reason": "smtp down"}, headers=OPERATOR).json() == {
            "done": True
        }
        assert http.post(f"{API}/jobs/{job_id}/cancel", headers=OPERATOR).json() == {"done": True, "stopping": False}
        assert http.post(f"{API}/jobs/{job_id}/cancel", headers=OPERATOR).json() == {"done": False, "stopping": False}
        running = client.enqueue("work")
        assert [job.id for job in claim(client, "w1", limit=1)] == [running]
        # A running job is asked: it ends cancelled once its worker stops it.
        assert http.post(f"{API}/jobs/{running}/cancel", headers=OPERATOR).json() == {"done": True, "stopping": True}
        queues = {q["queue"]: q for q in http.get(f"{API}/queues", headers=READER).json()}
        assert queues["mail"]["state"] == "paused" and queues["mail"]["reason"] == "smtp down"
        overview = {row["queue"]: row for row in http.get(f"{API}/overview", headers=READER).json()}
        assert overview["mail"]["paused"] is True and overview["default"]["paused"] is False
        assert http.post(f"{API}/queues/mail/resume", headers=OPERATOR).json() == {"done": True}
        unknown = http.post(f"{API}/queues/nowhere/pause", json={}, headers=OPERATOR)
        assert unknown.status_code == 400 and "nowhere" in unknown.json()["error"]["message"]
    assert client.get(job_id).status == "cancelled"  # type: ignore[union-attr]


def test_recurring_add_list_with_next_five_local_slots_disable_enable_remove(url: str) -> None:
    body = {"name": "nightly", "job": "work", "cron": "30 2 * * *", "timezone": "Europe/Paris"}
    with web(url) as http:
        added = http.post(f"{API}/recurring", json=body, headers=OPERATOR)
        assert added.status_code == 200, added.text
        (schedule,) = http.get(f"{API}/recurring", headers=READER).json()
        slots = schedule["next_slots"]
        assert len(slots) == 5 and all("T02:30:00+0" in slot for slot in slots)  # Paris time, +01:00 or +02:00
        assert slots == sorted(slots) and len(set(slots)) == 5
        assert http.post(f"{API}/recurring/nightly/disable", headers=OPERATOR).json() == {"done": True}
        assert http.get(f"{API}/recurring", headers=READER).json()[0]["enabled"] is False
        assert http.post(f"{API}/recurring/nightly/enable", headers=OPERATOR).json() == {"done": True}
        assert http.delete(f"{API}/recurring/nightly", headers=OPERATOR).json() == {"done": True}
        bad = http.post(f"{API}/recurring", json={**body, "cron": "every day"}, headers=OPERATOR)
        assert bad.status_code == 400 and "cron" in bad.json()["error"]["message"]


def test_reads_of_the_other_objects_answer(url: str) -> None:
    with web(url) as http:
        for path in ("/workers", "/stats", "/definitions", "/workflows", "/batches", "/calendars", "/breakers"):
            response = http.get(API + path, headers=READER)
            assert response.status_code == 200 and response.json() == [], path
        assert http.get(f"{API}/workflows/7", headers=READER).status_code == 404


def test_odd_input_is_a_4xx_not_a_crash(url: str) -> None:
    import base64
    import json

    from jobsup.web.auth import Auth

    from webhelpers import csrf_of, log_in

    auth = Auth.parse(secret="s" * 32)
    assert auth.session("body.\u00e9") is None and not auth.csrf_ok("nonce", "\u00e9")  # non-ASCII: no TypeError
    with web(url) as http:
        deep = http.post(f"{API}/jobs", content=b"[" * 100_000 + b"]" * 100_000, headers=OPERATOR)
        assert deep.status_code == 400 and "not valid JSON" in deep.json()["error"]["message"]
        for _ in range(2):
            http.post(f"{API}/jobs", json={"name": "work"}, headers=OPERATOR)
        cursor = http.get(f"{API}/jobs", params={"limit": 1}, headers=READER).json()["next_cursor"]
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        for before in (10**30, 0, -5):
            forged = base64.urlsafe_b64encode(json.dumps({**data, "before": before}).encode()).decode().rstrip("=")
            response = http.get(f"{API}/jobs", params={"limit": 1, "cursor": forged}, headers=READER)
            assert response.status_code == 400 and "cursor" in response.json()["error"]["message"], before
        bad_length = http.post(
            f"{API}/jobs", json={"name": "work"}, headers={**OPERATOR, "Content-Length": "\u00b2".encode("latin-1")}
        )
        assert bad_length.status_code in (400, 413)
        odd_cookie = {"Cookie": "jobsup_session=x.\u00e9".encode("latin-1")}
        assert http.get("/", headers=odd_cookie, follow_redirects=False).status_code == 303  # not logged in
        assert log_in(http).status_code == 303
        assert http.get("/jobs/\u00b2").status_code == 400
        token = csrf_of(http, "/dead")
        cancel = http.post("/actions/jobs/\u00b2/cancel", data={"csrf": token, "back": "/"}, follow_redirects=False)
        assert cancel.status_code == 400
        retry = http.post(
            "/actions/dead/retry", data={"csrf": token, "id": "\u00b2", "back": "/"}, follow_redirects=False
        )
        assert retry.status_code == 400
        wrong_csrf = http.post("/actions/dead/retry", data={"csrf": "\u00e9", "all": "1"}, follow_redirects=False)
        assert wrong_csrf.status_code == 403


def test_workflow_batch_and_calendar_pages_show_their_objects(url: str, client: jobsup.Client) -> None:
    workflow = jobsup.Workflow("nightly")
    first = workflow.add("work", step="extract")
    workflow.add("work", deps=[first], step="load")
    workflow_id = client.workflows.enqueue(workflow)
    batch_id = client.batches.enqueue([{"name": "work"}] * 3, on_complete="work", name="import")
    client.calendars.add("closures", [{"weekdays": ["sat", "sun"]}], timezone="Europe/Berlin")
    steps = {step.name: step.job_id for step in client.workflows.get(workflow_id).steps}  # type: ignore[union-attr]
    with web(url) as http:
        http.headers.update(READER)
        listed = http.get("/workflows").text
        assert f'href="/workflows/{workflow_id}"' in listed
        page = http.get(f"/workflows/{workflow_id}").text
        assert "nightly" in page and f'href="/jobs/{steps["load"]}"' in page and ">extract<" in page
        assert f'href="/batches/{batch_id}"' in http.get("/batches").text
        shown = http.get(f"/batches/{batch_id}").text
        assert "import" in shown and "on_complete" in shown and "<dd>3</dd>" in shown
        assert 'svg class="progress"' in shown and f"batch {batch_id}: 0 of 3 finished" in shown  # its bar
        assert "closures" in http.get("/calendars").text and "Europe/Berlin" in http.get("/calendars").text
        for path, code in (("/workflows/999999", 404), ("/batches/x1", 400), ("/workflows/99999999999999999999", 400)):
            answer = http.get(path)
            assert answer.status_code == code and "Traceback" not in answer.text, path


def test_the_dead_letters_page_purges_by_age_audited_as_the_user(url: str, client: jobsup.Client) -> None:
    """Issue 30 item 5: the form the API's purge already had."""
    from webhelpers import csrf_of, log_in

    client.enqueue("work", max_attempts=1)
    fail(client, claim(client, limit=1)[0], error="boom")
    with web(url) as http:
        assert log_in(http).status_code == 303
        token = csrf_of(http, "/dead")
        assert 'action="/actions/dead/purge"' in http.get("/dead").text

        def purge(older_than: str) -> Any:
            form = {"csrf": token, "older_than": older_than, "back": "/dead"}
            return http.post("/actions/dead/purge", data=form, follow_redirects=False)

        kept = purge("1h")
        assert kept.status_code == 303 and "0%20dead%20letters%20older%20than%201h%20purged" in kept.headers["location"]
        bad = purge("a while")
        assert bad.status_code == 400 and "a while" in bad.text  # a bad duration: the page says why, nothing purged
        assert len(client.dead_letters.list()) == 1
        assert purge("0s").status_code == 303
        assert client.dead_letters.list() == []
        refused = http.post("/actions/dead/purge", data={"csrf": "x", "older_than": "0s"}, follow_redirects=False)
        assert refused.status_code == 403
    purges = [(e.actor, e.outcome, e.job_count) for e in client.audit.list(action="dead.purge", limit=5)]
    assert purges == [("web:alice", "ok", 1), ("web:alice", "ok", 0)]  # newest first; the bad one purged nothing
