"""The FastAPI example's tests, as its authors would write them: the app on a fresh jobsup
database (the jobsup_client fixture), its jobs run by jobsup.testing. `pytest` in this folder."""

from app import create_app
from fastapi.testclient import TestClient

import jobsup
from jobsup.testing import assert_enqueued, drain


def test_a_request_is_enqueued_then_reported_done(jobsup_client: jobsup.Client) -> None:
    with TestClient(create_app(str(jobsup_client.database.url))) as http:
        job_id = http.post("/thumbnails", json={"image": "cat.png", "sizes": [64, 128]}).json()["job_id"]
        assert http.get(f"/thumbnails/{job_id}").json()["status"] == "pending"
        assert_enqueued(jobsup_client, "make-thumbnail", {"image": "cat.png"}, queue="images")
        assert drain(jobsup_client) == {"succeeded": 1}  # what `jobsup start --app jobs` does
        assert http.get(f"/thumbnails/{job_id}").json() == {
            "status": "succeeded",
            "progress": 1.0,
            "result": {"image": "cat.png", "thumbnails": ["cat.png@64", "cat.png@128"]},
            "error": None,
        }


def test_bad_requests_are_refused(jobsup_client: jobsup.Client) -> None:
    with TestClient(create_app(str(jobsup_client.database.url))) as http:
        assert http.post("/thumbnails", json={"sizes": [64]}).status_code == 422  # no image
        assert http.get("/thumbnails/999").status_code == 404
