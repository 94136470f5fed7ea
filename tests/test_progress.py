"""`ctx.set_progress`: a running job's reports reach `Client.get`, the CLI and the API from a
real worker, per attempt; bad values are refused."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import jobsup
from jobsup.testing import drain, run_job

from helpers import claim_one, release, wait_until


@jobsup.job("progress-reports")
def reports(ctx: jobsup.JobContext, payload: Any) -> str:
    ctx.set_progress(payload["value"])
    return "reported"


def test_a_running_jobs_progress_is_seen_then_kept_with_its_attempt(
    client: jobsup.Client, start: Callable[..., object], tmp_path: Path, url: str
) -> None:
    start("--queue", "default=1")
    go = tmp_path / "go"
    job_id = client.enqueue("progressing", {"go": str(go), "fail_first": True})
    running = wait_until(
        lambda: (job := client.get(job_id)) is not None and job.attempts == 2 and job.progress == 0.5 and job,
        timeout=60,
        what="the second attempt's first report",
    )
    assert running.status == "running" and running.history[0].progress == 0.5  # the failed attempt kept its own
    go.touch()
    done = client.wait(job_id, timeout=60)
    assert done.status == "succeeded" and done.progress == {"done": 2, "of": 2}
    assert [a.progress for a in done.history] == [0.5, {"done": 2, "of": 2}]
    shown = subprocess.run(
        [sys.executable, "-m", "jobsup", "jobs", "show", str(job_id), "--json", "--database-url", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(shown.stdout)["progress"] == {"done": 2, "of": 2}


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (1.5, "not a number from 0 to 1"),
        (-0.1, "not a number from 0 to 1"),
        (float("nan"), "not a number from 0 to 1"),
        (True, "a number from 0 to 1 or a JSON object"),
        ([1, 2], "a number from 0 to 1 or a JSON object"),
        ({"note": "x" * 2000}, "over 1000"),
        ({"when": object()}, "not JSON"),
    ],
)
def test_a_bad_progress_value_is_refused_naming_the_problem(value: Any, reason: str) -> None:
    context = jobsup.JobContext(1, "x", "default", 1, 1, None, None)
    with pytest.raises(jobsup.BadInput, match=reason):
        context.set_progress(value)


def test_progress_through_the_testing_helpers(client: jobsup.Client) -> None:
    assert run_job("progress-reports", {"value": 1}) == "reported"  # checked, then dropped: no worker
    job_id = client.enqueue("progress-reports", {"value": {"stage": "upload"}})
    assert drain(client) == {"succeeded": 1}
    assert client.get(job_id).progress == {"stage": "upload"}  # type: ignore[union-attr]


def test_the_api_and_the_dashboard_show_a_jobs_progress(client: jobsup.Client, url: str) -> None:
    from webhelpers import READER, web

    half, staged = (client.enqueue("progress-reports", {"value": value}) for value in (0.25, {"stage": "<b>"}))
    assert drain(client) == {"succeeded": 2}
    with web(url) as http:
        assert http.get(f"/api/v1/jobs/{half}", headers=READER).json()["progress"] == 0.25
        page = http.get(f"/jobs/{half}", headers=READER).text
        assert '<progress value="0.25" max="1"></progress> 25 %' in page
        shown = http.get(f"/jobs/{staged}", headers=READER).text.split("<dt>Progress</dt>", 1)[1].split("</dd>")[0]
        assert "&#34;stage&#34;: &#34;&lt;b&gt;&#34;" in shown  # the JSON as text, escaped


def test_a_report_its_released_worker_wrote_late_does_not_land_on_the_next_claims_attempt(
    client: jobsup.Client,
) -> None:
    """A release gives the attempt number back, so the next claim runs the same number: a
    report the first worker could not write before then (the database was out) must not
    become the second run's progress."""
    job_id = client.enqueue("a", queue="progress-fence")
    first = claim_one(client, "w1", queue="progress-fence")
    assert release(client, [first]) == {job_id}
    second = claim_one(client, "w2", queue="progress-fence")
    assert second.attempt == first.attempt
    client.store.progress.write({first.lease: "0.9"})
    assert client.get(job_id).progress is None  # type: ignore[union-attr]
    client.store.progress.write({second.lease: "0.5"})
    assert client.get(job_id).progress == 0.5  # type: ignore[union-attr]
