"""`jobsup bench`: real runs on both databases leave figures and no job rows; bad values are
refused with one line; the store's per-queue delete deletes that queue's jobs only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from jobsup import Client
from jobsup.store.database import Database
from jobsup.store.schema import job, job_attempt

from helpers import claim, run_jobsup, succeed

FIGURES = ["enqueue_jobs_per_s", "jobs_per_s", "latency_p50_ms", "latency_p99_ms", "peak_pss_mb"]


def job_rows(url: str) -> tuple[int, int]:
    db = Database(url)
    try:
        with db.read("inspect") as conn:
            jobs = conn.execute(select(func.count()).select_from(job)).scalar_one()
            attempts = conn.execute(select(func.count()).select_from(job_attempt)).scalar_one()
        return int(jobs), int(attempts)
    finally:
        db.dispose()


def bench(url: str, *args: str) -> dict[str, Any]:
    result = run_jobsup("bench", *args, "--json", "--database-url", url, timeout=240)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", "no progress bars off a terminal"
    figures: dict[str, Any] = json.loads(result.stdout)
    return figures


def check_figures(figures: dict[str, Any], jobs: int, concurrency: int = 1, sleep: float = 0.0) -> None:
    assert {k: figures[k] for k in ("jobs", "workers", "concurrency", "claim_batch", "sleep_seconds")} == {
        "jobs": jobs,
        "workers": 2,
        "concurrency": concurrency,
        "claim_batch": 10,
        "sleep_seconds": sleep,
    }
    for name in FIGURES:
        value = figures[name]
        assert isinstance(value, int | float) and not isinstance(value, bool) and value > 0, (name, figures)
    assert figures["latency_p50_ms"] <= figures["latency_p99_ms"]


@pytest.mark.slow
def test_a_sqlite_run_reports_figures_and_deletes_its_jobs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bench.db'}"  # no schema yet: the bench makes it
    args = ["--jobs", "300", "--workers", "2", "--claim-batch", "10", "--latency-jobs", "5"]
    figures = bench(url, *args)
    check_figures(figures, 300)
    assert figures["database"].endswith("bench.db")
    assert job_rows(url) == (0, 0)


@pytest.mark.slow
def test_a_concurrent_run_of_sleeping_jobs_beats_one_at_a_time(tmp_path: Path) -> None:
    """Two workers running one 50 ms job at a time could not pass 40 jobs/s."""
    url = f"sqlite:///{tmp_path / 'bench.db'}"
    args = ["--jobs", "400", "--workers", "2", "--concurrency", "20", "--claim-batch", "10", "--sleep", "50ms"]
    figures = bench(url, *args, "--latency-jobs", "3")
    check_figures(figures, 400, concurrency=20, sleep=0.05)
    assert figures["jobs_per_s"] > 80, figures
    assert job_rows(url) == (0, 0)


@pytest.mark.slow
@pytest.mark.postgres
def test_a_postgresql_run_reports_figures_and_deletes_its_jobs(postgres_url: str) -> None:
    figures = bench(postgres_url, "--jobs", "300", "--workers", "2", "--claim-batch", "10", "--latency-jobs", "5")
    check_figures(figures, 300)
    assert figures["database"].startswith("postgresql")
    assert job_rows(postgres_url) == (0, 0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--jobs", "0"], "--jobs must be at least 1, not 0"),
        (["--workers", "0"], "--workers must be at least 1, not 0"),
        (["--workers", "100000"], "--workers must be at most 256, not 100000"),
        (["--claim-batch", "-3"], "--claim-batch must be at least 1, not -3"),
        (["--concurrency", "0"], "--concurrency must be at least 1, not 0"),
        (["--latency-jobs", "-1"], "--latency-jobs must be 0 or more"),
        (["--sleep", "soon"], "--sleep: 'soon' is not a duration"),
    ],
)
def test_bad_values_are_refused_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    path = tmp_path / "untouched.db"
    result = run_jobsup("bench", *args, "--database-url", f"sqlite:///{path}")
    assert result.returncode == 2, result
    assert result.stderr.startswith("jobsup: ") and message in result.stderr, result.stderr
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
    assert not path.exists(), "refused before touching the database"


def test_queue_delete_deletes_one_queue_with_its_attempts(url: str) -> None:
    client = Client(url)
    try:
        mine = client.enqueue_many([{"name": "x", "queue": "bench"}] * 5, allow_unknown=True)
        other = client.enqueue_many([{"name": "x", "queue": "other"}] * 3, allow_unknown=True)
        succeed(client, claim(client, queue="bench", limit=2))
        claim(client, queue="bench", limit=1)  # one left running
        succeed(client, claim(client, queue="other", limit=1))  # an attempt row: written when it ends
        assert client.store.retention.queue_delete("bench", after=mine[2]) == 2  # above the cursor only
        assert client.store.retention.queue_delete("bench", batch=2) == 3
        assert client.store.retention.queue_delete("bench") == 0
        assert [j.id for j in client.list_jobs(limit=10)] == sorted(other, reverse=True)
        assert job_rows(url) == (3, 1), "the other queue's job and attempt are left"
    finally:
        client.close()
