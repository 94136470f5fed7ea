"""What a worker does with the jobs of a claimed batch, and when a job's row may change: real
`jobsup start` supervisors, real signals, both databases. Each test holds a promise the
hardening review found broken (the issue's item number is in the docstring)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

import jobsup

from harness import assert_no_overlap, history, records, started_by, status_of
from helpers import alive, wait_until

pytestmark = pytest.mark.slow


def succeeded(client: jobsup.Client, *job_ids: int) -> bool:
    return all(status_of(client, job_id) == "succeeded" for job_id in job_ids)


def last_run(record: Path, job_id: int, attempt: int) -> float:
    return max(e["at"] for e in records(record, job_id) if e["attempt"] == attempt)


def test_an_ignored_timeout_releases_the_jobs_waiting_in_its_batch(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    """Item 1: the jobs waiting behind a job that times out never use an attempt."""
    client = jobsup.Client(url)
    long, *waiting = client.enqueue_many(
        [{"name": "work", "payload": {"seconds": 60, "slow_attempts": [1]}, "timeout": "1s"}]
        + [{"name": "work", "max_attempts": 1}] * 2
    )
    # The worker's own releases fail, so the jobs it held can only be given back by its
    # supervisor once it is dead (not by the release of waiting jobs after a second).
    start(claim_batch="3", faults="worker:release@0s+600s")
    wait_until(lambda: succeeded(client, long, *waiting), timeout=60, what="all three jobs to succeed")
    assert history(client, long) == [(1, "timed_out"), (2, "succeeded")]
    for job_id in waiting:
        assert history(client, job_id) == [(1, "released"), (1, "succeeded")]
    assert_no_overlap(record, long)


def test_a_killed_workers_waiting_batch_jobs_are_released_not_charged(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    """Item 1: kill -9 a worker that holds a batch: only the job it was running loses an attempt."""
    client = jobsup.Client(url)
    long, *waiting = client.enqueue_many(
        [{"name": "work", "payload": {"seconds": 60, "slow_attempts": [1]}}] + [{"name": "work", "max_attempts": 1}] * 2
    )
    start(claim_batch="3", lease="60s", faults="worker:release@0s+600s")  # only the burial releases
    os.kill(started_by(record, long), signal.SIGKILL)
    wait_until(lambda: succeeded(client, long, *waiting), timeout=60, what="all three jobs to succeed")
    assert history(client, long) == [(1, "lease_expired"), (2, "succeeded")]
    for job_id in waiting:
        outcomes = [outcome for _, outcome in history(client, job_id)]
        assert outcomes[-1] == "succeeded" and "lease_expired" not in outcomes, outcomes
        assert client.get(job_id).attempts == 1  # type: ignore[union-attr]


def test_a_job_waiting_behind_a_long_one_runs_elsewhere_meanwhile(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    """Item 2: a claimed batch does not hold its waiting jobs for the whole long job."""
    client = jobsup.Client(url)
    # Long enough for a second supervisor to boot on a loaded machine.
    long, quick = client.enqueue_many([{"name": "work", "payload": {"seconds": 12}}, {"name": "work"}])
    start(claim_batch="2")  # its one worker claims both
    started_by(record, long)
    start()  # then an idle worker elsewhere
    wait_until(lambda: succeeded(client, long, quick), timeout=60, what="both jobs to succeed")
    quick_start = min(e["at"] for e in records(record, quick))
    long_end = max(e["at"] for e in records(record, long))
    assert quick_start < long_end, "the waiting job ran only after the long one ended"
    assert started_by(record, quick) != started_by(record, long)
    assert history(client, quick) == [(1, "released"), (1, "succeeded")]  # it was in the batch


def test_a_success_is_written_while_the_next_job_of_its_batch_runs(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    """Item 2: a success is written within a bounded time, whatever the next job does."""
    client = jobsup.Client(url)
    quick, long = client.enqueue_many([{"name": "work"}, {"name": "work", "payload": {"seconds": 8}}])
    start(claim_batch="2")
    started_by(record, long)
    wait_until(lambda: succeeded(client, quick), timeout=30, what="the first job's success to be written")
    assert "end" not in [e["what"] for e in records(record, long)], "the success waited for the next job"


@pytest.mark.parametrize("ignored", ["timeout", "shutdown"])
def test_an_ignored_cancellation_is_written_only_once_the_worker_is_dead(  # type: ignore[no-untyped-def]
    url: str, start, record: Path, ignored: str
) -> None:
    """Item 3: the row of a job that will not stop changes only after its process is gone."""
    client = jobsup.Client(url)
    timeout = "1s" if ignored == "timeout" else None
    job_id = client.enqueue("work", {"seconds": 60, "slow_attempts": [1]}, timeout=timeout)
    supervisor = start(shutdown_grace="1s")
    worker = started_by(record, job_id)
    if ignored == "shutdown":
        supervisor.signal(signal.SIGTERM)
    wanted = "timed_out" if ignored == "timeout" else "released"
    wait_until(lambda: [o for _, o in history(client, job_id)][:1] == [wanted], timeout=30, what=wanted)
    first = client.get(job_id).history[0]  # type: ignore[union-attr]
    assert first.finished_at is not None
    assert first.finished_at.timestamp() > last_run(record, job_id, 1), "written while the job still ran"
    assert not alive(worker)
    if ignored == "timeout":
        wait_until(lambda: succeeded(client, job_id), timeout=30, what="the retry to succeed")
        assert_no_overlap(record, job_id)


def test_a_job_that_returns_once_cancelled_for_shutdown_is_released(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    """Item 6: returning early on `ctx.cancelled` during shutdown is not a success."""
    client = jobsup.Client(url)
    job_id = client.enqueue("work", {"seconds": 60, "return_on_cancel": True})
    supervisor = start(shutdown_grace="2s")
    started_by(record, job_id)
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(timeout=30) == 0
    assert "returned" in [e["what"] for e in records(record, job_id)]
    stored = client.get(job_id)
    assert stored is not None and (stored.status, stored.attempts) == ("pending", 0)
    assert history(client, job_id) == [(1, "released")]


def test_a_job_that_returns_once_timed_out_is_timed_out(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    """Item 6: a job that honours its timeout by returning is `timed_out` and retried."""
    client = jobsup.Client(url)
    job_id = client.enqueue("work", {"seconds": 60, "slow_attempts": [1], "return_on_cancel": True}, timeout="1s")
    start()
    wait_until(lambda: succeeded(client, job_id), timeout=30, what="the retry to succeed")
    assert history(client, job_id) == [(1, "timed_out"), (2, "succeeded")]
    assert "timed out after 1s; then it returned" in (client.get(job_id).history[0].error or "")  # type: ignore[union-attr]


def test_raise_if_cancelled_stops_a_job_an_operator_cancelled(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    """Item 6: `ctx.raise_if_cancelled()` ends the attempt as the reason says: cancelled."""
    client = jobsup.Client(url)
    job_id = client.enqueue("work", {"seconds": 60, "raise_if_cancelled": True})
    supervisor = start()
    worker = started_by(record, job_id)
    assert client.cancel(job_id)
    # The lease renewal notices the cancel; the job's own call then raises, so the worker
    # need not be ended for it.
    wait_until(lambda: "raised" in [e["what"] for e in records(record, job_id)], timeout=15, what="the raise")
    # A cancel of a running job is a request: the worker writes the end after the raise.
    wait_until(lambda: history(client, job_id) == [(1, "cancelled")], timeout=15, what="the cancelled attempt")
    assert status_of(client, job_id) == "cancelled"
    assert alive(worker) and worker in supervisor.workers()
    assert "worker.ending" not in supervisor.output()


def test_a_return_value_is_stored_with_the_success(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    """Item 11: what a job returns is its result."""
    client = jobsup.Client(url)
    kept = client.enqueue("work", {"result": {"sent": 3, "to": ["a", "b"]}})
    too_big = client.enqueue("work", {"result": "x" * 70_000})
    start()
    wait_until(lambda: succeeded(client, kept, too_big), timeout=30, what="both jobs to succeed")
    assert client.get(kept).result == {"sent": 3, "to": ["a", "b"]}  # type: ignore[union-attr]
    assert client.get(too_big).result is None  # type: ignore[union-attr]
