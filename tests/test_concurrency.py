"""Several jobs at once inside one worker (``--queue NAME=WORKERS:CONCURRENCY``): threads for
plain functions, one event loop for ``async def`` jobs; each job keeps its own lease,
timeout and attempt row, and competing concurrent workers still run every job once."""

from __future__ import annotations

from pathlib import Path

import pytest

import jobsup

from harness import assert_no_overlap, attempt_spans, history, records, status_of
from helpers import wait_until

pytestmark = pytest.mark.slow


def most_at_once(record: Path, job_ids: list[int]) -> int:
    """The most jobs whose first attempts' recorded spans overlap at one instant."""
    spans = [attempt_spans(record, job_id)[1] for job_id in job_ids]
    return max(sum(1 for start, end in spans if start <= moment <= end) for moment, _ in spans)


def all_succeeded(client: jobsup.Client, job_ids: list[int]) -> bool:
    return all(status_of(client, job_id) == "succeeded" for job_id in job_ids)


@pytest.mark.parametrize("name", ["work", "async-work"])
def test_one_worker_runs_the_jobs_of_its_queue_at_once(url: str, start, record: Path, name: str) -> None:  # type: ignore[no-untyped-def]
    client = jobsup.Client(url)
    start("--queue", "default=1:8")
    job_ids = [client.enqueue(name, {"seconds": 1.5}) for _ in range(8)]
    wait_until(lambda: all_succeeded(client, job_ids), timeout=60, what="8 jobs of 1.5 s")
    assert len({entry["pid"] for job_id in job_ids for entry in records(record, job_id)}) == 1, "one process"
    assert most_at_once(record, job_ids) >= 6, "the jobs did not run at once"
    for job_id in job_ids:
        assert history(client, job_id) == [(1, "succeeded")]


