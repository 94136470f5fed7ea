"""Store-level promises the hardening review found broken, on the real databases: attempt
numbers, a cancel racing a claim, ids never reused, results, cron catch-up, secrets in URLs
and errors, and the SQLite file's permissions. (The issue's item number is in each
docstring.)"""

from __future__ import annotations

import os
import stat
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import insert, text

import jobsup
from jobsup import cron
from jobsup.errors import DatabaseUnavailable
from jobsup.scrub import error_text, secrets_of
from jobsup.store.database import Database
from jobsup.store.rows import ClaimedJob
from jobsup.store.schema import job, queue_state
from jobsup.worker.execute import RESULT_CAP, execute

from helpers import claim, claim_one, fail, lock_waiters, succeed, wait_until

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def test_attempt_numbers_only_go_up_across_a_dead_letter_retry(client: jobsup.Client) -> None:
    """Item 7: a retry from dead letters grants the job's own budget again, on top."""
    job_id = client.enqueue("a", max_attempts=2)
    for _ in range(2):
        fail(client, claim_one(client), error="boom")
    assert client.get(job_id).status == "dead_lettered"  # type: ignore[union-attr]
    assert client.dead_letters.retry(job_id)
    third = claim_one(client)
    assert third.attempt == 3  # what ctx.attempt says
    fail(client, third, error="boom")
    fourth = claim_one(client)
    succeed(client, [fourth])
    stored = client.get(job_id)
    assert stored is not None and (stored.attempts, stored.max_attempts) == (4, 4)
    assert [(a.attempt, a.outcome) for a in stored.history] == [
        (1, "failed"),
        (2, "failed"),
        (3, "failed"),
        (4, "succeeded"),
    ]
    # Each round grants the job's own budget again, not the grown maximum.
    other = client.enqueue("a", max_attempts=1)
    fail(client, claim_one(client), error="boom")
    client.dead_letters.retry(other)
    fail(client, claim_one(client), error="boom")
    client.dead_letters.retry(other)
    assert client.get(other).max_attempts == 3  # type: ignore[union-attr]


@pytest.mark.postgres
def test_a_cancel_racing_a_claim_asks_the_claimed_job_to_stop(postgres_url: str) -> None:
    """Item 12: the cancel waits on the claim's row lock and then sees a running job: it asks
    it to stop, and leaves its attempt open for the end its worker writes."""
    client = jobsup.Client(postgres_url)
    job_id = client.enqueue("a")
    dialect = client.database.dialect
    from jobsup.store.claim import claim_params

    params = claim_params(dialect, queue="default", owner="racer", limit=1, lease=60.0, now=None)
    claimer = client.database.engine.connect()
    transaction = claimer.begin()
    assert len(claimer.execute(dialect.claim_statement, params).all()) == 1  # type: ignore[attr-defined]
    outcome: list[bool] = []
    cancel = threading.Thread(target=lambda: outcome.append(client.cancel(job_id)))
    cancel.start()
    cancel.join(1.0)
    assert cancel.is_alive(), "the cancel should wait on the claim's row lock"
    transaction.commit()
    claimer.close()
    cancel.join(30)
    assert outcome == [True]
    stored = client.get(job_id)
    assert stored is not None and stored.status == "running" and stored.cancel_requested_at is not None
    assert [(a.attempt, a.outcome, a.finished_at is not None) for a in stored.history] == [(1, None, False)]


def test_job_ids_are_never_reused(client: jobsup.Client) -> None:
    """Item 13: after the newest job is purged, the next one gets a new id."""
    first, newest = client.enqueue("a"), client.enqueue("a")
    fail(client, claim_one(client), error="boom", kind="discarded")  # first dead-lettered
    assert client.cancel(newest)
    with client.database.transaction() as conn:
        conn.execute(job.delete().where(job.c.id == newest))  # as retention would
    later = client.enqueue("a")
    assert later > newest > first


def test_a_result_too_large_or_not_json_is_dropped_and_the_job_still_succeeds() -> None:
    """Item 11: a return value is kept when it is JSON and not too large."""

    @jobsup.job("returns-what-it-is-given")
    def echo(ctx: jobsup.JobContext, payload: object) -> object:
        return {"big": "x" * RESULT_CAP} if payload == "big" else (object() if payload == "odd" else payload)

    def ran(payload: str) -> tuple[str, str | None]:
        outcome = execute(
            ClaimedJob(1, "returns-what-it-is-given", "q", payload, 1, 5, None, None, "w"), threading.Event()
        )
        return outcome.kind, outcome.result

    assert ran('{"n": 1}') == ("succeeded", '{"n":1}')
    assert ran('"big"') == ("succeeded", None)
    assert ran('"odd"') == ("succeeded", None)


