"""A failed attempt's traceback is stored as frames (issue 30, item 1): file, line and
function, innermost last, capped; never a source line, a local or an argument value, so a
payload value cannot reach the database through it. Shown by `jobs show --traceback`, the
API's job and the dashboard's job page (tests/test_dashboard_browser.py)."""

from __future__ import annotations

import json
import threading
from typing import Any

from sqlalchemy import select

import jobsup
from jobsup.scrub import Secrets
from jobsup.store.schema import job_attempt
from jobsup.worker.execute import execute, outcome_of
from jobsup.worker.frames import MAX_FRAMES, stored_frames

from helpers import claim_one, run_jobsup
from webhelpers import READER, web

CARD = "4111222233334444"  # a payload value: in the job's locals, its arguments and its source line below


def charge_card(params: dict[str, Any]) -> None:
    card = params["card"]
    raise RuntimeError(f"the bank declined {card[:4]}")  # the message: scrubbed as errors are


@jobsup.job("declined-charge")
def declined_charge(ctx: jobsup.JobContext, params: dict[str, Any]) -> None:
    charge_card(params)


@jobsup.job("retried-politely")
def retried_politely(ctx: jobsup.JobContext, params: dict[str, Any]) -> None:
    raise jobsup.Retry(after=5, reason="the bank asked to wait")


def fail_once(client: jobsup.Client) -> None:
    claimed = claim_one(client)
    ran = execute(claimed, threading.Event())
    client.store.transitions.fail(outcome_of(claimed, ran, None, None))


def test_a_failure_stores_its_frames_and_no_value_of_the_payload(url: str) -> None:
    client = jobsup.Client(url)
    job_id = client.enqueue("declined-charge", {"card": CARD})
    fail_once(client)
    stored = client.get(job_id)
    assert stored is not None
    [attempt] = stored.history
    assert attempt.traceback is not None
    assert [(f["file"], f["function"]) for f in attempt.traceback] == [
        (__file__, "declined_charge"),
        (__file__, "charge_card"),
    ]
    assert all(isinstance(f["line"], int) for f in attempt.traceback)
    with client.database.read() as conn:
        raw = conn.execute(select(job_attempt.c.traceback).where(job_attempt.c.job_id == job_id)).scalar_one()
    assert CARD not in raw and CARD[:4] not in raw and "bank" not in raw  # frames only: no text, no values
    assert set(json.loads(raw)[0]) == {"file", "line", "function"}


def test_a_retry_the_job_asked_for_stores_no_traceback(url: str) -> None:
    client = jobsup.Client(url)
    job_id = client.enqueue("retried-politely", {})
    fail_once(client)
    stored = client.get(job_id)
    assert stored is not None and stored.history[0].traceback is None
    assert stored.history[0].error == "Retry: the bank asked to wait"


def recurse(depth: int) -> None:
    if depth == 0:
        raise RecursionError("deep")
    recurse(depth - 1)


def test_a_deep_traceback_keeps_its_innermost_frames_under_the_caps() -> None:
    try:
        recurse(200)
    except RecursionError as exc:
        text = stored_frames(exc, Secrets())
    assert text is not None and len(text) <= 16 * 1024
    frames = json.loads(text)
    assert len(frames) == MAX_FRAMES and all(f["function"] == "recurse" for f in frames)


def test_jobs_show_prints_the_frames_with_traceback_and_the_api_returns_them(url: str) -> None:
    client = jobsup.Client(url)
    job_id = client.enqueue("declined-charge", {"card": CARD})
    fail_once(client)
    plain = run_jobsup("--database-url", url, "jobs", "show", str(job_id))
    assert plain.returncode == 0 and "charge_card" not in plain.stdout, plain.stderr
    shown = run_jobsup("--database-url", url, "jobs", "show", str(job_id), "--traceback")
    assert shown.returncode == 0, shown.stderr
    assert f'File "{__file__}", line' in shown.stdout and "in charge_card" in shown.stdout
    as_json = json.loads(run_jobsup("--database-url", url, "jobs", "show", str(job_id), "--json").stdout)
    assert as_json["history"][0]["traceback"][-1]["function"] == "charge_card"


def test_the_api_returns_an_attempts_frames(url: str) -> None:
    client = jobsup.Client(url)
    job_id = client.enqueue("declined-charge", {"card": CARD})
    fail_once(client)
    with web(url) as http:
        found = http.get(f"/api/v1/jobs/{job_id}", headers=READER).json()
    assert [f["function"] for f in found["history"][0]["traceback"]] == ["declined_charge", "charge_card"]
    assert CARD not in json.dumps(found["history"][0]["traceback"])


def test_frames_with_long_file_names_keep_the_innermost_that_fit_in_16_kib() -> None:
    source = "def dive(n):\n    if n == 0:\n        raise ValueError('deep')\n    dive(n - 1)\n"
    space: dict[str, Any] = {}
    exec(compile(source, "/" + "very-long-folder/" * 120 + "module.py", "exec"), space)  # ~2 KB a frame
    try:
        space["dive"](20)
    except ValueError as exc:
        text = stored_frames(exc, Secrets())
    assert text is not None and len(text) <= 16 * 1024
    frames = json.loads(text)
    assert 1 < len(frames) < 21 and frames[-1]["line"] == 3  # the innermost, where it was raised