def test_competing_concurrent_workers_run_every_job_once(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    client = jobsup.Client(url)
    job_ids = client.enqueue_many(
        [{"name": "work" if i % 2 else "async-work", "payload": {"seconds": 0.02}} for i in range(600)]
    )
    for _ in range(2):
        start("--queue", "default=2:20")
    wait_until(lambda: all_succeeded(client, job_ids), timeout=120, what="600 jobs on 4 concurrent workers")
    for job_id in job_ids:
        assert [e["what"] for e in records(record, job_id)].count("start") == 1, f"job {job_id} ran twice"
        # A job claimed ahead may have been given back unstarted (it waited a second: on a
        # loaded host, or behind a SQLite write): released, never run, then run once.
        *given_back, last = history(client, job_id)
        assert last == (1, "succeeded") and set(given_back) <= {(1, "released")}, history(client, job_id)


def test_an_async_jobs_timeout_cancels_its_task(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    client = jobsup.Client(url)
    start("--queue", "default=1:4")
    job_id = client.enqueue("async-work", {"seconds": 120}, timeout="1s", max_attempts=1)
    wait_until(lambda: status_of(client, job_id) == "dead_lettered", timeout=60, what="the timed-out async job")
    assert "cancelled" in [e["what"] for e in records(record, job_id)], "the task was not cancelled"
    assert history(client, job_id) == [(1, "timed_out")]


def test_a_worker_ended_for_one_stuck_job_releases_the_others(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    """A thread job ignores its timeout's cancellation: the worker ends itself, the stuck
    job's attempt is charged `timed_out`, and the job running beside it is released (its
    attempt given back) and runs again elsewhere, never overlapping itself."""
    client = jobsup.Client(url)
    start("--queue", "default=1:4")
    bystander = client.enqueue("work", {"seconds": 8, "slow_attempts": [1]})
    wait_until(lambda: records(record, bystander), timeout=30, what="the bystander to start")
    stuck = client.enqueue("work", {"seconds": 120, "slow_attempts": [1]}, timeout="1s")
    wait_until(lambda: status_of(client, stuck) == "succeeded", timeout=90, what="the stuck job's retry")
    wait_until(lambda: status_of(client, bystander) == "succeeded", timeout=90, what="the bystander's rerun")
    assert history(client, stuck)[0] == (1, "timed_out")
    assert history(client, bystander) == [(1, "released"), (1, "succeeded")]
    assert_no_overlap(record, bystander)


def test_a_job_claimed_ahead_behind_long_ones_is_given_back_in_time(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    """After quick jobs a pool claims ahead of its free places (`jobsup.worker.ahead`). When
    the jobs then filling its places run long, the ones claimed ahead are given back within
    about a second, unstarted, and nothing more is claimed ahead while they run: a second
    worker runs the jobs behind them long before they end, and none was given back twice."""
    client = jobsup.Client(url)
    start("--queue", "default=1:2")
    quick = client.enqueue_many([{"name": "work", "payload": {"seconds": 0.01}} for _ in range(20)])
    wait_until(lambda: all_succeeded(client, quick), timeout=60, what="20 quick jobs")
    long = {"name": "work", "payload": {"seconds": 120, "honour": True}}
    short = {"name": "work", "payload": {"seconds": 0.01}}
    first, second, *behind = client.enqueue_many([long, long, short, short, short])
    given_back = lambda: [job_id for job_id in behind if history(client, job_id)[:1] == [(1, "released")]]  # noqa: E731
    wait_until(given_back, timeout=20, what="the jobs claimed ahead given back")
    assert all(records(record, job_id) == [] for job_id in behind), "a job claimed ahead ran behind the long ones"
    start("--queue", "default=1")
    wait_until(lambda: all_succeeded(client, behind), timeout=30, what="the jobs behind the long ones, run elsewhere")
    # The pool (two places) claimed two ahead, once: none claimed ahead again, nor given back twice.
    assert len(given_back()) == 2, "claimed ahead again while the long jobs ran"
    for job_id in given_back():
        assert history(client, job_id) == [(1, "released"), (1, "succeeded")]
    assert [status_of(client, job_id) for job_id in (first, second)] == ["running", "running"]


def test_a_claim_slow_to_come_back_starts_its_jobs(url: str, start, record: Path) -> None:  # type: ignore[no-untyped-def]
    """A pool's job waits `HOLD_WAITING` at most from when its claim came back: a claim held
    up for seconds (here by a fault that blocks the worker's claims for their first 3 s, as
    a claim waiting for SQLite's write lock or the settler's would be) still starts what it
    claimed for its free places, and gives none of it back."""
    client = jobsup.Client(url)
    job_ids = client.enqueue_many([{"name": "work", "payload": {"seconds": 0.01}} for _ in range(2)])
    start("--queue", "default=1:2", "--faults", "worker:claim@0s+3s:hang")
    wait_until(lambda: all_succeeded(client, job_ids), timeout=60, what="the jobs of the slow claim")
    assert [history(client, job_id) for job_id in job_ids] == [[(1, "succeeded")]] * 2


def test_a_job_cancelled_while_it_waits_claimed_ahead_ends_cancelled_and_the_worker_runs_on(  # type: ignore[no-untyped-def]
    url: str, start, record: Path
) -> None:
    """An operator cancels a job a pool has claimed ahead: the next renewal (every 300 ms
    here) learns it and gives it back, `cancelled`; the other job claimed ahead is given back
    a second after its claim, and the worker goes on running its long jobs. (Its lease
    thread once forgot the cancelled job's wait and ended the worker a second later.)"""
    client = jobsup.Client(url)
    supervisor = start("--queue", "default=1:2", "--heartbeat", "300ms")
    quick = client.enqueue_many([{"name": "work", "payload": {"seconds": 0.01}} for _ in range(20)])
    wait_until(lambda: all_succeeded(client, quick), timeout=60, what="20 quick jobs")
    long = {"name": "work", "payload": {"seconds": 120, "honour": True}}
    short = {"name": "work", "payload": {"seconds": 0.01}}
    first, second, cancelled, other = client.enqueue_many([long, long, short, short])
    wait_until(lambda: status_of(client, cancelled) == "running", timeout=20, what="the job claimed ahead")
    assert client.cancel(cancelled)
    wait_until(lambda: status_of(client, cancelled) == "cancelled", timeout=20, what="the cancelled job's end")
    wait_until(lambda: history(client, other) == [(1, "released")], timeout=20, what="the other given back")
    assert records(record, cancelled) == [] and records(record, other) == []
    output = supervisor.output()
    assert f"job.cancelled job={cancelled} " in output, "cancelled after its give-back: not the path this tests"
    assert "worker.crashed" not in output
    assert [history(client, job_id) for job_id in (first, second)] == [[(1, None)]] * 2, "the long jobs were charged"