def test_a_result_is_stored_and_shown(client: jobsup.Client) -> None:
    """Item 11: the success stores the result; `get` shows it."""
    job_id = client.enqueue("a")
    succeed(client, [claim_one(client)], result='{"rows": 3}')
    assert client.get(job_id).result == {"rows": 3}  # type: ignore[union-attr]


def test_catching_up_after_a_long_downtime_costs_what_a_short_one_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 10: the latest missed slot is found backwards from now, not by stepping forwards."""
    steps = {"count": 0}
    real = cron.croniter

    class Counting(real):  # type: ignore[misc, valid-type]
        def get_prev(self, *args: object, **kwargs: object) -> object:
            steps["count"] += 1
            return super().get_prev(*args, **kwargs)

        def get_next(self, *args: object, **kwargs: object) -> object:
            steps["count"] += 1
            return super().get_next(*args, **kwargs)

    monkeypatch.setattr(cron, "croniter", Counting)
    counts = {}
    for downtime in (timedelta(minutes=5), timedelta(days=365)):
        steps["count"] = 0
        slot = cron.latest_slot("* * * * *", "UTC", T0 - downtime, T0)
        assert slot == T0
        counts[downtime.days] = steps["count"]
    assert counts[365] <= counts[0] + 5, counts  # about the same, not 525,000 steps more


def test_a_cron_with_a_seconds_field_is_refused() -> None:
    """Item 10: six fields would fire by the second; jobsup fires by the minute."""
    with pytest.raises(jobsup.BadInput, match="has 6 fields; jobsup takes five"):
        cron.check_cron("*/10 * * * * *")
    assert cron.check_cron("@hourly") == "@hourly"


def every_minute(client: jobsup.Client, name: str) -> None:
    client.store.recurring.recurring_upsert(
        name=name, job_name="a", cron="* * * * *", timezone="UTC", payload="null", queue="default", priority=0, now=T0
    )


def test_a_long_catch_up_fires_once_and_moves_on(client: jobsup.Client) -> None:
    """Item 10: a year of missed every-minute slots is one fire, then the next slot."""
    from jobsup.supervisor.recurring import CronTick

    every_minute(client, "minutely")
    a_year_later = T0 + timedelta(days=365, seconds=30)
    assert CronTick(client.store).run_once(now=a_year_later) == 1
    schedule = client.store.recurring.recurring_get("minutely")
    assert schedule is not None and schedule.next_run_at == T0 + timedelta(days=365, minutes=1)


def test_the_cron_tick_stops_when_its_time_budget_is_spent(client: jobsup.Client) -> None:
    """Item 10: a tick is bounded; what is still due waits for the next tick."""
    from jobsup.supervisor.recurring import CronTick

    for n in range(30):
        every_minute(client, f"s{n}")
    tick = CronTick(client.store, budget=0.0)  # room for one fire per tick
    at = T0 + timedelta(minutes=1)
    assert tick.run_once(now=at) == 1
    assert tick.run_once(now=at) == 1
    fired = 2
    while more := CronTick(client.store).run_once(now=at):  # each tick takes what fits its budget
        fired += more
    assert fired == 30


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app:hunter2@127.0.0.1:notaport/db",
        "postgresql://app:hunter2@[::1/db",
        "nonsense://app:hunter2@",
    ],
)
def test_a_malformed_url_never_shows_its_password(url: str) -> None:
    """Item 19: one clear line, no password, no traceback."""
    with pytest.raises(jobsup.UnsupportedDatabase) as caught:
        jobsup.Client(url)
    assert "hunter2" not in str(caught.value)


@pytest.mark.postgres
def test_postgres_is_the_common_alias_of_postgresql(pg_server: str) -> None:
    """Item 19: `postgres://` is accepted."""
    client = jobsup.Client("postgres://postgres@127.0.0.1:5432/postgres")
    assert client.database.url.drivername == "postgresql+psycopg"
    with client.database.read() as conn:
        assert conn.execute(text("SELECT 1")).scalar_one() == 1


def test_secret_values_are_masked_in_any_letter_case_and_keys_are_not() -> None:
    """Item 20, revised by the 2026-12-03 reviews: a stored error hides the payload's long
    and sensitive values in any letter case, not its keys or short values."""
    payload = {"alice@example.com": "x", "token": "Bearer ABCDEF123", "n": 7}
    secrets = secrets_of(payload, {"token"})
    assert error_text(KeyError("alice@example.com"), secrets) == "KeyError: 'alice@example.com'"
    assert error_text(ValueError("auth failed: bearer abcdef123"), secrets) == "ValueError: auth failed: ***"
    assert error_text(ValueError("ABCDEF123 rejected, 7 tries in 1977"), secrets) == (
        "ValueError: *** rejected, 7 tries in 1977"
    )


def test_the_sqlite_database_and_its_wal_are_private(tmp_path: Path) -> None:
    """Item 21: payloads are not for the other users of the host."""
    old = os.umask(0o022)
    try:
        path = tmp_path / "private.db"
        client = jobsup.Client(f"sqlite:///{path}")
        from jobsup.store import migrate

        migrate.upgrade(client.database)
        connection = client.database.engine.connect()  # holds the WAL open
        client.enqueue("a")
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir() if p.name.startswith("private")}
        connection.close()
    finally:
        os.umask(old)
    assert modes == {"private.db": 0o600, "private.db-wal": 0o600, "private.db-shm": 0o600}, modes


def test_retry_all_retries_the_others_when_one_dead_letter_cannot_be(client: jobsup.Client) -> None:
    blocked = client.enqueue("a", unique_key="k", max_attempts=1)
    fail(client, claim_one(client), error="boom")
    others = [client.enqueue("a", max_attempts=1) for _ in range(2)]
    for claimed in claim(client, limit=2):
        fail(client, claimed, error="boom")
    client.enqueue("a", unique_key="k")  # a live job now holds the blocked one's key
    assert client.dead_letters.retry_all() == 2
    assert client.get(blocked).status == "dead_lettered"  # type: ignore[union-attr]
    assert [client.get(j).status for j in others] == ["pending", "pending"]  # type: ignore[union-attr]


READ_ONLY = {"postgres_url": "SET TRANSACTION READ ONLY", "mariadb_url": "START TRANSACTION READ ONLY"}


@pytest.mark.parametrize(
    "server",
    [pytest.param("postgres_url", marks=pytest.mark.postgres), pytest.param("mariadb_url", marks=pytest.mark.mariadb)],
)
def test_a_write_refused_as_read_only_is_unavailable_not_a_refusal(server: str, request: pytest.FixtureRequest) -> None:
    """A server read-only for now (a standby during a failover) is waited out like a lost
    connection: a plain DatabaseError would make the job log drop the lines it holds."""
    db = Database(request.getfixturevalue(server))
    try:
        with (
            pytest.raises(DatabaseUnavailable, match=r"takes no work for now: .*(?i:read.only)"),
            db.transaction() as conn,
        ):
            conn.execute(text(READ_ONLY[server]))
            conn.execute(job.delete())
    finally:
        db.dispose()


@pytest.mark.parametrize(
    "server",
    [pytest.param("postgres_url", marks=pytest.mark.postgres), pytest.param("mariadb_url", marks=pytest.mark.mariadb)],
)
def test_pauses_waiting_on_a_first_pause_both_find_the_queue_paused(
    server: str, request: pytest.FixtureRequest
) -> None:
    """Two pauses of a queue with no row yet wait for another transaction inserting it; once
    that commits both find the queue paused already. (On MariaDB each waiter's failed INSERT
    kept a shared lock on the row, and their UPDATEs then deadlocked: CI saw it.)"""
    url = request.getfixturevalue(server)
    client = jobsup.Client(url)
    results: list[object] = []

    def pause(n: int) -> None:
        try:
            results.append(client.queues.pause("mail", actor=f"op{n}", allow_unknown=True))
        except jobsup.DatabaseError as exc:
            results.append(exc)

    threads = [threading.Thread(target=pause, args=(n,)) for n in range(2)]
    with client.database.engine.begin() as first:
        row = {"queue": "mail", "paused": True, "changed_by": "first", "changed_at": datetime.now(UTC)}
        first.execute(insert(queue_state).values(row))
        for thread in threads:
            thread.start()
        wait_until(lambda: lock_waiters(url) >= 2, timeout=30, what="both pauses to wait for the first")
    for thread in threads:
        thread.join(30)
    assert results == [False, False]
    client.close()
