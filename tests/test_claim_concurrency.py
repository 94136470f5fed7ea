"""The claim under real competition: separate OS processes on one database.

Each claimer is a forked process that opens its own connections (never the parent's).
"""

from __future__ import annotations

import multiprocessing
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

import jobsup
from jobsup.store.claim import claim_params
from jobsup.store.database import Database
from jobsup.store.rows import SUCCEEDED, Outcome
from jobsup.store.schema import job, job_attempt
from jobsup.store.store import Store

from helpers import claim, fail, succeed

# Thousands of contended claims per run; at 5,000 the rollback journal's one-job claims took
# 48 s of the suite (each claim and settle a synced commit).
JOBS = 2500
PROCESSES = 4


def _claimer(url: str, owner: str, batch: int, start: Any, results: Any) -> None:
    store = Store(Database(url))
    start.wait(30)
    claimed: list[int] = []
    while True:
        jobs = store.transitions.claim("default", owner, limit=batch, lease=300.0)
        if not jobs and not store.reads.job_list(status="pending", limit=1):
            break
        claimed.extend(job.id for job in jobs)
        settled = store.transitions.complete([Outcome(job.held, SUCCEEDED) for job in jobs])
        assert settled == {job.id for job in jobs}
    results.put((owner, claimed))


def run_claimers(url: str, batch: int) -> dict[str, list[int]]:
    ctx = multiprocessing.get_context("fork")
    start, results = ctx.Event(), ctx.Queue()
    workers = [
        ctx.Process(target=_claimer, args=(url, f"claimer-{n}", batch, start, results)) for n in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    start.set()
    claims = dict(results.get(timeout=300) for _ in workers)
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0
    return claims


@pytest.fixture(
    params=[
        "sqlite-wal",
        "sqlite-rollback-journal",
        pytest.param("postgresql", marks=pytest.mark.postgres),
    ]
)
def competing_url(request: pytest.FixtureRequest) -> str:
    if request.param == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    url = str(request.getfixturevalue("sqlite_url"))
    return url if request.param == "sqlite-wal" else url + "?journal_mode=delete"


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 7])
def test_four_processes_claim_every_job_exactly_once(competing_url: str, batch: int) -> None:
    client = jobsup.Client(competing_url)
    client.enqueue_many([{"name": "noop", "payload": n} for n in range(JOBS)])
    claims = run_claimers(competing_url, batch)
    every = [job_id for ids in claims.values() for job_id in ids]
    assert len(every) == JOBS
    assert len(set(every)) == JOBS, "a job was claimed twice"
    assert sum(1 for ids in claims.values() if ids) >= 2, "the claimers did not compete"
    with client.database.read() as conn:
        statuses = dict(conn.execute(select(job.c.status, func.count()).group_by(job.c.status)).all())
        attempts = conn.execute(select(func.count()).select_from(job_attempt)).scalar_one()
    assert statuses == {"succeeded": JOBS}
    assert attempts == JOBS
    client.close()


def test_journal_mode_is_applied(sqlite_url: str) -> None:
    from sqlalchemy import text

    for suffix, mode in (("", "wal"), ("?journal_mode=delete", "delete")):
        db = Database(sqlite_url + suffix)
        with db.read() as conn:
            assert conn.execute(text("PRAGMA journal_mode")).scalar_one() == mode
        db.dispose()


# -- the SQLite race: the row changes between the claimer's read and its update ----------

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def _sqlite_parts(url: str) -> tuple[jobsup.Client, Any, Database]:
    client = jobsup.Client(url)
    return client, client.database.dialect, client.database


def _params(dialect: Any, owner: str = "late") -> dict[str, Any]:
    return claim_params(dialect, queue="default", owner=owner, limit=1, lease=60.0, now=T0)


def test_sqlite_claim_skips_a_job_settled_between_read_and_update(sqlite_url: str) -> None:
    client, dialect, db = _sqlite_parts(sqlite_url)
    job_id = client.enqueue("a")
    seen = dialect.claim_candidates(db, _params(dialect))
    assert seen == [job_id]
    # Meanwhile another claimer takes the job and finishes it.
    other = claim(client, "other", now=T0)
    assert succeed(client, other, now=T0) == {job_id}
    assert dialect.claim_update(db, seen, _params(dialect), None) == []
    stored = client.get(job_id)
    assert stored is not None and (stored.status, stored.attempts) == ("succeeded", 1)
    assert [a.owner for a in stored.history] == ["other"]


def test_sqlite_claim_skips_a_job_rescheduled_between_read_and_update(sqlite_url: str) -> None:
    client, dialect, db = _sqlite_parts(sqlite_url)
    job_id = client.enqueue("a")
    seen = dialect.claim_candidates(db, _params(dialect))
    other = claim(client, "other", now=T0)
    fail(client, other[0], retry_in=3600, now=T0)
    assert client.get(job_id).status == "pending"  # type: ignore[union-attr]
    assert dialect.claim_update(db, seen, _params(dialect), None) == []


def test_sqlite_claim_skips_a_job_cancelled_between_read_and_update(sqlite_url: str) -> None:
    client, dialect, db = _sqlite_parts(sqlite_url)
    job_id = client.enqueue("a")
    seen = dialect.claim_candidates(db, _params(dialect))
    assert client.cancel(job_id)
    assert dialect.claim_update(db, seen, _params(dialect), None) == []
    assert client.get(job_id).history == ()  # type: ignore[union-attr]


def test_an_attempt_row_that_cannot_be_written_leaves_its_job_running(sqlite_url: str) -> None:
    """A job's end and its attempt's row commit together or not at all (on SQLite two
    statements in one transaction): a refused row leaves the job running, its lease held."""
    from sqlalchemy import text

    client, _, db = _sqlite_parts(sqlite_url)
    job_id = client.enqueue("a")
    (claimed,) = claim(client)
    with db.transaction() as conn:  # make the attempt's row fail inside the settle
        conn.execute(
            text("CREATE TRIGGER refuse BEFORE INSERT ON jobsup_job_attempt BEGIN SELECT RAISE(ABORT, 'injected'); END")
        )
    with pytest.raises(jobsup.DatabaseError, match="injected"):
        succeed(client, [claimed])
    stored = client.get(job_id)
    assert stored is not None and (stored.status, stored.attempts, stored.lease_owner) == ("running", 1, "w1")
    assert [(a.attempt, a.outcome) for a in stored.history] == [(1, None)]  # the one under way
    with db.transaction() as conn:
        conn.execute(text("DROP TRIGGER refuse"))
    assert succeed(client, [claimed]) == {job_id}
    ended = client.get(job_id)
    assert ended is not None and [(a.attempt, a.outcome) for a in ended.history] == [(1, "succeeded")]


def test_claim_with_now_in_the_past_does_not_take_later_jobs(url: str) -> None:
    client = jobsup.Client(url)
    client.enqueue("a", run_at=T0 + timedelta(seconds=1))
    assert claim(client, lease=1.0, now=T0) == []
    assert len(claim(client, lease=1.0, now=T0 + timedelta(seconds=1))) == 1
