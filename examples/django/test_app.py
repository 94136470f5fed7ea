"""The Django example's tests: the view through Django's test client, the task run by
jobsup.testing's drain (no worker). `pytest` in this folder."""

import json

from django.test import Client

from jobsup.contrib.django import JobsupBackend
from jobsup.contrib.django.framework import task_backends
from jobsup.testing import drain


def backend() -> JobsupBackend:
    found = task_backends["default"]
    assert isinstance(found, JobsupBackend)
    return found


def test_an_order_gets_its_receipt() -> None:
    http = Client()
    response = http.post("/orders", {"email": "ann@example.com"})
    assert response.status_code == 202
    task_id = json.loads(response.content)["task"]
    assert json.loads(http.get(f"/tasks/{task_id}").content) == {"status": "READY"}
    assert drain(backend().client, "emails") == {"succeeded": 1}
    body = json.loads(http.get(f"/tasks/{task_id}").content)
    assert body["status"] == "SUCCESSFUL" and body["return_value"]["sent_to"] == "ann@example.com"


def test_a_refused_order_leaves_no_task() -> None:
    http = Client()
    assert http.post("/orders", {"email": "bo@example.com"}).status_code == 202
    assert http.post("/orders", {"email": "bo@example.com"}).status_code == 409  # its job rolled back too
    jobs = backend().client.list_jobs(queue="emails")
    assert [job.payload["args"] for job in jobs].count(["bo@example.com"]) == 1
